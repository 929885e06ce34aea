"""Side-by-side runs: several algorithms, several seeds, the same task and budget.

``python -m grpo_lab compare`` runs each (algorithm, seed) in its own process (so its peak
memory is its own), then prints a table with the spread across seeds. Accuracy is held-out
greedy accuracy, the mean of the last two evaluations of each run, so that one lucky
evaluation does not decide.
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.checks import check_positive_int

if TYPE_CHECKING:
    from ..train.trainer import TrainConfig, Trainer

# `compare`'s default budget: the same training seconds for every algorithm (the course's race, notebook 08).
DEFAULT_SECONDS = 90.0


def final_accuracy(summary: dict) -> float:
    """Mean held-out greedy accuracy of the last two evaluations (the last one alone if only one)."""
    evals = summary.get("evals") or []
    if not evals:
        return summary["after"]["accuracy"]
    last = evals[-2:]
    return sum(e["accuracy"] for e in last) / len(last)


def tail_mean(history: list[dict], key: str, n: int = 10) -> float | None:
    vals = [h[key] for h in history[-n:] if h.get(key) is not None]
    return sum(vals) / len(vals) if vals else None


def run_one(
    algo: str,
    seed: int,
    seconds: float | None,
    steps: int,
    eval_every: int,
    n_eval: int,
    out: Path,
    extra: list[str] | None = None,
    quiet: bool = True,
    max_samples: int | None = None,
    pass_k: int | None = None,
) -> dict:
    """One training run in a fresh process; returns its JSON summary.

    ``max_samples`` stops the run once that many completions were sampled (a sample budget).
    ``pass_k`` also measures the trained policy's pass@1..k (``k`` samples per held-out prompt at
    T = 1, in a second process) and stores the curve in the summary under ``"pass_at_k"``.
    """
    out = Path(out)
    cmd = [
        sys.executable,
        "-m",
        "grpo_lab",
        "train",
        "--algo",
        algo,
        "--seed",
        str(seed),
        "--steps",
        str(steps),
        "--eval-every",
        str(eval_every),
        "--n-eval",
        str(n_eval),
        "--json",
        str(out),
    ]
    if seconds is not None:
        cmd += ["--seconds", str(seconds)]
    if max_samples is not None:
        cmd += ["--max-samples", str(max_samples)]
    save = out.with_suffix("") if pass_k else None
    if save is not None:
        cmd += ["--save", str(save)]
    if quiet:
        cmd.append("--quiet")
    cmd += extra or []
    _run(cmd)
    summary = json.loads(out.read_text())
    if pass_k:
        ev = out.with_name(out.stem + "-passk.json")
        _run(
            [
                sys.executable,
                "-m",
                "grpo_lab",
                "eval",
                "--model",
                str(save / "policy"),
                "--task",
                "sum3",
                "--n",
                str(n_eval),
                "--samples",
                str(pass_k),
                "--seed",
                str(seed),
                "--json",
                str(ev),
            ]
        )
        summary["pass_at_k"] = json.loads(ev.read_text())["pass_at_k"]
        shutil.rmtree(save, ignore_errors=True)  # the checkpoint was only needed for this measurement
        out.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


class ChildRunFailed(RuntimeError):
    """A run's process exited non-zero; the message is its own last line (its one-line error, or the
    last line of a traceback), and ``returncode`` its exit status (2: bad input, 130: interrupted)."""

    def __init__(self, message: str, returncode: int):
        super().__init__(message)
        self.returncode = returncode


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        last = lines[-1] if lines else f"no message (exit status {proc.returncode})"
        raise ChildRunFailed(
            f"the run `{' '.join(cmd[3:8])} ...` failed (exit status {proc.returncode}): {last}", proc.returncode
        )


def compare(
    algos: list[str],
    seeds: list[int],
    seconds: float | None = None,
    steps: int = 100000,
    eval_every: int = 20,
    n_eval: int = 1000,
    out_dir: str | Path | None = None,
    extra: list[str] | None = None,
    progress: Callable[[str], object] | None = print,
    max_samples: int | None = None,
    pass_k: int | None = None,
) -> dict:
    """Run every algorithm with every seed; return ``{"runs": {...}, "rows": [...], "table": str}``.

    ``seconds`` gives every run the same time budget, ``max_samples`` the same sample budget."""
    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="grpo_lab_compare_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {algo: [] for algo in algos}
    # Seed-major order: a slow spell of the machine then falls on every algorithm, not on one.
    for seed in seeds:
        for algo in algos:
            s = run_one(
                algo,
                seed,
                seconds,
                steps,
                eval_every,
                n_eval,
                out_dir / f"{algo}-seed{seed}.json",
                extra,
                max_samples=max_samples,
                pass_k=pass_k,
            )
            results[algo].append(s)
            if progress:
                progress(
                    f"{algo} seed {seed}: {s['before']['accuracy']:.3f} -> {final_accuracy(s):.3f} "
                    f"in {s['train_seconds']:.0f} s ({s['steps']} steps)"
                )
    metrics = tuple(m for m in RUN_METRICS if pass_k or not m.startswith("pass@"))
    rows = seed_table(results, metrics)
    return {
        "runs": {a: [str(out_dir / f"{a}-seed{s}.json") for s in seeds] for a in algos},
        "rows": rows,
        "table": format_seed_table(rows, metrics),
    }


# --- several seeds: the spread, and whether a difference is more than noise ---------------------


def mean_and_spread(values: Sequence[float | None]) -> dict:
    """Mean, sample standard deviation (n - 1), standard error of the mean, min and max of per-seed values.

    ``None`` and NaN entries (a metric a run did not record) are left out; ``n`` says how many remained.
    """
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        raise ValueError(f"values must hold at least one number, got {list(values)!r}")
    n = len(vals)
    std = statistics.stdev(vals) if n > 1 else 0.0
    return {
        "n": n,
        "mean": statistics.fmean(vals),
        "std": std,
        "se": std / math.sqrt(n),
        "min": min(vals),
        "max": max(vals),
    }


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), by its continued fraction (Lentz's method,
    as in Numerical Recipes 6.4): the Student t tail below needs it, and the lab does not depend on scipy."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast only below this point: use the symmetry
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f


def student_t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` (not necessarily whole) degrees of freedom."""
    if not df > 0:
        raise ValueError(f"df must be > 0, got {df}")
    if math.isinf(t):
        return 0.0
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


