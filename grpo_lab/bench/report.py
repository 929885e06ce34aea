"""The bench's numbers from its runs: each arm over its runs, TRL's time over the lab's pair by pair
with a bootstrap interval, and the plain-text table the command prints."""

from __future__ import annotations

import statistics

from ..study.stats import bootstrap_interval, spread
from .config import LAB_ARMS, MIN_PAIRS_FOR_README, TRL_ARMS
from .timing import CATEGORIES


def summarise_steps(steps: list[dict], warmup: int) -> dict:
    """One run: its timed steps, where the time went, and the tokens through the model."""
    timed = steps[warmup:]
    secs = [s["seconds"] for s in timed]
    mean_step = statistics.fmean(secs)
    out = {
        "step_seconds": [round(s, 5) for s in secs],
        "warmup_step_seconds": [round(s["seconds"], 5) for s in steps[:warmup]],
        "median_step_seconds": statistics.median(secs),
        "mean_step_seconds": mean_step,
        "breakdown_seconds": {},
        "breakdown_fraction": {},
    }
    for c in CATEGORIES + ("other",):
        v = statistics.fmean(s[c] for s in timed)
        out["breakdown_seconds"][c] = v
        out["breakdown_fraction"][c] = v / mean_step if mean_step > 0 else float("nan")
    total = {k: int(sum(s[k] for s in timed)) for k in ("tokens", "prompt_tokens", "completions")}
    out.update(total)
    out["update_tokens"] = total["prompt_tokens"] + total["tokens"]
    out["reward_mean"] = statistics.fmean(s["reward_mean"] for s in timed)
    out["mean_completion_length"] = total["tokens"] / total["completions"] if total["completions"] else float("nan")
    out["seconds_per_token"] = _per_token(
        sum(secs),
        sum(s["generation"] for s in timed),
        sum(s["forward_backward"] for s in timed),
        total["tokens"],
        out["update_tokens"],
    )
    return out


def _per_token(step: float, generation: float, forward_backward: float, tokens: int, update_tokens: int) -> dict:
    """Seconds per token: the step and generation per completion token sampled, the update's forward +
    backward per token it covers (prompt + completion of every row)."""
    return {
        "step": step / tokens,
        "generation": generation / tokens,
        "forward_backward": forward_backward / update_tokens,
    }


def summarise_arm(runs: list[dict]) -> dict:
    """An arm over all its runs: the spread of every timed step, and seconds per token pooled."""
    steps = [s for r in runs for s in r["step_seconds"]]
    tokens = sum(r["tokens"] for r in runs)
    update_tokens = sum(r["update_tokens"] for r in runs)
    n_steps = len(steps)
    return {
        "library": runs[0]["library"],
        "runs": len(runs),
        "median_step_seconds": statistics.median(steps),
        "step_spread": spread(steps),
        "run_median_step_seconds": [r["median_step_seconds"] for r in runs],
        "breakdown_seconds": {
            c: statistics.fmean(r["breakdown_seconds"][c] for r in runs) for c in CATEGORIES + ("other",)
        },
        "tokens_per_step": tokens / n_steps,
        "update_tokens_per_step": update_tokens / n_steps,
        "mean_completion_length": tokens / sum(r["completions"] for r in runs),
        "seconds_per_token": _per_token(
            sum(steps),
            sum(r["breakdown_seconds"]["generation"] * len(r["step_seconds"]) for r in runs),
            sum(r["breakdown_seconds"]["forward_backward"] * len(r["step_seconds"]) for r in runs),
            tokens,
            update_tokens,
        ),
        "reward_mean": statistics.fmean(r["reward_mean"] for r in runs),
        "peak_memory_added_mb": max(r["memory"]["peak_added_mb"] for r in runs),
        "peak_memory_mb": max(r["memory"]["peak_mb"] for r in runs),
    }


def pair_ratios(lab_runs: list[dict], trl_runs: list[dict], level: float = 0.95) -> dict:
    """TRL over the lab, pair by pair (run i of each): the ratio of median step times and of step
    seconds per generated token, each with its median and bootstrap interval over the pairs."""
    step = [t["median_step_seconds"] / lab["median_step_seconds"] for lab, t in zip(lab_runs, trl_runs, strict=True)]
    token = [
        t["seconds_per_token"]["step"] / lab["seconds_per_token"]["step"]
        for lab, t in zip(lab_runs, trl_runs, strict=True)
    ]
    out = {
        "pairs": len(step),
        "step_ratios": step,
        "median_step_ratio": statistics.median(step),
        "token_ratios": token,
        "median_token_ratio": statistics.median(token),
    }
    if len(step) >= 2:
        out["step_interval"] = bootstrap_interval(step, level)
        out["token_interval"] = bootstrap_interval(token, level)
    return out


