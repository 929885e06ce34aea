"""One batch, several update rules: a paired comparison of update rules (``python -m grpo_lab paired``).

Two independent runs differ by their samples as well as by their update rule, and with a small
effect the samples win. Here every arm updates from the same batch, weights, optimiser state and
mini-batch order, so only the rule differs.
"""

from __future__ import annotations

import copy
import dataclasses
import signal
import statistics
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from tqdm.auto import tqdm

from ..algorithms import UPDATE_FIELDS
from ..core.checks import check_positive_int
from ..io import stop_on_signal
from ..io import take_stop_request as _take_stop_request
from ..lab.rollout import token_logps
from ..train.trainer import Trainer
from .stats import mean_and_spread

if TYPE_CHECKING:
    from ..algorithms import UPDATE_FIELDS, Algorithm
    from ..train.trainer import TrainConfig


# Fields that act only through the clip: with one update per rollout every ratio is exactly 1, inside
# any clip range, so an arm that changes only these changes nothing (ALGORITHMS.md, clip-higher).
CLIP_FIELDS = ("clip_low", "clip_high", "dual_clip")


def check_arms(base: Algorithm, arms: dict[str, dict], rows: int, overrides: dict | None = None) -> None:
    """Refuse arms that would change nothing or run something else than their label says.

    ``base`` is the algorithm the arms change, ``rows`` the rows of a batch (prompts x group size),
    ``overrides`` the config's own ``algo_overrides`` (``--set``)."""
    if len(arms) < 2:
        raise ValueError(f"arms must name at least two update rules, got {list(arms)}")
    for name, changes in arms.items():
        bad = sorted(set(changes) - set(UPDATE_FIELDS))
        if bad:
            raise ValueError(f"arms[{name!r}] may only change the update's fields {list(UPDATE_FIELDS)}, got {bad}")
        both = sorted(set(changes) & set(overrides or {}))
        if both:
            raise ValueError(
                f"arms[{name!r}] sets {both[0]}, which the config's algo_overrides (--set) also sets to "
                f"{overrides[both[0]]!r}: the arm's value would replace it; set it in one place only"
            )
    if base.advantage != "group":
        raise ValueError(
            f"paired_updates needs an algorithm with group advantages (GRPO family), got {base.name!r} "
            f"with advantage={base.advantage!r}"
        )
    algos = {name: dataclasses.replace(base, **changes) for name, changes in arms.items()}
    for name, algo in algos.items():
        if algo.minibatches > rows:
            raise ValueError(
                f"arms[{name!r}] asks for minibatches={algo.minibatches}, but a batch has {rows} rows "
                f"(prompts x group size): at most {rows} mini-batches can be made from it"
            )
    varied = [f for f in CLIP_FIELDS if len({getattr(a, f) for a in algos.values()}) > 1]
    if varied and all(a.minibatches * a.epochs == 1 for a in algos.values()):
        raise ValueError(
            f"the arms vary {varied[0]}, which has no effect with one update per rollout (minibatches=1, "
            "epochs=1): every ratio is 1, inside any clip; set minibatches or epochs above 1 (e.g. minibatches=2)"
        )


