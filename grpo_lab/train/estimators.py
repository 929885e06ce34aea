"""Advantage estimators: ``Algorithm.advantage`` -> a function of the step's data.

Each estimator takes the same two arguments, all data (no trainer): an ``EstimatorInput`` (the
batch's shaped ``rewards``, the loss ``mask``, the ``group_size``, and what some estimators need:
``sampled`` for GFPO, the log-probs and the critic's ``values`` for GAE) and the ``Algorithm``. It
returns ``Advantages``. The registry is keyed like verl's advantage estimators; ``Trainer.prepare``
is its one caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..algorithms import Algorithm
from ..core.advantages import gae, gfpo_advantages, group_advantages, whiten
from ..core.rewards import kl_shaped_rewards
from .batch import Advantages, Sampled


@dataclass(frozen=True)
class EstimatorInput:
    """What an advantage estimator reads of one step: ``Batch.rewards`` and ``Batch.sampled``, and what
    ``Trainer.prepare`` computes before the update (the loss mask, the log-probs, the critic's values)."""

    rewards: torch.Tensor  # [B] shaped rewards, consecutive rows a group
    mask: torch.Tensor  # [B, T] the tokens that enter the loss
    group_size: int  # completions kept per prompt
    sampled: Sampled | None = None  # GFPO: everything sampled, before the filter
    old_logp: torch.Tensor | None = None  # [B, T] under the sampling policy
    ref_logp: torch.Tensor | None = None  # [B, T] under the reference
    values: torch.Tensor | None = None  # [B, T] the critic's values (GAE)


AdvantageEstimator = Callable[[EstimatorInput, Algorithm], Advantages]
ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}
"""``Algorithm.advantage`` -> its estimator, ``estimate(data, algo)``."""


def _estimator(name: str) -> Callable[[AdvantageEstimator], AdvantageEstimator]:
    def register(fn: AdvantageEstimator) -> AdvantageEstimator:
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn

    return register


@_estimator("group")
def group_estimator(data: EstimatorInput, algo: Algorithm) -> Advantages:
    """GRPO family: each reward against its group's (consecutive rows) mean, scaled by ``algo.scale``."""
    return Advantages(group_advantages(data.rewards, data.group_size, scale=algo.scale))


@_estimator("gfpo")
def gfpo_estimator(data: EstimatorInput, algo: Algorithm) -> Advantages:
    """GFPO: group statistics over the retained responses of each *sampled* group, for the kept rows."""
    sampled = data.sampled
    if sampled is None:
        raise ValueError("sampled must be given for GFPO's advantages (every completion of each group), got None")
    return Advantages(gfpo_advantages(sampled.rewards, sampled.keep, sampled.group_size)[sampled.keep])


@_estimator("gae")
@torch.no_grad()
def gae_estimator(data: EstimatorInput, algo: Algorithm) -> Advantages:
    """PPO: KL-shaped token rewards (against the reference, or the sampling policy when there is
    none), GAE over the critic's ``values``, then whitened advantages."""
    values, old_logp, mask = data.values, data.old_logp, data.mask
    if values is None or old_logp is None:
        raise ValueError("values and old_logp must be given for GAE (the critic's values, the sampling log-probs)")
    reference = data.ref_logp if data.ref_logp is not None else old_logp
    token_rewards = kl_shaped_rewards(data.rewards, old_logp, reference, mask, algo.beta)
    raw, returns = gae(token_rewards, values, mask, algo.gamma, algo.lam)
    # The returns are taken before whitening (docs/ALGORITHMS.md, PPO's common pitfall 1).
    return Advantages(whiten(raw, mask), returns=returns, old_values=values)
