"""One training loop for every algorithm.

Each step: sample prompts -> roll out G completions each -> score -> filter (DAPO's dynamic
sampling, GFPO's top-k) -> advantages -> for each mini-batch and epoch: the policy loss
(+ KL, + value loss for PPO) -> guarded optimiser step -> metrics.

The algorithm is data (``algorithms.Algorithm``); this file is the only place that acts on it.
"""

from __future__ import annotations

import copy
import ctypes
import errno
import hashlib
import json
import math
import os
import random
import resource
import secrets
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..core.advantages import (
    adaptive_k,
    dynamic_sampling_keep,
    gae,
    gfpo_advantages,
    gfpo_keep,
    group_advantages,
    reward_quartiles,
    whiten,
)
from ..core.checks import check_positive_int
from ..core.kl import kl_estimate
from ..core.losses import POLICY_LOSS_STATS, masked_mean, policy_loss, value_loss
from ..core.rewards import kl_shaped_rewards, soft_overlong_penalty
from ..lab.metrics import evaluate
from ..lab.models import check_model_folder, load_policy, set_threads
from ..lab.rollout import Rollout, encode_prompts, sample_group, token_logps
from ..lab.tasks import Task, get_task, score_completions
from .config import MAX_SEED, TrainConfig  # noqa: F401 (MAX_SEED: re-exported)


class ValueModel(torch.nn.Module):
    """PPO's critic: a copy of the policy's transformer trunk with a scalar head (V per token)."""

    def __init__(self, policy):
        super().__init__()
        self.trunk = copy.deepcopy(policy.model)  # the base model under a *ForCausalLM
        self.head = torch.nn.Linear(policy.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
    ) -> torch.Tensor:
        ids = torch.cat([prompt_ids, completion_ids], dim=1)
        am = torch.cat([prompt_mask, completion_mask], dim=1)
        pos = (am.cumsum(dim=1) - 1).clamp_min(0)
        h = self.trunk(input_ids=ids, attention_mask=am, position_ids=pos).last_hidden_state
        T = completion_ids.shape[1]
        # V(s_t) is read where the policy reads the logits for token t: one position earlier.
        return self.head(h[:, -T - 1 : -1, :].float()).squeeze(-1) * completion_mask


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


@dataclass(frozen=True)
class Sampled:
    """Every completion a step sampled, before a filter chose the rows to train on (GFPO's top-k)."""

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
    accuracy and lengths are then measured on everything sampled, and GFPO's advantages use the
    statistics of each sampled group.
    """

    rollout: Rollout
    correct: torch.Tensor  # [B] 1.0 right / 0.0 wrong, per row of ``rollout``
    rewards: torch.Tensor  # [B] shaped rewards (correctness + DAPO's overlong penalty)
    stats: dict[str, float]
    sampled: Sampled | None = None


@dataclass(frozen=True)
class Advantages:
    """An estimator's output: advantages, plus the critic's targets when there is a critic."""

    values: torch.Tensor  # [B] per sequence or [B, T] per token
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


AdvantageEstimator = Callable[
    ["Trainer", Batch, torch.Tensor, "torch.Tensor | None", "torch.Tensor | None"], Advantages
]
ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}
"""``Algorithm.advantage`` -> its estimator ``(trainer, batch, mask, old_logp, ref_logp)``, as verl
registers its advantage estimators; ``Trainer.prepare`` is the one caller."""


def _estimator(name: str) -> Callable[[AdvantageEstimator], AdvantageEstimator]:
    def register(fn: AdvantageEstimator) -> AdvantageEstimator:
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn

    return register


@_estimator("group")
def _group_estimator(trainer: "Trainer", batch: Batch, mask, old_logp, ref_logp) -> Advantages:
    """GRPO family: each reward against its group's (consecutive rows) mean, scaled by ``scale``."""
    return Advantages(group_advantages(batch.rewards, trainer.cfg.group_size, scale=trainer.algo.scale))


@_estimator("gfpo")
def _gfpo_estimator(trainer: "Trainer", batch: Batch, mask, old_logp, ref_logp) -> Advantages:
    """GFPO: group statistics over the retained responses of each *sampled* group."""
    s = batch.sampled
    return Advantages(gfpo_advantages(s.rewards, s.keep, s.group_size)[s.keep])