def welch_test(a_values: Sequence[float | None], b_values: Sequence[float | None]) -> dict:
    """Welch's t-test of ``mean(b) - mean(a)`` (unequal variances; Welch 1947).

    Returns ``diff``, its standard error ``se`` = sqrt(s_a^2/n_a + s_b^2/n_b), ``t`` = diff / se, the
    Welch-Satterthwaite degrees of freedom ``df`` and the two-sided ``p``. With 3 seeds a side ``df`` is
    between 2 and 4, so only a difference several standard errors wide reaches p < 0.05.
    """
    a, b = mean_and_spread(a_values), mean_and_spread(b_values)
    if a["n"] < 2 or b["n"] < 2:
        raise ValueError(f"a_values and b_values need >= 2 numbers each to estimate noise, got {a['n']} and {b['n']}")
    va, vb = a["std"] ** 2 / a["n"], b["std"] ** 2 / b["n"]
    diff = b["mean"] - a["mean"]
    se = math.sqrt(va + vb)
    if se == 0.0:
        raise ValueError("a_values and b_values have no spread at all: a t-test needs some noise to compare with")
    df = (va + vb) ** 2 / (va**2 / (a["n"] - 1) + vb**2 / (b["n"] - 1))
    t = diff / se
    return {"diff": diff, "se": se, "t": t, "df": df, "p": student_t_two_sided_p(t, df), "n_a": a["n"], "n_b": b["n"]}


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment (Holm 1979) of ``m`` p-values, in their given order.

    Sorted ascending, the i-th smallest (from 0) is multiplied by ``m - i``, then made non-decreasing
    and capped at 1. Rejecting where the adjusted p is below alpha keeps the chance of *any* false
    "different" among the m comparisons below alpha (Bonferroni multiplies all of them by m).
    """
    ps = [float(p) for p in p_values]
    if not ps or any(not 0.0 <= p <= 1.0 for p in ps):
        raise ValueError(f"p_values must be a non-empty list of numbers in [0, 1], got {p_values!r}")
    m = len(ps)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: ps[i])):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def welch_against_baseline(
    results: dict[str, list[dict]], baseline: str, metric: str = "final", alpha: float = 0.05
) -> list[dict]:
    """Welch's t-test of every algorithm against ``baseline`` on one metric of ``RUN_METRICS``,
    Holm-corrected for the number of comparisons. One dict per other algorithm: ``welch_test``'s
    numbers plus ``p_holm`` and ``different`` (``p_holm < alpha``)."""
    if baseline not in results:
        raise ValueError(f"baseline must be one of {list(results)}, got {baseline!r}")
    if metric not in RUN_METRICS:
        raise ValueError(f"metric must be a name from {list(RUN_METRICS)}, got {metric!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    fn = RUN_METRICS[metric][2]
    base = [fn(s) for s in results[baseline]]
    rows = [{"algo": a, **welch_test(base, [fn(s) for s in runs])} for a, runs in results.items() if a != baseline]
    for row, p in zip(rows, holm([r["p"] for r in rows])):
        row["p_holm"], row["different"] = p, p < alpha
    return rows


def format_tests(rows: list[dict], baseline: str, fmt: str = "+.3f") -> str:
    """A markdown table of ``welch_against_baseline`` rows."""
    lines = [f"| algo | minus {baseline} | SE | t | df | p | p (Holm) | different at 0.05 |", "|" + "---|" * 8]
    for r in rows:
        lines.append(
            f"| {r['algo']} | {format(r['diff'], fmt)} | {r['se']:.3f} | {r['t']:+.2f} | {r['df']:.1f} | "
            f"{r['p']:.3f} | {r['p_holm']:.3f} | {'yes' if r['different'] else 'no'} |"
        )
    return "\n".join(lines)


# What the bake-off reports for one run: (column label, format, function of the run's summary).
RUN_METRICS = {
    "final": ("held-out acc", ".3f", final_accuracy),
    "gain_points": ("gain (pts)", "+.1f", lambda s: 100 * (final_accuracy(s) - s["before"]["accuracy"])),
    "pass@1": ("pass@1", ".3f", lambda s: _pass_at(s, 1)),
    "pass@k": ("pass@k", ".3f", lambda s: _pass_at(s, None)),
    "length_correct": ("len right", ".1f", lambda s: tail_mean(s["history"], "length_correct")),
    "length_wrong": ("len wrong", ".1f", lambda s: tail_mean(s["history"], "length_wrong")),
    "entropy": ("entropy", ".3f", lambda s: tail_mean(s["history"], "entropy")),
    "kl": ("KL", ".3f", lambda s: tail_mean(s["history"], "kl")),
    "clip_frac": ("clip frac", ".4f", lambda s: tail_mean(s["history"], "clip_frac")),
    "steps": ("steps", ".0f", lambda s: s["steps"]),
    "samples": ("samples", ".0f", lambda s: s["history"][-1]["samples_generated"]),
    "train_seconds": ("train s", ".0f", lambda s: s["train_seconds"]),
    "peak_memory_mb": ("peak MB", ".0f", lambda s: s["peak_memory_mb"]),
}


def _pass_at(summary: dict, k: int | None) -> float | None:
    curve = summary.get("pass_at_k")
    if not curve:
        return None
    key = str(k) if k is not None else max(curve, key=int)
    return curve.get(key)


def run_metrics(summary: dict) -> dict:
    """The bake-off's numbers for one run (None where the run did not record one, e.g. pass@k)."""
    return {name: fn(summary) for name, (_, _, fn) in RUN_METRICS.items()}


