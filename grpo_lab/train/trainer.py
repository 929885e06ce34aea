"""One training loop for every algorithm, read top to bottom in ``Trainer.train_step``:

collect (sample prompts, roll out G completions each) -> score -> filter (DAPO's dynamic sampling,
GFPO's top-k) -> advantages (``estimators.py``) -> update (for each epoch and mini-batch: the policy
loss, + KL, + value loss for PPO, then a guarded optimiser step) -> log the step's metrics
(``step_metrics.py``).

The algorithm is data (``algorithms.Algorithm``); this file and the estimators are the only places
that act on it. The batch types are described in ``batch.py``.
"""

from __future__ import annotations

import copy
import random
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..core.advantages import adaptive_k, dynamic_sampling_keep, gfpo_keep, reward_quartiles
from ..core.checks import check_positive_int
from ..core.kl import kl_estimate
from ..core.losses import masked_mean, policy_loss, rollout_is_weight, value_loss
from ..core.rewards import soft_overlong_penalty
from ..io import stop_on_signal
from ..io import take_stop_request as _take_stop_request
from ..lab.memory import peak_memory_mb
from ..lab.models import check_answer_room, load_policy, set_threads
from ..lab.rollout import Rollout, encode_prompts, sample_group, token_logps
from ..lab.tasks import Task, get_task, score_completions
from .batch import Advantages, Batch, Sampled, UpdateBatch, check_batch_shape
from .checkpoint import load_checkpoint, save_checkpoint
from .config import MAX_SEED, TrainConfig
from .critic import ValueModel
from .estimators import ADVANTAGE_ESTIMATORS, EstimatorInput
from .step_metrics import reduce_updates, sample_metrics, sampling_stats

__all__ = [  # the names other modules and notebooks import from here, some defined elsewhere
    "ADVANTAGE_ESTIMATORS", "Advantages", "Batch", "MAX_SEED", "Sampled", "StoppedEarly", "TrainConfig", "Trainer",
    "UpdateBatch", "ValueModel", "peak_memory_mb",
]  # fmt: skip


