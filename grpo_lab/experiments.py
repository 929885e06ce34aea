"""Side-by-side runs: several algorithms, several seeds, the same task and budget.

``python -m grpo_lab compare`` runs each (algorithm, seed) in its own process (so its peak
memory is its own), then prints a table with the spread across seeds. Accuracy is held-out
greedy accuracy, the mean of the last two evaluations of each run, so that one lucky
evaluation does not decide.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# The learning targets of the lab (issue "The lab"): training seconds on a 2-core CPU.
TIME_BUDGETS = {"grpo": 90, "dr_grpo": 90, "gspo": 90, "dapo": 135, "ppo": 180, "gfpo": 180}


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


def run_one(algo: str, seed: int, seconds: float | None, steps: int, eval_every: int, n_eval: int, out: Path,
            extra: list[str] | None = None, quiet: bool = True) -> dict:
    """One training run in a fresh process; returns its JSON summary."""
    cmd = [sys.executable, "-m", "grpo_lab", "train", "--algo", algo, "--seed", str(seed), "--steps", str(steps),
           "--eval-every", str(eval_every), "--n-eval", str(n_eval), "--json", str(out)]
    if seconds is not None:
        cmd += ["--seconds", str(seconds)]
    if quiet:
        cmd.append("--quiet")
    cmd += extra or []
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return json.loads(out.read_text())


def summarise(results: dict[str, list[dict]]) -> list[dict]:
    """One row per algorithm: means and standard deviations across seeds."""
    rows = []
    for algo, runs in results.items():
        def stat(values):
            values = [v for v in values if v is not None]
            if not values:
                return None, None
            return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)

        before = stat([r["before"]["accuracy"] for r in runs])
        final = stat([final_accuracy(r) for r in runs])
        gain = stat([final_accuracy(r) - r["before"]["accuracy"] for r in runs])
        rows.append({
            "algo": algo,
            "seeds": len(runs),
            "train_seconds": stat([r["train_seconds"] for r in runs])[0],
            "steps": stat([r["steps"] for r in runs])[0],
            "before": before[0],
            "final": final[0],
            "final_std": final[1],
            "gain_points": 100 * gain[0],
            "gain_std_points": 100 * gain[1],
            "length_after": stat([r["after"]["mean_length"] for r in runs])[0],
            "length_correct": stat([tail_mean(r["history"], "length_correct") for r in runs])[0],
            "length_wrong": stat([tail_mean(r["history"], "length_wrong") for r in runs])[0],
            "entropy": stat([tail_mean(r["history"], "entropy") for r in runs])[0],
            "kl": stat([tail_mean(r["history"], "kl") for r in runs])[0],
            "clip_frac": stat([tail_mean(r["history"], "clip_frac") for r in runs])[0],
            "samples_per_step": stat([r["history"][-1]["samples_generated"] / max(1, r["steps"]) for r in runs])[0],
            "peak_memory_mb": stat([r["peak_memory_mb"] for r in runs])[0],
        })
    return rows


def format_table(rows: list[dict]) -> str:
    head = ("algo", "seeds", "train s", "steps", "before", "final", "gain (pts)", "len ok", "len wrong", "entropy", "kl", "clip", "samples/step", "peak MB")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    for r in rows:
        lines.append("| " + " | ".join([
            r["algo"], str(r["seeds"]), f(r["train_seconds"], ".0f"), f(r["steps"], ".0f"), f(r["before"], ".3f"),
            f"{f(r['final'], '.3f')} ± {f(r['final_std'], '.3f')}", f"{f(r['gain_points'], '+.1f')} ± {f(r['gain_std_points'], '.1f')}",
            f(r["length_correct"], ".1f"), f(r["length_wrong"], ".1f"), f(r["entropy"], ".3f"), f(r["kl"], ".3f"),
            f(r["clip_frac"], ".4f"), f(r["samples_per_step"], ".0f"), f(r["peak_memory_mb"], ".0f"),
        ]) + " |")
    return "\n".join(lines)


def compare(algos: list[str], seeds: list[int], seconds: dict[str, float] | None = None, steps: int = 100000,
            eval_every: int = 20, n_eval: int = 1000, out_dir: str | Path | None = None, extra: list[str] | None = None,
            progress=print) -> dict:
    """Run every algorithm with every seed; return ``{"runs": {...}, "rows": [...], "table": str}``."""
    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="grpo_lab_compare_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {}
    for algo in algos:
        for seed in seeds:
            budget = (seconds or {}).get(algo)
            s = run_one(algo, seed, budget, steps, eval_every, n_eval, out_dir / f"{algo}-seed{seed}.json", extra)
            results.setdefault(algo, []).append(s)
            if progress:
                progress(f"{algo} seed {seed}: {s['before']['accuracy']:.3f} -> {final_accuracy(s):.3f} "
                         f"in {s['train_seconds']:.0f} s ({s['steps']} steps)")
    rows = summarise(results)
    return {"runs": {a: [str(out_dir / f"{a}-seed{s}.json") for s in seeds] for a in algos}, "rows": rows, "table": format_table(rows)}