def seed_table(results: dict[str, list[dict]], metrics: Sequence[str] = tuple(RUN_METRICS)) -> list[dict]:
    """One row per algorithm: for each metric, ``mean_and_spread`` over its seeds (None if no run has it)."""
    unknown = [m for m in metrics if m not in RUN_METRICS]
    if unknown:
        raise ValueError(f"metrics must be names from {list(RUN_METRICS)}, got {unknown}")
    rows = []
    for algo, runs in results.items():
        if not runs:
            raise ValueError(f"results[{algo!r}] must hold at least one run summary, got none")
        per_run = [run_metrics(s) for s in runs]
        row = {"algo": algo, "seeds": len(runs)}
        for m in metrics:
            vals = [r[m] for r in per_run if r[m] is not None]
            row[m] = mean_and_spread(vals) if vals else None
        rows.append(row)
    return rows


def format_seed_table(rows: list[dict], metrics: Sequence[str] = tuple(RUN_METRICS), spread: str = "std") -> str:
    """A markdown table of ``seed_table`` rows: ``mean ± std`` (or ``± se``) for every metric."""
    if spread not in ("std", "se"):
        raise ValueError(f"spread must be 'std' or 'se', got {spread!r}")
    head = ["algo", "seeds"] + [RUN_METRICS[m][0] for m in metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["algo"], str(r["seeds"])]
        for m in metrics:
            st, fmt = r.get(m), RUN_METRICS[m][1]
            if st is None:
                cells.append("-")
            elif st["n"] > 1 and st[spread] > 0:
                cells.append(f"{format(st['mean'], fmt)} ± {format(st[spread], fmt.lstrip('+'))}")
            else:
                cells.append(format(st["mean"], fmt))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def load_runs(algos: Sequence[str], seeds: Sequence[int], pattern: str = "{algo}_seed{seed}") -> dict[str, list[dict]]:
    """Committed histories ``assets/histories/<pattern>.json`` as ``{algo: [summary per seed]}``."""
    from .histories import load_history

    if not algos or not seeds:
        raise ValueError(f"algos and seeds must be non-empty, got {list(algos)} and {list(seeds)}")
    return {a: [load_history(pattern.format(algo=a, seed=s)) for s in seeds] for a in algos}


# --- one batch, two update rules: a paired comparison -------------------------------------------