class StoppedEarly(UserWarning):
    """A run stopped before its steps for a reason nobody asked for (every update skipped). The command
    line says it in its summary line instead."""


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
        self.algo = cfg.algorithm()
        check_batch_shape(self.algo, cfg.prompts_per_step, cfg.group_size)  # before loading anything
        set_threads()
        self.sampler = sample_group if sampler is None else sampler
        self.scorer = score_completions if scorer is None else scorer
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        self.task = task or get_task(cfg.task, seed=0, data_dir=cfg.data_dir)  # a bad data file: before the model
        if model is None:
            model, tokenizer = load_policy(cfg.model, cfg.device)
        elif tokenizer is None:
            raise ValueError("tokenizer must be given together with model")
        check_answer_room(model, cfg.max_new_tokens)
        self.model, self.tokenizer = model, tokenizer
        self.device = next(model.parameters()).device
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
        self._said_minibatches = False  # the cut in mini-batches is reported once per trainer

    # --- one step, top to bottom -----------------------------------------------------------

    def train_step(self, batch: Batch | None = None) -> dict:
        """One step: collect, score and filter a batch, compute its advantages, update the policy
        on it; returns this step's metrics.

        ``batch``: update on this ``collect()`` result instead of sampling a new one (so that two
        update rules can be applied to the same batch, as ``experiments.paired_updates`` does).
        The batch is not changed.
        """
        t0 = time.perf_counter()
        batch = self.collect() if batch is None else batch  # sample, score, filter
        t_rollout = time.perf_counter() - t0
        metrics = {"step": self.step + 1, **sample_metrics(batch, t_rollout, self.task.features)}
        rows = self._trainable_rows(batch)
        if rows is None:
            metrics.update(self._finish_metrics(t0, t_rollout, skipped="empty batch"))
            return metrics
        update_batch = self.prepare(batch)  # advantages, old and reference log-probs
        if self._sampler_differs():
            metrics.update(self._mismatch_metrics(update_batch))
        metrics.update(self._optimise(update_batch, rows))  # epochs x mini-batches of guarded updates
        if update_batch.ref_logp is not None:
            metrics["kl"] = self._kl_to_reference(update_batch)
        metrics.update(self._finish_metrics(t0, t_rollout))
        return metrics

    # --- collect: sample and score ---------------------------------------------------------

    @staticmethod
    def prompt_indices(rng: random.Random, n_rows: int, n: int) -> list[int]:
        """The training prompt stream: ``n`` row indices in ``[0, n_rows)``, drawn with replacement
        from ``rng`` (the trainer's is ``random.Random(seed)``). Consecutive calls continue one stream,
        so it can be replayed from the seed alone (the benchmark hands TRL the rows the trainer draws)."""
        return [rng.randrange(n_rows) for _ in range(n)]

    def next_prompts(self, n: int) -> dict:
        """The next ``n`` training rows (columns as lists) of the prompt stream."""
        return self.task.train[self.prompt_indices(self.prompt_rng, len(self.task.train), n)]

    def _rollout(self, n_prompts: int, group_size: int) -> tuple[Rollout, torch.Tensor]:
        """Sample ``group_size`` completions for each of the next ``n_prompts`` prompts and score them."""
        rows = self.next_prompts(n_prompts)
        ids, mask = encode_prompts(
            self.tokenizer, rows["prompt"], chat=self.task.chat, system=self.cfg.system_prompt, device=self.device
        )
        rollout = self.sampler(
            self._sampling_policy(), self.tokenizer, ids, mask, group_size, self.cfg.max_new_tokens,
            self.cfg.temperature, self.sample_gen,
        )  # fmt: skip
        answers = [answer for answer in rows["answer"] for _ in range(group_size)]
        correct = torch.tensor(
            self.scorer(self.task.reward_fn, rollout.texts, answers, rollout.finished.tolist()),
            dtype=torch.float32,
        )
        self.samples_generated += rollout.completion_ids.shape[0]
        return rollout, correct

    def _sampling_policy(self) -> torch.nn.Module:
        """The policy itself, or with ``sampler_noise`` a copy whose weights are each scaled by
        ``1 + sampler_noise * N(0, 1)`` (noise drawn from the seed and the step, so a run repeats)."""
        if not self.cfg.sampler_noise:
            return self.model
        gen = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + self.step + 500_009)
        sampler = copy.deepcopy(self.model).eval().requires_grad_(False)
        with torch.no_grad():
            for p in sampler.parameters():
                noise = torch.randn(p.shape, generator=gen, dtype=p.dtype).to(p.device)
                p.mul_(1 + self.cfg.sampler_noise * noise)
        return sampler

    def _reward(self, rollout: Rollout, correct: torch.Tensor) -> torch.Tensor:
        """The shaped reward: correctness, plus DAPO's soft overlong penalty when it is on."""
        rewards = correct.clone()
        if self.algo.overlong_penalty:
            rewards += soft_overlong_penalty(rollout.lengths, self.cfg.max_new_tokens, self.algo.overlong_cache)
        return rewards

    # --- filter ----------------------------------------------------------------------------

    def collect(self) -> Batch:
        """Sample, score and filter one batch to train on.

        DAPO's dynamic sampling refills here; GFPO samples ``gfpo_group_size`` per prompt and keeps
        ``group_size`` of them here. The advantages are computed later, in ``prepare``.
        """
        if self.algo.advantage == "gfpo":
            return self._collect_gfpo()
        algo, n_prompts, G = self.algo, self.cfg.prompts_per_step, self.cfg.group_size
        rollout, correct = self._rollout(n_prompts, G)
        rewards = self._reward(rollout, correct)
        stats: dict[str, float] = {"gen_rounds": 1, **sampling_stats(correct, rewards, G)}
        if not algo.dynamic_sampling:
            return Batch(rollout, correct, rewards, stats)
        drawn = []  # every round: (rollout, correct, rewards, the rows of the groups it kept)
        n_kept = 0
        while True:
            # DAPO filters on accuracy (verl: filter_groups.metric=acc), not on shaped rewards:
            # an all-wrong group is dropped even if the length penalty spreads its rewards.
            keep_groups = dynamic_sampling_keep(correct, G)
            drawn.append((rollout, correct, rewards, keep_groups.repeat_interleave(G)))
            n_kept += int(keep_groups.sum())
            if n_kept >= n_prompts or len(drawn) >= algo.max_gen_batches:
                break
            rollout, correct = self._rollout(n_prompts, G)
            rewards = self._reward(rollout, correct)
        rollouts, corrects, all_rewards, kept_rows = zip(*drawn)
        rollout = Rollout.cat([r.select(k) for r, k in zip(rollouts, kept_rows)], self.tokenizer.pad_token_id)
        correct = torch.cat([c[k] for c, k in zip(corrects, kept_rows)])
        rewards = torch.cat([r[k] for r, k in zip(all_rewards, kept_rows)])
        n = min(n_kept, n_prompts) * G
        stats.update(gen_rounds=len(drawn), kept_groups=n // G)
        # Every completion drawn, so that accuracy, lengths and speed count the dropped groups too;
        # keep marks the n rows trained on (kept groups past a full batch are dropped as well).
        keep = torch.cat(kept_rows)
        keep[keep.nonzero().flatten()[n:]] = False
        lengths, texts = torch.cat([r.lengths for r in rollouts]), [t for r in rollouts for t in r.texts]
        sampled = Sampled(torch.cat(corrects), torch.cat(all_rewards), lengths, texts, keep, G)
        return Batch(rollout.select(torch.arange(n)), correct[:n], rewards[:n], stats, sampled)

    def _collect_gfpo(self) -> Batch:
        """GFPO: sample G = ``gfpo_group_size`` per prompt, keep k = ``group_size`` (or an adaptive k)."""
        algo, n_prompts = self.algo, self.cfg.prompts_per_step
        G, k = algo.gfpo_group_size, self.cfg.group_size
        rollout, correct = self._rollout(n_prompts, G)
        rewards = self._reward(rollout, correct)
        stats: dict[str, float] = {"gen_rounds": 1}
        if algo.gfpo_adaptive:
            means = correct.view(-1, G).mean(dim=1)
            if len(self.seen_difficulty) >= 4 * n_prompts:  # enough history for quartiles
                q = reward_quartiles(torch.tensor(self.seen_difficulty))
                by_bucket = (k, k, max(2, k * 3 // 4), max(2, k // 2))
                k = adaptive_k(means, q, k_by_bucket=by_bucket)
            self.seen_difficulty += means.tolist()
            stats["gfpo_k_mean"] = float(k.float().mean()) if isinstance(k, torch.Tensor) else float(k)
        keep = gfpo_keep(rewards, rollout.lengths.float(), G, k, metric=algo.gfpo_metric)
        stats.update(sampling_stats(correct, rewards, G))
        sampled = Sampled(correct, rewards, rollout.lengths, rollout.texts, keep, G)
        # Rejected responses get A = 0 and would add nothing but cost to the backward pass.
        # With adaptive k the number kept varies by prompt, so the batch has no single group size (0).
        kept_per_prompt = k if isinstance(k, int) else 0
        return Batch(rollout.select(keep, group_size=kept_per_prompt), correct[keep], rewards[keep], stats, sampled)

    def _loss_mask(self, rollout: Rollout) -> torch.Tensor:
        """The tokens that enter the loss: the completion, minus truncated rows under DAPO's overlong filter."""
        mask = rollout.completion_mask.float()
        if self.algo.overlong_filter:
            mask = mask * rollout.finished.float().unsqueeze(1)
        return mask

    def _trainable_rows(self, batch: Batch) -> torch.Tensor | None:
        """The rows with at least one token in the loss, or None when there is none (nothing to train on)."""
        has_tokens = self._loss_mask(batch.rollout).sum(dim=1) > 0
        if batch.rewards.numel() == 0 or not bool(has_tokens.any()):
            return None
        return has_tokens.nonzero().flatten()

    # --- advantages ------------------------------------------------------------------------

    def _logp(self, model: torch.nn.Module, rollout: Rollout) -> torch.Tensor:
        logp, _ = token_logps(
            model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids, rollout.completion_mask,
            self.cfg.temperature,
        )  # fmt: skip
        return logp

    def prepare(self, batch: Batch) -> UpdateBatch:
        """What every optimiser step of this batch reads, computed once: the loss mask, the old and
        reference log-probs, and the advantages (the one place they are computed, through
        ``ADVANTAGE_ESTIMATORS[algo.advantage]``)."""
        algo, rollout = self.algo, batch.rollout
        mask = self._loss_mask(rollout)
        with torch.no_grad():
            ref_logp = self._logp(self.ref, rollout) if self.ref is not None else None
            old_logp = None
            # GAE's KL-shaped rewards need them, and so does a sampler that is not the policy.
            if algo.minibatches * algo.epochs > 1 or self.critic is not None or self._sampler_differs():
                old_logp = self._logp(self.model, rollout)
            values = None
            if self.critic is not None:
                values = self.critic(
                    rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids, rollout.completion_mask
                )
        data = EstimatorInput(
            batch.rewards, mask, self.cfg.group_size, batch.sampled, old_logp=old_logp, ref_logp=ref_logp, values=values
        )
        advantages = ADVANTAGE_ESTIMATORS[algo.advantage](data, algo)
        is_weight = None
        if self.cfg.rollout_is is not None:
            is_weight = rollout_is_weight(
                old_logp, rollout.sample_logp, rollout.completion_mask, self.cfg.rollout_is, self.cfg.rollout_is_max
            )
        return UpdateBatch(rollout, mask, advantages, old_logp, ref_logp, is_weight)

    def _sampler_differs(self) -> bool:
        """Whether the rollout's ``sample_logp`` may differ from the policy's: a mismatch made on purpose, or a
        correction asked for (which reads the policy's own log-probs)."""
        return bool(self.cfg.sampler_noise) or self.cfg.rollout_is is not None

    def _mismatch_metrics(self, update_batch: UpdateBatch) -> dict[str, float]:
        """How far the sampler was from the policy, as TRL logs it: |logp_policy - logp_sampler| per token
        (``sampling/sampling_logp_difference/mean|max``) and the correction's weights (``importance_sampling_ratio``
        min/mean/max, per token or per sequence as the mode weighs), with the share of weights set to 0."""
        rollout, old = update_batch.rollout, update_batch.old_logp
        valid = rollout.completion_mask.bool()
        delta = (old - rollout.sample_logp).abs()[valid]
        out = {"sampler_logp_diff_mean": float(delta.mean()), "sampler_logp_diff_max": float(delta.max())}
        w = update_batch.is_weight
        if w is not None:
            flat = w.flatten() if w.shape[1] == 1 else w[valid]
            out.update(
                is_ratio_min=float(flat.min()), is_ratio_mean=float(flat.mean()), is_ratio_max=float(flat.max()),
                is_zero_frac=float((flat == 0).float().mean()),
            )  # fmt: skip
        return out

    # --- update ----------------------------------------------------------------------------

    def _optimise(self, update_batch: UpdateBatch, rows: torch.Tensor) -> dict[str, float]:
        """``epochs`` passes over ``rows`` in ``minibatches`` shuffled mini-batches, one guarded
        optimiser step each: the updates' reduced stats, ``updates`` and ``skipped_updates``,
        ``target_kl_stopped`` (1 when ``target_kl`` cut the rollout's updates short) when it is set, and
        ``minibatches_effective`` when the batch had too few rows for the mini-batches asked for."""
        algo = self.algo
        perm_gen = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + self.step)
        policy_frozen = self.critic is not None and self.step < algo.critic_warmup_steps
        outs, skipped, stopped = [], 0, False
        for _ in range(algo.epochs):
            order = rows[torch.randperm(len(rows), generator=perm_gen)] if algo.minibatches > 1 else rows
            minibatches = order.chunk(algo.minibatches)
            for minibatch in minibatches:
                out = self._update(update_batch, minibatch, policy_frozen)
                if out is None:
                    skipped += 1
                elif out.get("target_kl_stop"):
                    stopped = True
                    break
                else:
                    outs.append(out)
            if stopped:
                break
        self.skipped_steps += skipped
        result = {**reduce_updates(outs), "updates": len(outs), "skipped_updates": skipped}
        if algo.target_kl is not None:
            result["target_kl_stopped"] = float(stopped)
        if len(minibatches) != algo.minibatches:
            result["minibatches_effective"] = len(minibatches)
            if not self._said_minibatches:
                self._said_minibatches = True
                warnings.warn(
                    f"minibatches={algo.minibatches}, but step {self.step + 1} had {len(rows)} rows to train on, "
                    f"which split into {len(minibatches)} mini-batches; each step records the number it ran as "
                    "minibatches_effective",
                    stacklevel=3,
                )
        return result

    def _update(self, update_batch: UpdateBatch, rows: torch.Tensor, policy_frozen: bool) -> dict[str, float] | None:
        """One guarded optimiser step on ``rows`` of ``update_batch``: its stats, or None when it was
        skipped (non-finite log-probs, loss or gradient)."""
        algo, cfg, rollout = self.algo, self.cfg, update_batch.rollout
        self.model.train()
        logp, entropy_per_token = token_logps(
            self.model, rollout.prompt_ids[rows], rollout.prompt_mask[rows], rollout.completion_ids[rows],
            rollout.completion_mask[rows], cfg.temperature, with_entropy=True,
        )  # fmt: skip
        mask = update_batch.mask[rows]
        old_logp = update_batch.old_logp[rows] if update_batch.old_logp is not None else logp.detach()
        kl = None
        if algo.beta > 0 and not algo.kl_in_reward:
            kl = kl_estimate(logp, update_batch.ref_logp[rows], algo.kl_kind)
        estimate = update_batch.advantages
        if not torch.isfinite(logp).all():
            return None
        loss, stats = policy_loss(
            logp, old_logp, estimate.advantages[rows], mask, clip_low=algo.clip_low, clip_high=algo.clip_high,
            ratio_level=algo.ratio_level, aggregation=algo.aggregation, max_len=cfg.max_new_tokens, kl=kl,
            beta=algo.beta if kl is not None else 0.0, dual_clip=algo.dual_clip,
            is_weight=update_batch.is_weight[rows] if update_batch.is_weight is not None else None,
        )  # fmt: skip
        if algo.target_kl is not None and stats["approx_kl"] > algo.target_kl:
            return {"target_kl_stop": 1.0}  # moved far enough from the sampler: the rest of this rollout is skipped
        entropy = masked_mean(entropy_per_token, mask)
        if algo.entropy_coef:
            loss = loss - algo.entropy_coef * entropy
        if policy_frozen:
            loss = loss * 0.0
        v_loss = None
        if self.critic is not None:
            values = self.critic(
                rollout.prompt_ids[rows], rollout.prompt_mask[rows], rollout.completion_ids[rows],
                rollout.completion_mask[rows],
            )  # fmt: skip
            v_loss = value_loss(values, estimate.old_values[rows], estimate.returns[rows], mask, clip=algo.value_clip)
            loss = loss + algo.vf_coef * v_loss
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

    # --- log -------------------------------------------------------------------------------

    def _kl_to_reference(self, update_batch: UpdateBatch) -> float:
        """k3 of the trained policy (as it was when the batch was sampled) against the reference, averaged over the
        batch's tokens, as TRL logs it: an estimate of KL(policy || reference) only when the policy drew the tokens
        itself, not with ``sampler_noise``, where it is a statistic of the sampler's tokens."""
        rollout = update_batch.rollout
        base = update_batch.old_logp if update_batch.old_logp is not None else rollout.sample_logp
        return float(masked_mean(kl_estimate(base, update_batch.ref_logp, "k3"), rollout.completion_mask.float()))

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
        (a live plot, say). Stops early when a budget or ``kl_stop`` is reached, when every update
        of a step was skipped (the loss or gradient was NaN or infinite), and on Ctrl-C (SIGINT) or
        SIGTERM after the current step (``stop_reason`` "interrupted"; a second signal stops at
        once). With ``checkpoint_dir`` the run is saved there when it stops, and every
        ``save_every`` steps when given, so a crash loses at most that many steps."""
        steps = self.cfg.steps if steps is None else check_positive_int("steps", steps, minimum=0)
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
                self.stop_reason = self._why_stop(m)
                if self.stop_reason is not None:
                    break
                if save_every is not None and self.step % save_every == 0 and i < steps - 1:
                    self.save(checkpoint_dir)
            bar.close()
            if checkpoint_dir is not None:
                self.save(checkpoint_dir)
        return self.history

    def _why_stop(self, m: dict) -> str | None:
        """Why the run stops after the step whose metrics are ``m``, or None to go on."""
        cfg = self.cfg
        if _take_stop_request():
            return "interrupted"
        if m.get("updates") == 0 and m.get("skipped_updates", 0) > 0:
            reason = (
                f"every update of step {self.step} was skipped (NaN or infinite loss or gradient), so the "
                f"policy no longer learns; most often the learning rate (lr={cfg.lr:g}) is far too large"
            )
            # Nobody asked for this stop: said where a notebook shows it, not only in ``stop_reason``.
            warnings.warn(f"{self.algo.name} stopped after step {self.step}: {reason}", StoppedEarly, stacklevel=3)
            return reason
        if cfg.max_seconds is not None and m["wall_seconds"] >= cfg.max_seconds:
            return f"time budget of {cfg.max_seconds:g} s reached at step {self.step}"
        if cfg.max_samples is not None and self.samples_generated >= cfg.max_samples:
            return f"sample budget of {cfg.max_samples} completions reached at step {self.step}"
        if cfg.kl_stop is not None and m.get("kl", 0.0) > cfg.kl_stop:
            return f"kl {m['kl']:.4f} > kl_stop {cfg.kl_stop} at step {self.step}"
        return None

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