@_estimator("gae")
def _gae_estimator(trainer: "Trainer", batch: Batch, mask, old_logp, ref_logp) -> Advantages:
    """PPO: the critic's values, KL-shaped token rewards, GAE, whitened advantages."""
    ro, a = batch.rollout, trainer.algo
    with torch.no_grad():
        old_values = trainer.critic(ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
        reference = ref_logp if ref_logp is not None else old_logp
        token_rewards = kl_shaped_rewards(batch.rewards, old_logp, reference, mask, a.beta)
        raw_adv, returns = gae(token_rewards, old_values, mask, a.gamma, a.lam)
        adv = whiten(raw_adv, mask)  # returns were taken before whitening (pitfall 1)
    return Advantages(adv, returns=returns, old_values=old_values)


def _sampling_stats(correct: torch.Tensor, rewards: torch.Tensor, group_size: int) -> dict[str, float]:
    """Two numbers about the groups as sampled, before any filter.

    ``zero_std_frac``: the share of groups whose answers are all right or all wrong (correctness,
    the quantity DAPO's filter tests). ``reward_std_within_group``: the standard deviation (N-1) of
    the *rewards* (shaped, as the advantages see them) within each group, averaged over groups;
    for every algorithm the same quantity, on the first generation round.
    """
    return {
        "zero_std_frac": float(1 - dynamic_sampling_keep(correct, group_size).float().mean()),
        "reward_std_within_group": float(rewards.view(-1, group_size).std(dim=1).mean()),
    }


def _reduce_updates(outs: list[dict[str, float]]) -> dict[str, float]:
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


UPDATE_STATS = ("loss", "grad_norm", "entropy")
"""What every policy update reports besides ``policy_loss``'s stats (PPO adds ``value_loss``)."""


class Trainer:
    """Trains a policy with one algorithm. ``Trainer(cfg).train()`` returns the per-step history.

    Pass ``model``/``tokenizer``/``task`` to reuse objects a notebook already holds. ``sampler``
    (called like ``rollout.sample_group``) and ``scorer`` (like ``tasks.score_completions``) replace
    how completions are drawn and scored, e.g. to time them or to switch a speed-up off.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        model=None,
        tokenizer=None,
        task: Task | None = None,
        sampler: Callable[..., Rollout] | None = None,
        scorer: Callable[..., list[float]] | None = None,
    ):
        set_threads()
        self.sampler = sample_group if sampler is None else sampler
        self.scorer = score_completions if scorer is None else scorer
        self.cfg = cfg
        self.algo = cfg.algorithm()
        torch.manual_seed(cfg.seed)
        if model is None:
            model, tokenizer = load_policy(cfg.model, cfg.device)
        elif tokenizer is None:
            raise ValueError("tokenizer must be given together with model")
        self.model, self.tokenizer = model, tokenizer
        self.device = next(model.parameters()).device
        self.task = task or get_task(cfg.task, seed=0)
        needs_ref = cfg.track_kl or self.algo.beta > 0
        self.ref = copy.deepcopy(model).eval().requires_grad_(False) if needs_ref else None
        self.opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.critic = self.critic_opt = None
        if self.algo.advantage == "gae":
            self.critic = ValueModel(model).to(self.device)
            self.critic_opt = torch.optim.AdamW(self.critic.parameters(), lr=self.algo.critic_lr)
        self.prompt_rng = random.Random(cfg.seed)
        self.sample_gen = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.step = 0
        self.history: list[dict] = []
        self.skipped_steps = 0
        self.stop_reason: str | None = None
        self.seen_difficulty: list[float] = []  # GFPO adaptive k: mean reward of every prompt seen
        self.samples_generated = 0

    # --- rollout and scoring ---------------------------------------------------------------

    @staticmethod
    def prompt_indices(rng: random.Random, n_rows: int, n: int) -> list[int]:
        """The training prompt stream: ``n`` row indices in ``[0, n_rows)``, drawn with replacement
        from ``rng`` (the trainer's is ``random.Random(seed)``). Consecutive calls continue one stream,
        so it can be replayed from the seed alone (the benchmark hands TRL the rows the trainer draws)."""
        return [rng.randrange(n_rows) for _ in range(n)]

    def next_prompts(self, n: int) -> dict:
        """The next ``n`` training rows (columns as lists) of the prompt stream."""
        return self.task.train[self.prompt_indices(self.prompt_rng, len(self.task.train), n)]


    def _rollout(self, n_prompts: int, group_size: int):
        rows = self.next_prompts(n_prompts)
        ids, mask = encode_prompts(
            self.tokenizer, rows["prompt"], chat=self.task.chat, system=self.cfg.system_prompt, device=self.device
        )
        ro = self.sampler(
            self.model,
            self.tokenizer,
            ids,
            mask,
            group_size,
            self.cfg.max_new_tokens,
            self.cfg.temperature,
            self.sample_gen,
        )
        answers = [a for a in rows["answer"] for _ in range(group_size)]
        correct = torch.tensor(
            self.scorer(self.task.reward_fn, ro.texts, answers, ro.finished.tolist()),
            dtype=torch.float32,
        )
        self.samples_generated += ro.completion_ids.shape[0]
        return ro, correct

    def _reward(self, ro: Rollout, correct: torch.Tensor) -> torch.Tensor:
        rewards = correct.clone()
        if self.algo.overlong_penalty:
            rewards += soft_overlong_penalty(ro.lengths, self.cfg.max_new_tokens, self.algo.overlong_cache)
        return rewards

    def collect(self) -> Batch:
        """Sample, score and filter one batch to train on.

        DAPO's dynamic sampling refills here; GFPO samples ``gfpo_group_size`` per prompt and keeps
        ``group_size`` of them here. The advantages are computed later, in ``prepare``.
        """
        if self.algo.advantage == "gfpo":
            return self._collect_gfpo()
        a, cfg, G = self.algo, self.cfg, self.cfg.group_size
        ro, correct = self._rollout(cfg.prompts_per_step, G)
        rewards = self._reward(ro, correct)
        stats: dict[str, float] = {"gen_rounds": 1, **_sampling_stats(correct, rewards, G)}
        if not a.dynamic_sampling:
            return Batch(ro, correct, rewards, stats)
        parts, kept_c, kept_r = [], [], []
        n_kept, rounds = 0, 0
        while True:
            # DAPO filters on accuracy (verl: filter_groups.metric=acc), not on shaped rewards:
            # an all-wrong group is dropped even if the length penalty spreads its rewards.
            keep_groups = dynamic_sampling_keep(correct, G)
            rows = keep_groups.repeat_interleave(G)
            parts.append(ro.select(rows))
            kept_c.append(correct[rows])
            kept_r.append(rewards[rows])
            n_kept += int(keep_groups.sum())
            rounds += 1
            if n_kept >= cfg.prompts_per_step or rounds >= a.max_gen_batches:
                break
            ro, correct = self._rollout(cfg.prompts_per_step, G)
            rewards = self._reward(ro, correct)
        ro = Rollout.cat(parts, self.tokenizer.pad_token_id)
        correct, rewards = torch.cat(kept_c), torch.cat(kept_r)
        n = min(n_kept, cfg.prompts_per_step) * G
        stats.update(gen_rounds=rounds, kept_groups=n // G)
        return Batch(ro.select(torch.arange(n)), correct[:n], rewards[:n], stats)

    def _collect_gfpo(self) -> Batch:
        """GFPO: sample G = ``gfpo_group_size`` per prompt, keep k = ``group_size`` (or an adaptive k)."""
        a, cfg = self.algo, self.cfg
        G, k = a.gfpo_group_size, cfg.group_size
        ro, correct = self._rollout(cfg.prompts_per_step, G)
        rewards = self._reward(ro, correct)
        stats: dict[str, float] = {"gen_rounds": 1}
        if a.gfpo_adaptive:
            means = correct.view(-1, G).mean(dim=1)
            if len(self.seen_difficulty) >= 4 * cfg.prompts_per_step:  # enough history for quartiles
                q = reward_quartiles(torch.tensor(self.seen_difficulty))
                by_bucket = (k, k, max(2, k * 3 // 4), max(2, k // 2))
                k = adaptive_k(means, q, k_by_bucket=by_bucket)
            self.seen_difficulty += means.tolist()
            stats["gfpo_k_mean"] = float(k.float().mean()) if isinstance(k, torch.Tensor) else float(k)
        keep = gfpo_keep(rewards, ro.lengths.float(), G, k, metric=a.gfpo_metric)
        stats.update(_sampling_stats(correct, rewards, G))
        sampled = Sampled(correct, rewards, ro.lengths, ro.texts, keep, G)
        # Rejected responses get A = 0 and would add nothing but cost to the backward pass.
        # With adaptive k the number kept varies by prompt, so the batch has no single group size (0).
        kept_per_prompt = k if isinstance(k, int) else 0
        return Batch(ro.select(keep, group_size=kept_per_prompt), correct[keep], rewards[keep], stats, sampled)

    # --- one step --------------------------------------------------------------------------

    @torch.no_grad()
    def _ref_logp(self, ro: Rollout) -> torch.Tensor | None:
        if self.ref is None:
            return None
        logp, _ = token_logps(
            self.ref, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask, self.cfg.temperature
        )
        return logp

    def _loss_mask(self, ro: Rollout) -> torch.Tensor:
        """The tokens that enter the loss: the completion, minus truncated rows under DAPO's overlong filter."""
        mask = ro.completion_mask.float()
        if self.algo.overlong_filter:
            mask = mask * ro.finished.float().unsqueeze(1)
        return mask

    def prepare(self, batch: Batch) -> UpdateBatch:
        """What every optimiser step of this batch reads, computed once: the loss mask, the old and
        reference log-probs, and the advantages (the one place they are computed, through
        ``ADVANTAGE_ESTIMATORS[algo.advantage]``)."""
        a, ro = self.algo, batch.rollout
        mask = self._loss_mask(ro)
        ref_logp = self._ref_logp(ro)
        old_logp = None
        if a.minibatches * a.epochs > 1 or self.critic is not None:  # GAE's KL-shaped rewards need them
            with torch.no_grad():
                old_logp, _ = token_logps(
                    self.model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                    self.cfg.temperature,
                )  # fmt: skip
        advantages = ADVANTAGE_ESTIMATORS[a.advantage](self, batch, mask, old_logp, ref_logp)
        return UpdateBatch(ro, mask, advantages, old_logp, ref_logp)

    def train_step(self, batch: Batch | None = None) -> dict:
        """Collect a batch and update the policy on it; returns this step's metrics.

        ``batch``: update on this ``collect()`` result instead of sampling a new one (so that two
        update rules can be applied to the same batch, as ``experiments.paired_updates`` does).
        The batch is not changed.
        """
        a, cfg = self.algo, self.cfg
        t0 = time.perf_counter()
        batch = self.collect() if batch is None else batch
        t_rollout = time.perf_counter() - t0
        ro, rewards = batch.rollout, batch.rewards
        # Accuracy and lengths describe everything sampled, also what a filter dropped.
        everything = torch.ones_like(rewards, dtype=torch.bool)
        seen = batch.sampled or Sampled(batch.correct, rewards, ro.lengths, ro.texts, everything, 0)
        metrics = {"step": self.step + 1}
        metrics.update(self._batch_metrics(seen.correct, seen.lengths.float()))
        if self.task.features is not None:
            metrics.update(self._feature_metrics(seen.texts, seen.correct))
        metrics["reward_mean"] = float(rewards.mean()) if rewards.numel() else float("nan")
        metrics["tokens_per_second"] = float(seen.lengths.sum()) / max(t_rollout, 1e-9)
        metrics["truncated_frac"] = float((~ro.finished).float().mean()) if ro.finished.numel() else 0.0
        metrics.update(batch.stats)

        keep_rows = self._loss_mask(ro).sum(dim=1) > 0
        if rewards.numel() == 0 or not bool(keep_rows.any()):
            metrics.update(self._finish_metrics(t0, t_rollout, skipped="empty batch"))
            return metrics

        ub = self.prepare(batch)
        rows = keep_rows.nonzero().flatten()
        perm_gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + self.step)
        outs, skipped = [], 0
        policy_frozen = self.critic is not None and self.step < a.critic_warmup_steps
        for _ in range(a.epochs):
            order = rows[torch.randperm(len(rows), generator=perm_gen)] if a.minibatches > 1 else rows
            for mb in order.chunk(a.minibatches):
                if len(mb) == 0:
                    continue
                out = self._update(ub, mb, policy_frozen)
                if out is None:
                    skipped += 1
                else:
                    outs.append(out)
        self.skipped_steps += skipped
        metrics.update(_reduce_updates(outs))
        metrics["updates"] = len(outs)
        metrics["skipped_updates"] = skipped
        if ub.ref_logp is not None:
            base = ub.old_logp if ub.old_logp is not None else ro.sample_logp
            # KL of the policy that sampled this batch to the reference, per token, k3 (as TRL logs it).
            metrics["kl"] = float(masked_mean(kl_estimate(base, ub.ref_logp, "k3"), ro.completion_mask.float()))
        metrics.update(self._finish_metrics(t0, t_rollout))
        return metrics

    def _update(self, ub: UpdateBatch, mb: torch.Tensor, policy_frozen: bool) -> dict[str, float] | None:
        """One guarded optimiser step on rows ``mb`` of ``ub``: its stats, or None when it was
        skipped (non-finite log-probs, loss or gradient)."""
        a, cfg, ro = self.algo, self.cfg, ub.rollout
        self.model.train()
        logp, ent = token_logps(
            self.model, ro.prompt_ids[mb], ro.prompt_mask[mb], ro.completion_ids[mb], ro.completion_mask[mb],
            cfg.temperature, with_entropy=True,
        )  # fmt: skip
        m = ub.mask[mb]
        old = ub.old_logp[mb] if ub.old_logp is not None else logp.detach()
        kl = None
        if a.beta > 0 and not a.kl_in_reward:
            kl = kl_estimate(logp, ub.ref_logp[mb], a.kl_kind)
        A = ub.advantages.values[mb]
        if not torch.isfinite(logp).all():
            return None
        loss, stats = policy_loss(
            logp, old, A, m, clip_low=a.clip_low, clip_high=a.clip_high, ratio_level=a.ratio_level,
            aggregation=a.aggregation, max_len=cfg.max_new_tokens, kl=kl, beta=a.beta if kl is not None else 0.0,
            dual_clip=a.dual_clip,
        )  # fmt: skip
        entropy = masked_mean(ent, m)
        if a.entropy_coef:
            loss = loss - a.entropy_coef * entropy
        if policy_frozen:
            loss = loss * 0.0
        v_loss = None
        if self.critic is not None:
            adv = ub.advantages
            values = self.critic(ro.prompt_ids[mb], ro.prompt_mask[mb], ro.completion_ids[mb], ro.completion_mask[mb])
            v_loss = value_loss(values, adv.old_values[mb], adv.returns[mb], m, clip=a.value_clip)
            loss = loss + a.vf_coef * v_loss
        if not torch.isfinite(loss):
            return None  # never train on NaN: skip and count
        self.opt.zero_grad(set_to_none=True)
        if self.critic_opt is not None:
            self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in self.model.parameters() if p.grad is not None]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip) if params else torch.tensor(0.0)
        if not torch.isfinite(grad_norm):
            self.opt.zero_grad(set_to_none=True)
            return None
        if not policy_frozen:
            self.opt.step()
        if self.critic_opt is not None:
            torch.nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.grad_clip)
            self.critic_opt.step()
        out = dict(stats)
        out.update(loss=loss.item(), grad_norm=grad_norm.item(), entropy=entropy.item())
        if v_loss is not None:
            out["value_loss"] = v_loss.item()
        return out

    def _feature_metrics(self, texts: list[str], correct: torch.Tensor) -> dict[str, float]:
        """The task's features (e.g. filler length, format) averaged over all, right and wrong answers."""
        feats = [self.task.features(t) for t in texts]
        out = {}
        for name in feats[0] if feats else ():
            vals = torch.tensor([f[name] for f in feats], dtype=torch.float64)
            right = correct > 0.5
            out[f"{name}_mean"] = float(vals.mean())
            out[f"{name}_correct"] = float(vals[right].mean()) if right.any() else float("nan")
            out[f"{name}_wrong"] = float(vals[~right].mean()) if (~right).any() else float("nan")
        return out

    @staticmethod
    def _batch_metrics(correct: torch.Tensor, lengths: torch.Tensor) -> dict[str, float]:
        right, wrong = correct > 0.5, correct <= 0.5
        return {
            "accuracy": float(correct.mean()),
            "length_mean": float(lengths.mean()),
            "length_correct": float(lengths[right].mean()) if right.any() else float("nan"),
            "length_wrong": float(lengths[wrong].mean()) if wrong.any() else float("nan"),
        }

    def _finish_metrics(self, t0: float, t_rollout: float, skipped: str | None = None) -> dict:
        out = {
            "rollout_seconds": t_rollout,
            "step_seconds": time.perf_counter() - t0,
            "samples_generated": self.samples_generated,
            "skipped_steps_total": self.skipped_steps,
        }
        if skipped:
            out["skipped"] = skipped
        return out

    # --- the loop --------------------------------------------------------------------------

    def train(
        self,
        steps: int | None = None,
        progress: bool = True,
        callback: Callable[[dict], object] | None = None,
        checkpoint_dir: str | Path | None = None,
        save_every: int | None = None,
    ) -> list[dict]:
        """Run ``steps`` more steps (default: the config's). ``callback(metrics)`` after each step
        (a live plot, say). Stops early when a budget or ``kl_stop`` is reached, and on Ctrl-C
        (SIGINT) or SIGTERM after the current step (``stop_reason`` "interrupted"; a second signal
        stops at once). With ``checkpoint_dir`` the run is saved there when it stops, and every
        ``save_every`` steps when given, so a crash loses at most that many steps."""
        steps = self.cfg.steps if steps is None else steps
        if save_every is not None:
            check_positive_int("save_every", save_every)
        if save_every is not None and checkpoint_dir is None:
            raise ValueError("save_every needs checkpoint_dir (where to save), got checkpoint_dir=None")
        self.stop_reason = None
        t_start = time.perf_counter()
        wall0 = self.history[-1]["wall_seconds"] if self.history else 0.0
        with stop_on_signal():
            bar = tqdm(range(steps), desc=self.algo.name, disable=not progress, leave=True)
            for i in bar:
                if _take_stop_request():  # a signal that came before this step (e.g. during an evaluation)
                    self.stop_reason = "interrupted"
                    break
                m = self.train_step()
                self.step += 1
                m["wall_seconds"] = wall0 + time.perf_counter() - t_start
                self.history.append(m)
                bar.set_postfix(
                    acc=f"{m['accuracy']:.2f}", len=f"{m['length_mean']:.1f}", kl=f"{m.get('kl', float('nan')):.3f}"
                )
                if callback is not None:
                    callback(m)
                if _take_stop_request():
                    self.stop_reason = "interrupted"
                elif self.cfg.max_seconds is not None and m["wall_seconds"] >= self.cfg.max_seconds:
                    self.stop_reason = f"time budget of {self.cfg.max_seconds:g} s reached at step {self.step}"
                elif self.cfg.max_samples is not None and self.samples_generated >= self.cfg.max_samples:
                    self.stop_reason = (
                        f"sample budget of {self.cfg.max_samples} completions reached at step {self.step}"
                    )
                elif self.cfg.kl_stop is not None and m.get("kl", 0.0) > self.cfg.kl_stop:
                    self.stop_reason = f"kl {m['kl']:.4f} > kl_stop {self.cfg.kl_stop} at step {self.step}"
                if self.stop_reason is not None:
                    break
                if save_every is not None and self.step % save_every == 0 and i < steps - 1:
                    self.save(checkpoint_dir)
            bar.close()
            if checkpoint_dir is not None:
                self.save(checkpoint_dir)
        return self.history

    # --- save and resume -------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Everything needed to continue exactly: weights, optimiser, critic, RNG states, history.

        Atomic: written into a temporary folder beside ``path``, flushed to disk, then renamed over
        it, so at every instant ``path`` holds either the previous checkpoint or this one, whole,
        whenever the process is killed. The trainer state records the step, the algorithm and a
        digest of the policy weights, which ``resume`` checks.
        """
        path = Path(path)
        check_checkpoint_target(path, "path")
        broken = [n for n, p in self.model.named_parameters() if not bool(torch.isfinite(p).all())]
        if broken:  # keep the last good checkpoint rather than replace it with a wrecked policy
            raise ValueError(
                f"the policy's weights hold NaN or infinity ({broken[0]}), so they were not saved over {path}: "
                "most often a learning rate (lr) far too large"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        _recover_checkpoint(path)
        _remove_stale_temporaries(path)
        tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.mkdir()
        try:
            self.model.save_pretrained(tmp / "policy")
            self.tokenizer.save_pretrained(tmp / "policy")
            state = {
                "format": CHECKPOINT_FORMAT,
                "config": asdict(self.cfg),
                "algorithm": asdict(self.algo),
                "policy_digest": policy_digest(self.model),
                "step": self.step,
                "history": self.history,
                "skipped_steps": self.skipped_steps,
                "samples_generated": self.samples_generated,
                "seen_difficulty": self.seen_difficulty,
                "opt": self.opt.state_dict(),
                "prompt_rng": self.prompt_rng.getstate(),
                "sample_gen": self.sample_gen.get_state(),
                "ref": self.ref.state_dict() if self.ref is not None else None,
                "critic": self.critic.state_dict() if self.critic is not None else None,
                "critic_opt": self.critic_opt.state_dict() if self.critic_opt is not None else None,
                "stop_reason": self.stop_reason,
            }
            torch.save(state, tmp / "trainer_state.pt")
            _fsync_tree(tmp)
            _replace_folder(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path

    @classmethod
    def resume(cls, path: str | Path, task: Task | None = None) -> "Trainer":
        """A trainer that continues a saved run as if it had never stopped.

        A checkpoint that is damaged, mixed from two saves (its weights do not match the digest in
        its trainer state) or made with an algorithm that now means something else is refused with
        a ``ValueError`` of one line.
        """
        path = Path(path)
        _recover_checkpoint(path)
        if not (path / "trainer_state.pt").exists():
            raise ValueError(f"path must be a folder written by Trainer.save, got {path} (no trainer_state.pt)")
        try:
            state = torch.load(path / "trainer_state.pt", weights_only=False)
        except Exception as err:  # truncated, not a torch file, written by another program
            raise ValueError(
                f"checkpoint {path}: trainer_state.pt cannot be read ({_first_line(err)}); it is damaged, "
                "resume from another checkpoint"
            ) from None
        if not isinstance(state, dict) or "config" not in state:
            raise ValueError(f"checkpoint {path}: trainer_state.pt is not a trainer state written by Trainer.save")
        if state.get("format") != CHECKPOINT_FORMAT or not state.get("policy_digest"):
            raise ValueError(
                f"checkpoint {path} was written by an older grpo_lab, without a digest of its policy "
                "weights, so it cannot be checked; start a new run"
            )
        try:
            cfg = TrainConfig(**state["config"])
        except TypeError as err:
            raise ValueError(f"checkpoint {path}: its config does not fit this grpo_lab ({err})") from None
        if asdict(cfg.algorithm()) != state["algorithm"]:
            now = asdict(cfg.algorithm())
            diff = {k: (state["algorithm"].get(k), now.get(k)) for k in now if state["algorithm"].get(k) != now.get(k)}
            raise ValueError(
                f"checkpoint {path}: algorithm {cfg.algo!r} now differs from the one it was saved with "
                f"(field: (saved, now) {diff}), so it cannot continue exactly; start a new run"
            )
        try:
            check_model_folder(path / "policy")  # a folder, never a hub name, whatever its path looks like
            model, tokenizer = load_policy(str((path / "policy").resolve()), cfg.device)
        except ValueError as err:
            raise ValueError(f"checkpoint {path}: {err}") from None
        if policy_digest(model) != state["policy_digest"]:
            raise ValueError(
                f"checkpoint {path}: the policy weights in policy/ do not match its trainer state "
                f"(step {state['step']}, algo {cfg.algo}): the folder mixes files from two saves; "
                "resume from a checkpoint written whole by Trainer.save"
            )
        t = cls(cfg, model=model, tokenizer=tokenizer, task=task)
        if state["ref"] is not None:
            t.ref.load_state_dict(state["ref"])
        t.opt.load_state_dict(state["opt"])
        if state["critic"] is not None:
            t.critic.load_state_dict(state["critic"])
            t.critic_opt.load_state_dict(state["critic_opt"])
        t.step, t.history = state["step"], state["history"]
        t.skipped_steps, t.samples_generated = state["skipped_steps"], state["samples_generated"]
        t.seen_difficulty, t.stop_reason = state["seen_difficulty"], state["stop_reason"]
        t.prompt_rng.setstate(state["prompt_rng"])
        t.sample_gen.set_state(state["sample_gen"])
        return t


def run(
    cfg: TrainConfig,
    n_eval: int = 1000,
    progress: bool = True,
    eval_every: int | None = None,
    save_dir: str | Path | None = None,
    save_every: int | None = None,
    trainer: Trainer | None = None,
) -> dict:
    """Train with ``cfg`` (or go on with ``trainer``, a resumed run, for ``cfg.steps`` more steps) and
    return the command line's summary: before/after held-out greedy accuracy and mean length, wall
    time, peak memory and the per-step history. With ``save_dir``
    the run is saved there when it stops (at the end, on ``kl_stop``, on Ctrl-C) and every
    ``save_every`` steps, ready for ``Trainer.resume``; the folder is checked before the first step.

    Ctrl-C (SIGINT) or SIGTERM stops the run after the current step: ``stop_reason`` is
    "interrupted" and ``after`` is None (no final evaluation)."""
    if save_dir is not None:
        check_checkpoint_target(save_dir, "save_dir")
    with stop_on_signal():
        trainer = trainer or Trainer(cfg)
        ev = dict(n_prompts=n_eval, greedy=True, max_new_tokens=cfg.max_new_tokens, system=cfg.system_prompt)
        task_eval = trainer.task
        before = evaluate(trainer.model, trainer.tokenizer, task_eval, **ev)
        evals = []
        t0 = time.perf_counter()
        if eval_every:
            done = 0
            while done < cfg.steps and (trainer.stop_reason is None):
                n = min(eval_every, cfg.steps - done)
                trainer.train(n, progress=progress, checkpoint_dir=save_dir, save_every=save_every)
                done += n
                if trainer.stop_reason == "interrupted":
                    break
                e = evaluate(trainer.model, trainer.tokenizer, task_eval, **ev)
                evals.append(
                    {
                        "step": trainer.step,
                        "wall_seconds": trainer.history[-1]["wall_seconds"],
                        "accuracy": e["accuracy"],
                        "mean_length": e["length_mean"],
                    }
                )
        else:
            trainer.train(progress=progress, checkpoint_dir=save_dir, save_every=save_every)
        wall = time.perf_counter() - t0
        after = None
        if trainer.stop_reason != "interrupted":
            a = evaluate(trainer.model, trainer.tokenizer, task_eval, **ev)
            after = {"accuracy": a["accuracy"], "mean_length": a["length_mean"], "n": a["n_prompts"]}
    return {
        "algo": cfg.algo,
        "steps": trainer.step,
        "seed": cfg.seed,
        "wall_seconds": round(wall, 2),
        "train_seconds": round(trainer.history[-1]["wall_seconds"], 2) if trainer.history else 0.0,
        "before": {"accuracy": before["accuracy"], "mean_length": before["length_mean"], "n": before["n_prompts"]},
        "after": after,
        "evals": evals,
        "peak_memory_mb": round(peak_memory_mb(trainer.device), 1),
        "skipped_updates": trainer.skipped_steps,
        "stop_reason": trainer.stop_reason,
        "config": asdict(cfg),
        "algorithm": asdict(trainer.algo),
        "history": trainer.history,
    }


def _plain(obj):
    """JSON-safe copy: NaN and infinity become null (strict JSON has neither)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    return str(obj)


