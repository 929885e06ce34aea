"""Health metrics TRL's ``GRPOTrainer`` does not log, for the exported TRL recipe (whose script carries this
module's source, so it runs without grpo_lab installed).

TRL 1.16 logs ``reward_std`` as the std over the whole batch; the lab's within-group reward std, the signal that
groups still carry a gradient, has no TRL key. ``with_group_health`` wraps the task's reward function and reports,
through the ``log_metric`` argument TRL passes to every reward function (averaged over each logging step, next to
TRL's own metrics, in TensorBoard and ``log_history`` alike), ``health/reward_std_within_group`` and
``health/zero_std_frac``. TRL hands a reward function each prompt's completions one after another, so a group is a
run of equal prompts.
"""

from __future__ import annotations

import math
from collections.abc import Callable


def group_health(prompts: list, rewards: list[float]) -> dict[str, float]:
    """The mean over groups (runs of equal prompts, two completions or more) of the rewards' (N-1) std, and the
    share of groups whose rewards are all equal; empty when there is no group."""
    stds, start = [], 0
    for i in range(1, len(prompts) + 1):
        if i == len(prompts) or prompts[i] != prompts[start]:
            group = [float(r) for r in rewards[start:i]]
            if len(group) >= 2:
                mean = sum(group) / len(group)
                stds.append(math.sqrt(sum((r - mean) ** 2 for r in group) / (len(group) - 1)))
            start = i
    if not stds:
        return {}
    return {
        "health/reward_std_within_group": sum(stds) / len(stds),
        "health/zero_std_frac": sum(s == 0.0 for s in stds) / len(stds),
    }


def with_group_health(reward_fn: Callable[..., list[float]]) -> Callable[..., list[float]]:
    """``reward_fn`` (TRL's signature) that also logs ``group_health`` of what it returns through ``log_metric``."""

    def recorded(prompts, completions, **kwargs):
        rewards = reward_fn(prompts, completions, **kwargs)
        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            for name, value in group_health(prompts, rewards).items():
                log_metric(name, value)
        return rewards

    recorded.__name__ = reward_fn.__name__
    return recorded