def paired_updates(
    cfg: TrainConfig | None,
    arms: dict[str, dict],
    steps: int,
    follow: str | None = None,
    low_p: float = 0.2,
    progress: bool = True,
    trainer: Trainer | None = None,
) -> dict:
    """Every step, one batch is sampled once and each arm's update is applied to it from the same
    weights, optimiser state and mini-batch order; the run then goes on from arm ``follow``
    (default: the first).

    With a small effect, two independent runs differ more by their samples than by their rule (the
    clip-higher runs of notebook 05); here a small effect shows as a consistent per-step difference.
    ``arms`` maps a name to Algorithm field overrides, e.g. ``{"symmetric": {}, "clip-higher":
    {"clip_high": 0.28}}``; only the fields in ``UPDATE_FIELDS`` may differ (``check_arms``).

    Measured on the batch, per arm and step, after the update against before it:
    ``entropy_change`` (mean token entropy, nats), ``low_p_pos_logp_change`` (mean log-prob change of
    tokens with positive advantage and probability below ``low_p``: the tokens an upper clip holds
    back), ``pos_logp_change`` and ``neg_logp_change`` (all tokens with positive / negative advantage),
    the update's clip fractions, and ``updates`` (optimiser steps it made). ``summary`` gives each arm's
    mean over steps and, for every arm after the first, the paired difference from the first arm (mean,
    standard error over steps, the share of steps where it is positive).

    Ctrl-C (SIGINT), SIGTERM or SIGHUP (a closed terminal) stops after the current step: the steps
    measured so far are returned, with ``stop_reason`` "interrupted" (None when every step ran).

    ``trainer``: an existing ``Trainer`` to run on (a notebook's, or a test's); its config is used and
    ``cfg`` is ignored.
    """
    follow = next(iter(arms), None) if follow is None else follow
    if follow not in arms:
        raise ValueError(f"follow must be one of the arms {list(arms)}, got {follow!r}")
    if not 0 < low_p <= 1:
        raise ValueError(f"low_p must be in (0, 1], got {low_p}")
    check_positive_int("steps", steps)
    c = trainer.cfg if trainer is not None else cfg
    base = trainer.algo if trainer is not None else c.algorithm()
    check_arms(base, arms, c.prompts_per_step * c.group_size, c.algo_overrides)
    trainer = trainer or Trainer(cfg)
    algos = {name: dataclasses.replace(base, **overrides) for name, overrides in arms.items()}

    @torch.no_grad()
    def measure(ro):
        trainer.model.eval()
        return token_logps(
            trainer.model,
            ro.prompt_ids,
            ro.prompt_mask,
            ro.completion_ids,
            ro.completion_mask,
            trainer.cfg.temperature,
            with_entropy=True,
        )

    def masked(x, where):
        return float(x[where].mean()) if bool(where.any()) else None

    history, stop_reason = [], None
    with stop_on_signal(), _hangup_as_terminate():
        for _ in tqdm(range(steps), desc="paired updates", disable=not progress):
            trainer.algo = algos[follow]
            batch = trainer.collect()
            ro = batch.rollout
            mask = ro.completion_mask.bool()
            adv = trainer.prepare(batch).advantages.advantages.unsqueeze(1).expand_as(mask)  # what the update uses
            pos, neg = mask & (adv > 0), mask & (adv < 0)
            logp0, ent0 = measure(ro)
            low = pos & (logp0.exp() < low_p)
            start = (copy.deepcopy(trainer.model.state_dict()), copy.deepcopy(trainer.opt.state_dict()))
            row = {
                "step": trainer.step + 1,
                "entropy_before": float(ent0[mask].mean()),
                "low_p_pos_tokens": int(low.sum()),
                "arms": {},
            }
            for name, algo in algos.items():
                trainer.model.load_state_dict(start[0])
                # A copy: load_state_dict keeps the given tensors as the optimiser's state, and the
                # update would change them in place under the next arm's feet.
                trainer.opt.load_state_dict(copy.deepcopy(start[1]))
                trainer.algo = algo
                m = trainer.train_step(batch)
                logp1, ent1 = measure(ro)
                d = logp1 - logp0
                row["accuracy"] = m["accuracy"]
                row["arms"][name] = {
                    "entropy_change": float((ent1 - ent0)[mask].mean()),
                    "low_p_pos_logp_change": masked(d, low),
                    "pos_logp_change": masked(d, pos),
                    "neg_logp_change": masked(d, neg),
                    "clip_frac_low": m.get("clip_frac_low"),
                    "clip_frac_high": m.get("clip_frac_high"),
                    "updates": m.get("updates", 0),
                }
                if name == follow:
                    end = (copy.deepcopy(trainer.model.state_dict()), copy.deepcopy(trainer.opt.state_dict()))
            trainer.model.load_state_dict(end[0])
            trainer.opt.load_state_dict(end[1])
            trainer.algo = algos[follow]
            trainer.step += 1
            history.append(row)
            if _take_stop_request():
                stop_reason = "interrupted"
                break
    return {
        "config": dataclasses.asdict(trainer.cfg),
        "arms": arms,
        "follow": follow,
        "low_p": low_p,
        "steps": len(history),
        "stop_reason": stop_reason,
        "history": history,
        "summary": paired_summary(history),
    }


@contextmanager
def _hangup_as_terminate() -> Iterator[None]:
    """While inside, SIGHUP (a closed terminal, a dropped SSH session) is handled as SIGTERM is."""
    if not hasattr(signal, "SIGHUP") or threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:  # started with nohup: it stays ignored
        yield
        return

    def as_terminate(signum, frame):
        handler = signal.getsignal(signal.SIGTERM)
        if callable(handler):
            handler(signal.SIGTERM, frame)
        else:
            signal.raise_signal(signal.SIGTERM)

    previous = signal.signal(signal.SIGHUP, as_terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


PAIRED_METRICS = ("entropy_change", "low_p_pos_logp_change", "pos_logp_change", "neg_logp_change", "clip_frac_high")


def paired_summary(history: list[dict]) -> dict:
    """Each arm's mean over steps (``updates``: optimiser steps per step, what its mini-batches and
    epochs came to) and, for arms after the first, the per-step paired difference from it. Empty
    when no step was measured."""
    names = list(history[0]["arms"]) if history else []
    out = {}
    for name in names:
        counts = [h["arms"][name]["updates"] for h in history if "updates" in h["arms"][name]]
        arm = {"updates": statistics.fmean(counts) if counts else None}  # None: a history from before it was kept
        for metric in PAIRED_METRICS:
            vals = [h["arms"][name][metric] for h in history if h["arms"][name][metric] is not None]
            arm[metric] = statistics.fmean(vals) if vals else None
        if name != names[0]:
            arm["vs_first"] = {}
            for metric in PAIRED_METRICS:
                diffs = [
                    h["arms"][name][metric] - h["arms"][names[0]][metric]
                    for h in history
                    if h["arms"][name][metric] is not None and h["arms"][names[0]][metric] is not None
                ]
                if len(diffs) >= 2:
                    arm["vs_first"][metric] = {
                        "diff": statistics.fmean(diffs),
                        "se": mean_and_spread(diffs)["se"],
                        "steps": len(diffs),
                        "share_positive": sum(x > 0 for x in diffs) / len(diffs),
                    }
        out[name] = arm
    return out


def format_paired_summary(summary: dict) -> str:
    """A markdown table: each arm's means (and updates per step), then each later arm's paired
    difference from the first."""
    names = list(summary)
    head = ["arm", "updates"] + list(PAIRED_METRICS)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        cells = [name, "-" if summary[name]["updates"] is None else f"{summary[name]['updates']:g}"]
        cells += ["-" if summary[name][m] is None else f"{summary[name][m]:+.4f}" for m in PAIRED_METRICS]
        lines.append("| " + " | ".join(cells) + " |")
    for name in names[1:]:
        cells = [f"{name} - {names[0]}", ""]
        for m in PAIRED_METRICS:
            d = summary[name]["vs_first"].get(m)
            cells.append(
                "-" if d is None else f"{d['diff']:+.4f} ± {d['se']:.4f} ({100 * d['share_positive']:.0f}% > 0)"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
