"""What is switched on in a run, in words read from its ``Algorithm``, so a notebook never prints a
sentence about the clip or the KL term that the config has since made false."""

from __future__ import annotations

from ..algorithms import Algorithm


def switches(algo: Algorithm) -> str:
    """Two lines: the preset's changes from GRPO, then updates per rollout, the clip and the KL term."""
    updates = algo.minibatches * algo.epochs
    high = algo.clip_low if algo.clip_high is None else algo.clip_high
    clip = (
        "one update per rollout, so the ratio is 1 when the loss is computed and the clip never acts"
        if updates == 1
        else f"{updates} updates per rollout, so the ratio leaves 1 and the clip [{1 - algo.clip_low:g}, {1 + high:g}] "
        "can act"
    )
    kl = (
        f"KL {'in the reward' if algo.kl_in_reward else 'in the loss'} with the {algo.kl_kind} estimator"
        if algo.beta > 0
        else "no KL term: KL to the reference is only measured (k3), nothing pulls the policy back"
    )
    return (
        f"{algo.name}: changes from GRPO {algo.changes_from_grpo() or 'none (this is GRPO)'}\n"
        f"  {algo.minibatches} mini-batch(es) x {algo.epochs} epoch(s): {clip}; beta = {algo.beta:g}: {kl}"
    )