# Algorithm fields that act only in the update. An arm may change these; fields that act while the
# batch is collected (dynamic sampling, GFPO's filter, the reward shaping) would be silently ignored.
UPDATE_FIELDS = (
    "clip_low",
    "clip_high",
    "dual_clip",
    "ratio_level",
    "aggregation",
    "beta",
    "kl_kind",
    "entropy_coef",
    "minibatches",
    "epochs",
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

    Two independent runs differ by their samples as well as by their update rule, and with a small
    effect the samples win (the clip-higher runs of notebook 05). Here only the rule differs, so a
    small effect shows as a consistent per-step difference. ``arms`` maps a name to Algorithm field
    overrides, e.g. ``{"symmetric": {}, "clip-higher": {"clip_high": 0.28}}``; only the fields in
    ``UPDATE_FIELDS`` may differ.

    Measured on the batch, per arm and step, after the update against before it:
    ``entropy_change`` (mean token entropy, nats), ``low_p_pos_logp_change`` (mean log-prob change of
    tokens with positive advantage and probability below ``low_p``: the tokens an upper clip holds
    back), ``pos_logp_change`` and ``neg_logp_change`` (all tokens with positive / negative advantage),
    and the update's clip fractions. ``summary`` gives each arm's mean over steps and, for every arm
    after the first, the paired difference from the first arm (mean, standard error over steps, the
    share of steps where it is positive).

    ``trainer``: an existing ``Trainer`` to run on (a notebook's, or a test's); its config is used and
    ``cfg`` is ignored.
    """
    import copy
    import dataclasses

    import torch
    from tqdm.auto import tqdm

    from ..lab.rollout import token_logps
    from ..train.trainer import Trainer

    if len(arms) < 2:
        raise ValueError(f"arms must name at least two update rules, got {list(arms)}")
    for name, overrides in arms.items():
        bad = sorted(set(overrides) - set(UPDATE_FIELDS))
        if bad:
            raise ValueError(f"arms[{name!r}] may only change the update's fields {list(UPDATE_FIELDS)}, got {bad}")
    follow = next(iter(arms)) if follow is None else follow
    if follow not in arms:
        raise ValueError(f"follow must be one of the arms {list(arms)}, got {follow!r}")
    if not 0 < low_p <= 1:
        raise ValueError(f"low_p must be in (0, 1], got {low_p}")
    check_positive_int("steps", steps)
    trainer = trainer or Trainer(cfg)
    cfg, base = trainer.cfg, trainer.algo
    if base.advantage != "group":
        raise ValueError(
            f"paired_updates needs an algorithm with group advantages (GRPO family), got {base.name!r} "
            f"with advantage={base.advantage!r}"
        )
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

    history = []
    for _ in tqdm(range(steps), desc="paired updates", disable=not progress):
        trainer.algo = algos[follow]
        batch = trainer.collect()
        ro = batch.rollout
        mask = ro.completion_mask.bool()
        adv = trainer.prepare(batch).advantages.advantages.unsqueeze(1).expand_as(mask)  # as the update sees them
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
            }
            if name == follow:
                end = (copy.deepcopy(trainer.model.state_dict()), copy.deepcopy(trainer.opt.state_dict()))
        trainer.model.load_state_dict(end[0])
        trainer.opt.load_state_dict(end[1])
        trainer.algo = algos[follow]
        trainer.step += 1
        history.append(row)
    return {
        "config": dataclasses.asdict(cfg),
        "arms": arms,
        "follow": follow,
        "low_p": low_p,
        "history": history,
        "summary": paired_summary(history),
    }


PAIRED_METRICS = ("entropy_change", "low_p_pos_logp_change", "pos_logp_change", "neg_logp_change", "clip_frac_high")


def paired_summary(history: list[dict]) -> dict:
    """Each arm's mean over steps and, for arms after the first, the per-step paired difference from it."""
    names = list(history[0]["arms"])
    out = {}
    for name in names:
        arm = {}
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
                    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
                    arm["vs_first"][metric] = {
                        "diff": statistics.fmean(diffs),
                        "se": se,
                        "steps": len(diffs),
                        "share_positive": sum(x > 0 for x in diffs) / len(diffs),
                    }
        out[name] = arm
    return out


def format_paired_summary(summary: dict) -> str:
    """A markdown table: each arm's means, then each later arm's paired difference from the first."""
    names = list(summary)
    head = ["arm"] + list(PAIRED_METRICS)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        cells = [name] + ["-" if summary[name][m] is None else f"{summary[name][m]:+.4f}" for m in PAIRED_METRICS]
        lines.append("| " + " | ".join(cells) + " |")
    for name in names[1:]:
        cells = [f"{name} - {names[0]}"]
        for m in PAIRED_METRICS:
            d = summary[name]["vs_first"].get(m)
            cells.append(
                "-" if d is None else f"{d['diff']:+.4f} ± {d['se']:.4f} ({100 * d['share_positive']:.0f}% > 0)"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
