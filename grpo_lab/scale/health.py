"""Health metrics TRL's ``GRPOTrainer`` does not log, for the exported TRL recipe (whose script carries this
module's source, so it runs without grpo_lab installed).

TRL 1.16 logs ``reward_std`` as the std over the whole batch; the lab's within-group reward std, the signal that
groups still carry a gradient, has no TRL key. ``with_group_health`` wraps the task's reward function and reports,
through the ``log_metric`` argument TRL passes to every reward function (averaged over each logging step, next to
TRL's own metrics, in TensorBoard and ``log_history`` alike), ``health/reward_std_within_group`` and
``health/zero_std_frac``, both of the rewards the wrapped function returns: where the recipe adds a second reward
function (DAPO's overlong penalty), they leave it out, unlike the lab's within-group std and TRL's
``frac_reward_zero_std``, which see the summed reward. TRL hands a reward function each prompt's completions one after
another, so a group is a run of equal prompts.

At ``beta = 0`` TRL 1.16 loads no reference model and logs no ``kl``. ``measuring_kl_to_start`` makes a
``GRPOTrainer`` that still logs ``health/kl_to_start``: the KL of the policy that sampled a rollout to the starting
weights, as the lab logs ``kl``. Scope: every rollout (all its completions, every process), measured once, when it
has been generated and before any update on it; the per-token k3 estimate ``exp(s - l) - (s - l) - 1`` (``l`` the
sampling policy's log-prob of each sampled token, ``s`` the starting weights', both as TRL computes log-probs, at
the sampling temperature), averaged over all completion tokens; the logged value is the mean over the rollouts since
the last log, absent from a log with none (``eval_health/kl_to_start`` for validation rollouts). Cost: TRL's own
reference model (the weights of ``--model``, so a resumed run still measures from the start), as at ``beta > 0``,
and one forward pass of it per rollout; the sampling policy's log-probs are TRL's own when it computes them (always
with vLLM's importance-sampling correction, on in the recipe), one more forward pass when not. At ``beta > 0`` it
measures nothing: TRL's ``kl`` is there (k3 of the policy being updated, on the same samples).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

KL_TO_START = "health/kl_to_start"
"""The log key of the KL to the starting weights at beta = 0."""


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


def k3_sum_and_count(logp: torch.Tensor, start_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[sum of k3 over the tokens mask keeps, number of those tokens]``: k3 = exp(s - l) - (s - l) - 1 for the
    sampling policy's log-probs ``l`` and the starting weights' ``s`` of the sampled tokens; its mean over samples of
    the policy is the KL of the policy to the start, per token."""
    log_r = start_logp.float() - logp.float()
    k3 = torch.expm1(log_r) - log_r  # expm1 keeps k3 exact near r = 1
    mask = mask.float()
    return torch.stack([(k3 * mask).sum(), mask.sum()])


def measuring_kl_to_start(trainer_cls: type) -> type:
    """``trainer_cls`` (TRL 1.16's ``GRPOTrainer``) that, at ``beta = 0``, logs ``KL_TO_START`` for every rollout;
    the loss is TRL's without a KL term. Unchanged at ``beta > 0``, with ``sync_ref_model`` or a ``peft_config``
    (a model passed already wrapped by PEFT is not supported; the exported script passes a path)."""

    class GRPOTrainerMeasuringKLToStart(trainer_cls):
        def __init__(self, *args: object, **kwargs: object) -> None:
            config = kwargs.get("args")
            if config is None:
                raise TypeError(f"args must be given by keyword (a GRPOConfig), got {kwargs.get('args')!r}")
            measure = config.beta == 0.0 and not config.sync_ref_model and kwargs.get("peft_config") is None
            if measure:
                config.beta = 1.0  # TRL loads its reference model (ready for DeepSpeed or FSDP) only at beta != 0
            try:
                super().__init__(*args, **kwargs)
            finally:
                if measure:
                    config.beta = 0.0
            if measure:
                self.beta = 0.0  # TRL's loss and its reference log-probs read self.beta: no KL term, no `kl`
            self.measures_kl_to_start = measure

        def _generate_and_score_completions(self, inputs: list) -> dict:
            output = super()._generate_and_score_completions(inputs)
            if self.measures_kl_to_start:
                mode = "train" if self.model.training else "eval"
                self._metrics[mode][KL_TO_START].append(self._kl_to_start(output, mode))
            return output

        def _kl_to_start(self, output: dict, mode: str) -> float:
            ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
            attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
            keep = output["completion_ids"].size(1)
            size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
            with torch.no_grad():
                start_logp = self._get_per_token_logps_and_entropies(self.ref_model, ids, attention, keep, size)[0]
                logp = output.get("old_per_token_logps")
                if logp is None:  # TRL skips it when the policy being updated is the one that sampled
                    logp = self._get_per_token_logps_and_entropies(self.model, ids, attention, keep, size)[0]
            mask = output["completion_mask"] * output.get("tool_mask", 1)
            total, count = self.accelerator.reduce(k3_sum_and_count(logp, start_logp, mask), reduction="sum").tolist()
            return total / max(count, 1.0)

    return GRPOTrainerMeasuringKLToStart
