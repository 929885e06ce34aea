"""The numbers a training step logs about what it sampled and how its updates went (``Trainer.train_step``
adds the timings and the KL): one place, so that every algorithm reports the same quantities."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..core.advantages import dynamic_sampling_keep
from ..core.losses import POLICY_LOSS_STATS
from .batch import Batch, Sampled

UPDATE_STATS = ("loss", "grad_norm", "entropy")
"""What every policy update reports besides ``policy_loss``'s stats (PPO adds ``value_loss``)."""


def sampling_stats(correct: torch.Tensor, rewards: torch.Tensor, group_size: int) -> dict[str, float]:
    """Two numbers about the groups as sampled, before any filter.

    ``zero_std_frac``: the share of groups whose answers are all right or all wrong (correctness,
    the quantity DAPO's filter tests). ``reward_std_within_group``: the standard deviation (N-1) of
    the *rewards* (shaped, as the advantages see them) within each group, averaged over groups;
    for every algorithm the same quantity, on the first generation round. Both are NaN for groups
    of one (PPO may sample a single completion per prompt): such groups have no spread to measure.
    """
    if group_size < 2:
        return {"zero_std_frac": float("nan"), "reward_std_within_group": float("nan")}
    return {
        "zero_std_frac": float(1 - dynamic_sampling_keep(correct, group_size).float().mean()),
        "reward_std_within_group": float(rewards.view(-1, group_size).std(dim=1).mean()),
    }


def reduce_updates(outs: list[dict[str, float]]) -> dict[str, float]:
    """One step's numbers from its optimiser steps' stats: every key any update reported, as the
    mean over the updates that reported it, except ``ratio_min``/``ratio_max`` (the extremes).
    With no update at all, the keys every policy update reports are NaN (nothing was measured)."""
    if not outs:
        return {k: float("nan") for k in UPDATE_STATS + POLICY_LOSS_STATS}
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for o in outs for k in o):
        vals = [o[key] for o in outs if key in o]
        if key == "ratio_min":
            out[key] = min(vals)
        elif key == "ratio_max":
            out[key] = max(vals)
        else:
            out[key] = sum(vals) / len(vals)
    return out


def sample_metrics(
    batch: Batch, t_rollout: float, features: Callable[[str], dict[str, float]] | None
) -> dict[str, float]:
    """What the step sampled: accuracy, lengths, the task's ``features`` and speed (tokens of every completion
    generated per second of generation) over everything sampled (also what a filter dropped); the trained
    batch's rewards and truncation; ``batch.stats``."""
    rollout, rewards = batch.rollout, batch.rewards
    everything = torch.ones_like(rewards, dtype=torch.bool)
    seen = batch.sampled or Sampled(batch.correct, rewards, rollout.lengths, rollout.texts, everything, 0)
    metrics = batch_metrics(seen.correct, seen.lengths.float())
    if features is not None:
        metrics.update(feature_metrics(features, seen.texts, seen.correct))
    metrics["reward_mean"] = float(rewards.mean()) if rewards.numel() else float("nan")
    metrics["tokens_per_second"] = float(seen.lengths.sum()) / max(t_rollout, 1e-9)
    metrics["truncated_frac"] = float((~rollout.finished).float().mean()) if rollout.finished.numel() else 0.0
    metrics.update(batch.stats)
    return metrics


def feature_metrics(
    features: Callable[[str], dict[str, float]], texts: list[str], correct: torch.Tensor
) -> dict[str, float]:
    """The task's features (e.g. filler length, format) averaged over all, right and wrong answers."""
    feats = [features(t) for t in texts]
    out = {}
    for name in feats[0] if feats else ():
        vals = torch.tensor([f[name] for f in feats], dtype=torch.float64)
        right = correct > 0.5
        out[f"{name}_mean"] = float(vals.mean())
        out[f"{name}_correct"] = float(vals[right].mean()) if right.any() else float("nan")
        out[f"{name}_wrong"] = float(vals[~right].mean()) if (~right).any() else float("nan")
    return out


def batch_metrics(correct: torch.Tensor, lengths: torch.Tensor) -> dict[str, float]:
    """Accuracy and mean length, over all answers and over the right and the wrong ones."""
    right, wrong = correct > 0.5, correct <= 0.5
    return {
        "accuracy": float(correct.mean()),
        "length_mean": float(lengths.mean()),
        "length_correct": float(lengths[right].mean()) if right.any() else float("nan"),
        "length_wrong": float(lengths[wrong].mean()) if wrong.any() else float("nan"),
    }