def comparisons_for(arms: tuple) -> list[tuple[str, str]]:
    """(lab arm, TRL arm) pairs reported: every lab arm against ``trl``, and ``lab`` against each
    other TRL arm."""
    out = [(a, "trl") for a in LAB_ARMS if a in arms and "trl" in arms]
    out += [("lab", t) for t in TRL_ARMS if t != "trl" and t in arms and "lab" in arms]
    return out


def _fmt_interval(c: dict, kind: str) -> str:
    iv = c.get(f"{kind}_interval")
    if iv is None:
        return "(one pair: no interval)"
    return f"({100 * iv['level']:.0f}% interval {iv['low']:.2f}-{iv['high']:.2f})"


def format_table(r: dict) -> str:
    """The bench result as plain text: each arm's step, its spread and time per token, then the ratios."""
    c = r["config"]
    t = c["train"]
    lines = [
        f"bench: {t['prompts_per_step']} prompts x G={t['group_size']}, {t['max_new_tokens']} new tokens, "
        f"T={t['temperature']:g}, lr={t['lr']:g}, model {t['model']}; {c['pairs']} pairs of runs, each "
        f"{c['warmup']} warm-up + {c['steps']} timed steps; device {r['machine']['device']} "
        f"({r['machine']['device_name']}), {r['machine']['cpu_count']} CPUs, load {_load(r)}"
    ]
    if r.get("arms"):
        lines += [
            "",
            f"{'arm':26}{'step median (s)':>17}{'q1-q3 (s)':>16}{'ms/token':>10}{'gen ms/tok':>12}"
            f"{'upd ms/tok':>12}{'tokens/step':>13}{'peak +MB':>10}",
        ]
        for name, a in r["arms"].items():
            sp, pt = a["step_spread"], a["seconds_per_token"]
            lines.append(
                f"{name:26}{a['median_step_seconds']:>17.3f}{sp['q1']:>8.3f}-{sp['q3']:<7.3f}"
                f"{1e3 * pt['step']:>10.3f}{1e3 * pt['generation']:>12.3f}{1e3 * pt['forward_backward']:>12.4f}"
                f"{a['tokens_per_step']:>13.0f}{a['peak_memory_added_mb']:>10.0f}"
            )
        lines += ["", "where the step goes (mean seconds): " + ", ".join(CATEGORIES + ("other",))]
        for name, a in r["arms"].items():
            lines.append(
                f"  {name:24}" + " ".join(f"{a['breakdown_seconds'][k]:7.3f}" for k in CATEGORIES + ("other",))
            )
    if r.get("comparisons"):
        lines += ["", "TRL's time over the lab's (median over pairs):"]
        for cmp in r["comparisons"]:
            lines.append(
                f"  {cmp['trl_arm']} / {cmp['lab_arm']}: per step {cmp['median_step_ratio']:.2f}x "
                f"{_fmt_interval(cmp, 'step')}; per generated token {cmp['median_token_ratio']:.2f}x "
                f"{_fmt_interval(cmp, 'token')}"
            )
        if c["pairs"] < MIN_PAIRS_FOR_README:
            lines.append(f"  (only {c['pairs']} pairs: use at least {MIN_PAIRS_FOR_README} for a figure worth quoting)")
        lines.append(f"  same prompts on every run: {r['same_prompts']}")
    if "rollout" in r:
        ro = r["rollout"]
        a, b = ro["lab_sample_group"], ro["hf_generate"]
        lines += [
            "",
            f"rollout, {a['completions_per_call']} completions per call, {a['calls']} calls each (alternated):",
            f"  lab sample_group   {a['tokens_per_second']:9.0f} tokens/s  ({a['median_call_seconds']:.3f} s per call)",
            f"  model.generate     {b['tokens_per_second']:9.0f} tokens/s  ({b['median_call_seconds']:.3f} s per call)",
            f"  ratio {ro['speedup_tokens_per_second']:.2f}x; greedy outputs identical: {ro['greedy_outputs_match']}",
        ]
    return "\n".join(lines)


def _load(r) -> str:
    la = r["machine"].get("load_average_at_start")
    return f"{la[0]:.1f}" if la else "unknown"