def save_json(obj: object, path: str | Path) -> None:
    """Write ``obj`` as strict JSON, atomically: a kill mid-write leaves the previous file whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_plain(obj), indent=1, allow_nan=False) + "\n"
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


# --- clean stops, whole checkpoints, output paths checked up front ------------------------------

CHECKPOINT_FORMAT = 2
"""Version of ``trainer_state.pt``: 2 added the algorithm and the policy digest (checked on resume)."""

_stop_request: dict = {"signal": None, "depth": 0}  # signals reach the process, not one trainer


@contextmanager
def stop_on_signal() -> Iterator[None]:
    """While inside: the first SIGINT (Ctrl-C) or SIGTERM asks the run to stop after its current
    step (``_take_stop_request``); a second one raises ``KeyboardInterrupt`` at once. Nests; a no-op
    outside the main thread, where Python cannot install signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if _stop_request["signal"] is not None:
            raise KeyboardInterrupt
        _stop_request["signal"] = signum

    # A signal the parent set to be ignored (a job started with & or nohup) stays ignored.
    previous = {
        sig: signal.signal(sig, handler)
        for sig in (signal.SIGINT, signal.SIGTERM)
        if signal.getsignal(sig) is not signal.SIG_IGN
    }
    _stop_request["depth"] += 1
    try:
        yield
    finally:
        _stop_request["depth"] -= 1
        if _stop_request["depth"] == 0:
            _stop_request["signal"] = None  # nobody is left to act on it
        for sig, h in previous.items():
            signal.signal(sig, h)


