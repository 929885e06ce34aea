"""The four forms one step's data takes on its way through ``Trainer.train_step``.

``Sampled``: every completion the step drew, before a filter chose rows (kept only when one did:
GFPO's top-k, DAPO's dynamic sampling). ``Batch``: the rows to train on, with their rewards, as
``Trainer.collect`` returns them. ``Advantages``: an estimator's output for a ``Batch``
(``estimators.py``). ``UpdateBatch``: a ``Batch`` with everything the optimiser steps read, computed
once per step and sliced per mini-batch. Also here: ``check_batch_shape``, what a step's batch shape
must allow an algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..algorithms import Algorithm
from ..lab.rollout import Rollout


@dataclass(frozen=True)
class Sampled:
    """Every completion a step sampled, before a filter chose the rows to train on (GFPO's top-k; DAPO's
    dynamic sampling, every round of it)."""

    correct: torch.Tensor  # [N] 1.0 right / 0.0 wrong
    rewards: torch.Tensor  # [N] the shaped rewards the advantages are computed from
    lengths: torch.Tensor  # [N] completion lengths in tokens
    texts: list[str]
    keep: torch.Tensor  # [N] bool: the rows that became the batch
    group_size: int  # completions sampled per prompt


@dataclass(frozen=True)
class Batch:
    """What one step trains on, as ``Trainer.collect`` returns it.

    ``stats`` holds the numbers measured while collecting (``gen_rounds``, ``zero_std_frac``,
    ``reward_std_within_group``; DAPO's ``kept_groups``, adaptive GFPO's ``gfpo_k_mean``); they go
    into the step's metrics as they are. ``sampled`` is set when a filter dropped rows: the step's
    accuracy, lengths and speed are then measured on everything sampled, and GFPO's advantages use the
    statistics of each sampled group.
    """

    rollout: Rollout
    correct: torch.Tensor  # [B] 1.0 right / 0.0 wrong, per row of ``rollout``
    rewards: torch.Tensor  # [B] shaped rewards (correctness + DAPO's overlong penalty)
    stats: dict[str, float]
    sampled: Sampled | None = None


@dataclass(frozen=True)
class Advantages:
    """An estimator's output: the advantages, plus the critic's targets when there is a critic."""

    advantages: torch.Tensor  # [B] per sequence or [B, T] per token
    returns: torch.Tensor | None = None  # GAE: the value targets
    old_values: torch.Tensor | None = None  # GAE: the critic's values when the batch was sampled


@dataclass(frozen=True)
class UpdateBatch:
    """A ``Batch`` as the optimiser steps read it: computed once per step, sliced per mini-batch."""

    rollout: Rollout
    mask: torch.Tensor  # [B, T] float: the tokens that enter the loss (DAPO's overlong filter applied)
    advantages: Advantages
    old_logp: torch.Tensor | None  # [B, T] under the policy that sampled; None: on-policy (one update)
    ref_logp: torch.Tensor | None  # [B, T] under the reference; None when there is none
    is_weight: torch.Tensor | None = None  # [B, T] or [B, 1]: the sampler/trainer correction (rollout_is)


def check_batch_shape(algo: Algorithm, prompts_per_step: int, group_size: int) -> None:
    """Refuse, before any work, a batch shape ``algo`` cannot train on: groups of one where it
    compares answers within a group, or more mini-batches than a step's batch can ever have rows
    (``prompts_per_step * group_size``: the rows GFPO keeps, at most what DAPO's filter keeps)."""
    if group_size < 2:
        needs = [
            why
            for why, used in (
                (f"advantage={algo.advantage!r} compares answers within a group", algo.advantage in ("group", "gfpo")),
                ("dynamic_sampling keeps groups whose answers differ", algo.dynamic_sampling),
            )
            if used
        ]
        if needs:
            raise ValueError(f"group_size must be >= 2 for {algo.name} ({'; '.join(needs)}), got {group_size}")
    rows = prompts_per_step * group_size
    if algo.minibatches > rows:
        raise ValueError(
            f"minibatches must be <= the rows of a step's batch (prompts_per_step * group_size = {rows}), "
            f"got {algo.minibatches}"
        )
