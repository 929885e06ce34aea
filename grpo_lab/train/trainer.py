"""One training loop for every algorithm.

Each step: sample prompts -> roll out G completions each -> score -> filter (DAPO's dynamic
sampling, GFPO's top-k) -> advantages -> for each mini-batch and epoch: the policy loss
(+ KL, + value loss for PPO) -> guarded optimiser step -> metrics.

The algorithm is data (``algorithms.Algorithm``); this file is the only place that acts on it.
"""

from __future__ import annotations

import copy
import math
import random
import resource
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..algorithms import Algorithm, get_algorithm
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
from ..io import stop_on_signal
from ..io import take_stop_request as _take_stop_request
from ..lab.models import load_policy, set_threads
from ..lab.rollout import Rollout, encode_prompts, sample_group, token_logps
from ..lab.tasks import Task, get_task, score_completions
from .checkpoint import load_checkpoint, save_checkpoint

MAX_SEED = 2**32 - 1
"""Seeds are 32-bit, as NumPy's are: larger ones overflow the per-step generators derived from them."""


@dataclass
class TrainConfig:
    """The run's settings (the algorithm's own settings live in ``Algorithm``)."""

    algo: str = "grpo"
    model: str = "tiny-sum3"
    """'tiny-sum3' (shipped in assets/), a local folder, or a Hugging Face model name."""
    task: str = "sum3"
    steps: int = 100
    seed: int = 0
    prompts_per_step: int = 16
    group_size: int = 8
    """G: completions per prompt (for GFPO: how many are *kept*; it samples gfpo_group_size)."""
    max_new_tokens: int = 32
    temperature: float = 1.0
    lr: float = 1e-4
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    track_kl: bool = True
    """Measure KL to the reference every step even when beta = 0 (one extra forward pass)."""
    kl_stop: float | None = None
    """Stop the run (and save a checkpoint) when the measured KL exceeds this."""
    max_seconds: float | None = None
    """Stop once this much training time has passed (a time budget instead of a step count)."""
    max_samples: int | None = None
    """Stop once this many completions have been sampled (a sample budget: DAPO's refills and GFPO's
    extra samples count, so algorithms that sample more per step get fewer steps)."""
    device: str | None = None
    system_prompt: str | None = None
    algo_overrides: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("steps", "prompts_per_step", "group_size", "max_new_tokens"):
            check_positive_int(name, getattr(self, name), minimum=0 if name == "steps" else 1)
        check_positive_int("seed", self.seed, minimum=0, maximum=MAX_SEED)
        for name in ("temperature", "lr", "weight_decay", "grad_clip", "kl_stop", "max_seconds"):
            v = getattr(self, name)  # a string or None here would fail later with a TypeError deep in torch
            if not (v is None and name in ("kl_stop", "max_seconds")) and (
                isinstance(v, bool) or not isinstance(v, (int, float))
            ):
                raise ValueError(f"{name} must be a number, got {type(v).__name__} {v!r}")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number > 0, got {self.temperature}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr}")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay}")
        if not self.grad_clip > 0:
            raise ValueError(f"grad_clip must be > 0, got {self.grad_clip}")
        if not isinstance(self.algo_overrides, dict):
            raise ValueError(
                f"algo_overrides must be a dict of Algorithm fields, got {type(self.algo_overrides).__name__}"
            )
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds must be > 0 or None, got {self.max_seconds}")
        if self.max_samples is not None:
            check_positive_int("max_samples", self.max_samples)
        if self.kl_stop is not None and not self.kl_stop > 0:
            raise ValueError(f"kl_stop must be > 0 or None, got {self.kl_stop}")
        algo = self.algorithm()
        if algo.advantage in ("group", "gfpo") and self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 for {algo.name} (a group needs a spread), got {self.group_size}")
        if algo.overlong_penalty and not 0 < algo.overlong_cache <= self.max_new_tokens:
            raise ValueError(
                f"overlong_cache must be in (0, max_new_tokens={self.max_new_tokens}] for the overlong penalty, "
                f"got {algo.overlong_cache}"
            )
        if algo.advantage == "gfpo" and algo.gfpo_group_size < self.group_size:
            raise ValueError(
                f"gfpo_group_size must be >= group_size (k <= G), got G={algo.gfpo_group_size} < k={self.group_size}"
            )

    def algorithm(self) -> Algorithm:
        return get_algorithm(self.algo, **self.algo_overrides)


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
        """Everything needed to continue exactly (weights, tokenizer, optimiser, critic, RNG states,
        history) to the folder ``path``, whole or not at all (``checkpoint.save_checkpoint``)."""
        return save_checkpoint(self, path)

    @classmethod
    def resume(cls, path: str | Path, task: Task | None = None, device: str | None = None) -> "Trainer":
        """A trainer that continues a saved run as if it had never stopped, on ``device`` if given
        (default: the saved one). A damaged, mixed or unsafe checkpoint is refused with a ``ValueError``
        of one line (``checkpoint.load_checkpoint``)."""
        return load_checkpoint(cls, TrainConfig, path, task=task, device=device)


# Algorithm fields the trainer reads only under a condition: a field set where its condition does not
# hold changes nothing, and the command line refuses it rather than ignore it without a word.
_CONDITIONAL_FIELDS = (
    (
        ("gamma", "lam", "vf_coef", "value_clip", "critic_lr", "critic_warmup_steps"),
        lambda a: a.advantage == "gae",
        "only the critic uses it (advantage='gae', as in --algo ppo)",
    ),
    (
        ("kl_in_reward",),
        lambda a: a.advantage == "gae",
        "only the critic's per-token reward uses it (advantage='gae', as in --algo ppo)",
    ),
    (
        ("gfpo_group_size", "gfpo_metric", "gfpo_adaptive"),
        lambda a: a.advantage == "gfpo",
        "only GFPO uses it (advantage='gfpo', as in --algo gfpo)",
    ),
    (("scale",), lambda a: a.advantage == "group", "only group advantages use it (advantage='group')"),
    (
        ("max_gen_batches",),
        lambda a: a.dynamic_sampling,
        "only dynamic sampling uses it (dynamic_sampling=true, as in --algo dapo)",
    ),
    (
        ("overlong_cache",),
        lambda a: a.overlong_penalty,
        "only the overlong penalty uses it (overlong_penalty=true, as in --algo dapo)",
    ),
    (
        ("kl_kind",),
        lambda a: a.beta > 0 and not a.kl_in_reward,
        "only a KL term in the loss uses it (beta > 0 and kl_in_reward=false)",
    ),
)


def unused_fields(algo: Algorithm, names: Collection[str]) -> dict[str, str]:
    """Of the Algorithm field ``names``, those the trainer does not read for ``algo``, each with why."""
    out = {}
    for fields_, used, why in _CONDITIONAL_FIELDS:
        if not used(algo):
            out.update({n: why for n in names if n in fields_})
    return out