def _take_stop_request() -> bool:
    """True (once) when a stop signal has arrived since the last call."""
    if _stop_request["signal"] is None:
        return False
    _stop_request["signal"] = None
    return True


def policy_digest(model: torch.nn.Module) -> str:
    """SHA-256 of the model's weights (names, dtypes, shapes and bytes): what ``resume`` checks the
    policy folder against."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def check_checkpoint_target(path: str | Path, what: str = "--save") -> None:
    """Refuse, before any training, a checkpoint folder that cannot be written or must not be
    replaced: a file, a folder holding something else than a checkpoint, a place we cannot write."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path} is a file; give a folder for the checkpoint")
    if path.is_dir() and any(path.iterdir()) and not (path / "trainer_state.pt").exists():
        raise ValueError(
            f"{what} {path} is a folder with other files in it (no trainer_state.pt), which saving "
            "would replace; give a new or empty folder"
        )
    _check_writable_folder(path.parent, what, path)


def check_output_file(path: str | Path, what: str = "--json") -> None:
    """Refuse, before any work, an output file that cannot be written (a folder, under a file, read-only)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a folder; give a file name")
    _check_writable_folder(path.parent, what, path)
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{what} {path} exists and cannot be written (permission denied)")


def check_output_folder(path: str | Path, what: str = "--out") -> None:
    """Create the output folder ``path`` and test-write a file in it, before any work."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path} is a file; give a folder")
    _check_writable_folder(path, what, path)


