"""Advantage estimators: ``Algorithm.advantage`` -> a function of the step's data.

Each estimator takes the same arguments, all data (no trainer): the batch's shaped ``rewards``
``[B]``, the loss ``mask`` ``[B, T]``, the ``Algorithm``, the ``group_size`` (completions kept per
prompt), and by keyword what some of them need: ``sampled`` (GFPO: everything sampled, before the
filter), ``old_logp``/``ref_logp`` ``[B, T]`` and the critic's ``values`` ``[B, T]`` (GAE). It
returns ``Advantages``. The registry is keyed like verl's advantage estimators; ``Trainer.prepare``
is its one caller.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..algorithms import Algorithm
from ..core.advantages import gae, gfpo_advantages, group_advantages, whiten
from ..core.rewards import kl_shaped_rewards
from .batch import Advantages, Sampled

AdvantageEstimator = Callable[..., Advantages]
ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}
"""``Algorithm.advantage`` -> its estimator (see the module docstring for the arguments)."""


def _estimator(name: str) -> Callable[[AdvantageEstimator], AdvantageEstimator]:
    def register(fn: AdvantageEstimator) -> AdvantageEstimator:
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn

    return register


@_estimator("group")
def group_estimator(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    algo: Algorithm,
    group_size: int,
    *,
    sampled: Sampled | None = None,
    old_logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
) -> Advantages:
    """GRPO family: each reward against its group's (consecutive rows) mean, scaled by ``algo.scale``."""
    return Advantages(group_advantages(rewards, group_size, scale=algo.scale))


@_estimator("gfpo")
def gfpo_estimator(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    algo: Algorithm,
    group_size: int,
    *,
    sampled: Sampled | None = None,
    old_logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
) -> Advantages:
    """GFPO: group statistics over the retained responses of each *sampled* group, for the kept rows."""
    if sampled is None:
        raise ValueError("sampled must be given for GFPO's advantages (every completion of each group), got None")
    return Advantages(gfpo_advantages(sampled.rewards, sampled.keep, sampled.group_size)[sampled.keep])


@_estimator("gae")
@torch.no_grad()
def gae_estimator(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    algo: Algorithm,
    group_size: int,
    *,
    sampled: Sampled | None = None,
    old_logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
) -> Advantages:
    """PPO: KL-shaped token rewards (against the reference, or the sampling policy when there is
    none), GAE over the critic's ``values``, then whitened advantages."""
    if values is None or old_logp is None:
        raise ValueError("values and old_logp must be given for GAE (the critic's values, the sampling log-probs)")
    reference = ref_logp if ref_logp is not None else old_logp
    token_rewards = kl_shaped_rewards(rewards, old_logp, reference, mask, algo.beta)
    raw, returns = gae(token_rewards, values, mask, algo.gamma, algo.lam)
    # The returns are taken before whitening (docs/ALGORITHMS.md, PPO's common pitfall 1).
    return Advantages(whiten(raw, mask), returns=returns, old_values=values)
