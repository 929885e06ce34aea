"""Run summaries (the JSON of ``python -m grpo_lab train``): the ones committed under
``assets/histories`` read back, and what the bake-off reports from several seeds of several algorithms
(the seed table, and each algorithm's paired test against a baseline)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..lab.models import ASSETS
from .stats import detectable_gap, holm, mean_and_spread, paired_test

HISTORIES = ASSETS / "histories"


def load_history(name: str) -> dict:
    """A run summary committed under ``assets/histories/NAME.json`` by the command line."""
    path = HISTORIES / f"{name}.json"
    if not path.exists():
        available = sorted(p.stem for p in HISTORIES.glob("*.json"))
        raise ValueError(f"name must be one of the committed histories {available}; got {name!r}")
    return json.loads(path.read_text())


def load_runs(algos: Sequence[str], seeds: Sequence[int], pattern: str = "{algo}_seed{seed}") -> dict[str, list[dict]]:
    """Committed histories ``assets/histories/<pattern>.json`` as ``{algo: [summary per seed]}``."""
    if not algos or not seeds:
        raise ValueError(f"algos and seeds must be non-empty, got {list(algos)} and {list(seeds)}")
    return {a: [load_history(pattern.format(algo=a, seed=s)) for s in seeds] for a in algos}


def final_accuracy(summary: dict) -> float:
    """Held-out greedy accuracy of the final checkpoint (the run's ``after`` evaluation): every run is compared
    where it ended, not at an evaluation that falls at 70% of one run and 99% of another."""
    return summary["after"]["accuracy"]


def tail_mean(history: list[dict], key: str, n: int = 10) -> float | None:
    """Mean of ``key`` over the last ``n`` steps that recorded it (None if none did)."""
    vals = [h[key] for h in history[-n:] if h.get(key) is not None]
    return sum(vals) / len(vals) if vals else None


def generation_speed(summary: dict) -> float:
    """A run's sampling speed: tokens of every completion drawn per second of generation, the mean over its steps.
    Every algorithm uses the same sampler (the batch shape differs: GFPO draws 16 per prompt, which runs faster per
    token), so a run far below the others ran on a slower machine or in a slower session. Runs made before the lab
    counted every completion DAPO's dynamic sampling drew logged the kept groups' tokens over the time of every
    round; tokens/s x rollout seconds / mean length recovers how many completions a step's figure counted, and the
    figure is scaled to all those drawn (the dropped answers taken to be as long as the kept). For every other run
    the scale is 1."""
    rates, before = [], 0
    for h in summary["history"]:
        drawn, before = h["samples_generated"] - before, h["samples_generated"]
        tps = h["tokens_per_second"]
        counted = tps * h["rollout_seconds"] / h["length_mean"] if tps > 0 and h["length_mean"] > 0 else drawn
        rates.append(tps * drawn / counted)
    return sum(rates) / len(rates)


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


def paired_against_baseline(
    results: dict[str, list[dict]], baseline: str, metric: str = "final", alpha: float = 0.05
) -> list[dict]:
    """The course's rule for telling a gap from noise: every algorithm against ``baseline`` on one metric of
    ``RUN_METRICS``, seed by seed (``paired_test`` on the per-seed differences, since every arm runs the same
    seeds), Holm-corrected for the number of comparisons. One dict per other algorithm: ``paired_test``'s numbers
    plus ``p_holm`` and ``different`` (``p_holm < alpha``). Arms must hold the same seeds in the same order."""
    if baseline not in results:
        raise ValueError(f"baseline must be one of {list(results)}, got {baseline!r}")
    if metric not in RUN_METRICS:
        raise ValueError(f"metric must be a name from {list(RUN_METRICS)}, got {metric!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    seeds = {a: [s.get("seed") for s in runs] for a, runs in results.items()}
    for a, ss in seeds.items():
        if ss != seeds[baseline] or None in ss:
            raise ValueError(
                f"results[{a!r}] must hold the seeds of results[{baseline!r}] in the same order to pair them, "
                f"got {ss} and {seeds[baseline]}"
            )
    fn = RUN_METRICS[metric][2]
    base = [fn(s) for s in results[baseline]]
    rows = [{"algo": a, **paired_test(base, [fn(s) for s in runs])} for a, runs in results.items() if a != baseline]
    for row, p in zip(rows, holm([r["p"] for r in rows])):
        row["p_holm"], row["different"] = p, p < alpha
    return rows


def format_tests(rows: list[dict], baseline: str, fmt: str = "+.3f") -> str:
    """A markdown table of ``paired_against_baseline`` rows. ``detectable`` is the gap the test (uncorrected, at
    0.05) would find 80% of the time at the observed spread: a "no" says little about gaps below it."""
    head = f"| algo | minus {baseline} | SE | t | df | p | p (Holm) | different at 0.05 | detectable |"
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(
            f"| {r['algo']} | {format(r['diff'], fmt)} | {r['se']:.3f} | {r['t']:+.2f} | {r['df']:.1f} | "
            f"{r['p']:.3f} | {r['p_holm']:.3f} | {'yes' if r['different'] else 'no'} | "
            f"{detectable_gap(r['se'], r['df']):.3f} |"
        )
    return "\n".join(lines)