def _check_writable_folder(folder: Path, what: str, target: Path) -> None:
    for above in (folder, *folder.parents):
        if above.exists():
            if not above.is_dir():
                raise ValueError(f"{what} {target} cannot be written: {above} is a file, not a folder")
            break
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}-{secrets.token_hex(4)}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ValueError(f"{what} {target} cannot be written: {reason} (in {folder})") from None


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # Windows cannot open a folder; its renames are flushed by the file system
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    """Flush every file under ``folder``, then the folders themselves, to the disk."""
    for root, dirs, files in os.walk(folder):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                os.fsync(fh.fileno())
    for root, dirs, files in os.walk(folder, topdown=False):
        _fsync_dir(Path(root))


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a C library without renameat2 (glibc < 2.28, musl)
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # a file system that cannot exchange
        return False
    raise OSError(err, os.strerror(err), str(b))


def _replace_folder(new: Path, path: Path) -> None:
    """Put the folder ``new`` at ``path``, replacing what is there, so that ``path`` is never half written.

    An absent or empty ``path`` is replaced by one rename. An existing checkpoint is swapped with
    ``new`` in one step where the system can (Linux), then deleted. Elsewhere it is first renamed
    aside to ``.NAME.old-*``; a kill between the two renames leaves it there, whole, and the next
    ``save`` or ``resume`` puts it back (``_recover_checkpoint``).
    """
    try:
        os.rename(new, path)
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EACCES, errno.EPERM):
            raise
        if _exchange(new, path):
            _fsync_dir(path.parent)
            shutil.rmtree(new)  # the previous checkpoint, now at the temporary name
            return
        old = path.parent / f".{path.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(path, old)
        os.rename(new, path)
        _fsync_dir(path.parent)
        shutil.rmtree(old)
    _fsync_dir(path.parent)


def _recover_checkpoint(path: Path) -> None:
    """Where a save was killed between its two renames (systems without an atomic swap), the previous
    checkpoint waits beside ``path`` as ``.NAME.old-*``: put it back."""
    if path.exists() or not path.parent.is_dir():
        return
    olds = sorted(path.parent.glob(f".{path.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if olds and (olds[-1] / "trainer_state.pt").exists():
        os.rename(olds[-1], path)
        _fsync_dir(path.parent)


def _remove_stale_temporaries(path: Path) -> None:
    """Delete the temporary folders of saves to ``path`` whose process is gone (killed mid-save)."""
    for tmp in path.parent.glob(f".{path.name}.tmp-*"):
        try:
            pid = int(tmp.name.rsplit(".tmp-", 1)[1].split("-")[0])
        except ValueError:
            continue
        if pid != os.getpid() and _alive(pid):
            continue
        shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, owned by someone else
    return True


def _first_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[0][:300]}" if lines else type(err).__name__
