"""Write the course's measured results from the committed JSON: `docs/results.md`, the headline
block of `README.md` (between `<!-- results:begin -->` and `<!-- results:end -->`), and the notebook
runtimes quoted by the README's syllabus and the instructor's guide (`assets/notebook_runtimes.json`).

    python tools/results_page.py           # rewrite them
    python tools/results_page.py --check   # exit 1 if any differs from what the JSON gives

Nothing here is typed by hand: every figure is computed from `assets/histories/*.json` and
`assets/tiny-sum3/pretrain_summary.json`, and `tests/course/test_results_page.py` fails when the committed
pages drift from them. A run whose settings differ from today's preset is labelled with the
difference, so an older run is never passed off as the current algorithm.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_lab.algorithms import PRESETS  # noqa: E402
from grpo_lab.study.histories import (  # noqa: E402
    format_seed_table,
    format_tests,
    generation_speed,
    load_runs,
    paired_against_baseline,
    seed_table,
)

ALGOS = ["grpo", "dr_grpo", "gspo", "dapo", "ppo", "gfpo"]
SEEDS = [0, 1, 2]  # the sample-budget race
TIME_SEEDS = [0, 1, 2, 3, 4]  # the equal-time race
RESULTS = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"

TIME_METRICS = (
    "train_seconds",
    "steps",
    "samples",
    "final",
    "gain_points",
    "length_correct",
    "length_wrong",
    "entropy",
    "kl",
    "clip_frac",
    "peak_memory_mb",
)
SAMPLE_METRICS = ("steps", "final", "gain_points", "pass@1", "pass@k", "length_correct", "length_wrong")


def _differs_from_preset(summary: dict) -> dict:
    """The algorithm fields of a committed run that differ from today's preset of the same name."""
    now = PRESETS[summary["algo"]]
    ran = summary.get("algorithm", {})
    return {k: v for k, v in ran.items() if k != "name" and hasattr(now, k) and getattr(now, k) != v}


def _labelled(*run_sets: dict[str, list[dict]]) -> dict[str, list[dict]]:
    out = {}
    for algo, summaries in (item for runs in run_sets for item in runs.items()):
        diffs = {json.dumps(_differs_from_preset(s), sort_keys=True) for s in summaries}
        diff = json.loads(diffs.pop()) if len(diffs) == 1 else None
        if diff is None:
            raise ValueError(f"the seeds of {algo} ran different settings: {diffs}")
        label = algo
        if diff:
            if set(diff) <= {"minibatches", "epochs"}:
                n = diff.get("minibatches", PRESETS[algo].minibatches) * diff.get("epochs", PRESETS[algo].epochs)
                label = f"{algo} ({n} update{'s' if n > 1 else ''} per rollout)"
            else:
                label = f"{algo} ({', '.join(f'{k}={v}' for k, v in sorted(diff.items()))})"
        if label in out:
            raise ValueError(f"two sets of runs would share the label {label!r}")
        out[label] = summaries
    return out


def first_of(runs: dict[str, list[dict]]) -> dict:
    """The first run of a race (its settings are every run's)."""
    return next(iter(runs.values()))[0]


def _sample_runs() -> dict[str, list[dict]]:
    return _labelled(load_runs(ALGOS, SEEDS, "samples_{algo}_seed{seed}"))


def _time_runs() -> dict[str, list[dict]]:
    return _labelled(load_runs(ALGOS, TIME_SEEDS, "timed_{algo}_seed{seed}"))


def _labels_note(runs: dict[str, list[dict]]) -> str:
    changed = [k for k in runs if "(" in k]
    if not changed:
        return ""
    return (
        f"\nA label in brackets marks runs made with settings that differ from today's preset "
        f"(`python -m grpo_lab train --set ...` reproduces them): {', '.join(changed)}.\n"
    )


def _slow_sessions_note(runs: dict[str, list[dict]], short: bool = False) -> str:
    speed = {a: sum(generation_speed(s) for s in ss) / len(ss) for a, ss in runs.items()}
    typical = sorted(speed.values())[len(speed) // 2]
    slow = [a for a, v in speed.items() if v < 0.6 * typical]
    if not slow:
        return ""
    if short:
        return f"\n{' and '.join(sorted(slow))}: from a slower session, not comparable in time (docs/results.md).\n"
    fast = [a for a in speed if a not in slow]
    return (
        f"\n**Not comparable in time:** {' and '.join(sorted(slow))} sampled at "
        + " and ".join(f"{speed[a]:,.0f}" for a in sorted(slow))
        + f" tokens a second against {min(speed[a] for a in fast):,.0f} to {max(speed[a] for a in fast):,.0f} for the "
        "others. Every algorithm samples a completion the same way (DAPO's refills aside), so "
        "their runs were made in a slower session, and their "
        "steps, samples and accuracy in this race are not comparable with the others'. The sample-budget race is "
        "the one to read for them.\n"
    )


def time_budget_section() -> str:
    runs = _time_runs()
    first = first_of(runs)
    budgets = {s["config"]["max_seconds"] for summaries in runs.values() for s in summaries}
    if len(budgets) != 1:
        raise ValueError(f"the equal-time race must give every run the same seconds, found {sorted(budgets)}")
    seconds = budgets.pop()
    table = format_seed_table(seed_table(runs, TIME_METRICS), TIME_METRICS)
    tests = paired_against_baseline(runs, "grpo", "final")
    return f"""## A race at equal time

Every run trained for {seconds:.0f} s on the quiet 2-core CPU, one run at a time, the seeds interleaved
(seed 0 of every algorithm, then seed 1, ...), each algorithm with its preset (16 prompts x 8 completions a
step, GFPO 16 x 16 to keep 8, DAPO refilling dropped groups; temperature 1, up to 32 new tokens,
AdamW 1e-4); held-out greedy accuracy on {first["before"]["n"]:,}
problems at the final checkpoint, from {first["before"]["accuracy"]:.3f} before training;
{len(TIME_SEEDS)} seeds, mean ± standard deviation across seeds. The same seconds buy different numbers of
steps and of completions (`steps`, `samples`). Lengths, entropy, KL and clip fraction are means over each
run's last 10 steps (training batch; lengths in tokens, over every completion sampled). GFPO's entropy and KL are
measured on the rows it trains on (the 8 shortest of 16 per prompt), DAPO's on the groups its dynamic sampling
kept, the others' on every row, so those two columns are not comparable across algorithms.

{table}
{_labels_note(runs)}{_slow_sessions_note(runs)}
Held-out accuracy against GRPO's, seed by seed (the paired t-test: every algorithm ran the same seeds), with
Holm's correction for the {len(tests)} comparisons; `detectable` is the gap the test would find 80% of the time at
the observed spread, so a "no" rules out only gaps well above it:

{format_tests(tests, "grpo")}

Command: `python -m grpo_lab compare --seconds {seconds:.0f} --seeds {" ".join(map(str, TIME_SEEDS))}` (each run
in its own process; committed as `assets/histories/timed_{{algo}}_seed{{{",".join(map(str, TIME_SEEDS))}}}.json`,
read by notebooks 03, 06 and 08), all thirty runs in one session.
"""


def sample_budget_section() -> str:
    runs = _sample_runs()
    first = first_of(runs)
    shipped = json.loads((ROOT / "assets" / "histories" / "shipped_pass_at_k.json").read_text())
    k = max(int(x) for x in shipped["pass_at_k"])
    table = format_seed_table(seed_table(runs, SAMPLE_METRICS), SAMPLE_METRICS)
    race = _labelled(load_runs(ALGOS, SEEDS, "samples_{algo}_seed{seed}"))
    tests = paired_against_baseline(race, "grpo", "final")
    return f"""## A race of equal sample budgets

Every algorithm stops once it has sampled {first["config"]["max_samples"]:,} completions (DAPO's refills and
GFPO's extra samples count, so they get fewer steps); held-out greedy accuracy and pass@k (k = {k},
unbiased estimator, {k} samples at T = 1) on {first["after"]["n"]} problems at the end; {len(SEEDS)} seeds,
mean ± standard deviation. The shipped model scores greedy {shipped["greedy_accuracy"]:.3f},
pass@1 {shipped["pass_at_k"]["1"]:.3f} and pass@{k} {shipped["pass_at_k"][str(k)]:.3f} on the same problems.

{table}
{_labels_note(runs)}
Held-out accuracy against GRPO's, seed by seed (the paired t-test on the per-seed differences, `df` = seeds - 1),
with Holm's correction for the {len(tests)} comparisons (`study.histories.paired_against_baseline`). With
{len(SEEDS)} seeds only large differences can pass (`detectable`: the gap the test would find 80% of the time at
the observed spread):

{format_tests(tests, "grpo")}

Command: `python -m grpo_lab compare --max-samples 6400 --pass-k 8 --n-eval 500 --eval-every 1000 --seeds S`
for S = 0, 1, 2 (committed as `assets/histories/samples_{{algo}}_seed{{0,1,2}}.json`, read by notebook 08,
which tests the differences against noise). Seeds 0 and 1 ran as two processes sharing the CPU, seed 2 later,
after the lab's rollout was made faster (which changes float rounding, not the algorithm), PPO again once
its preset took 2 epochs x 2 mini-batches per rollout, and DAPO and GSPO again, one run at a time on the quiet
CPU, once theirs took 4 mini-batches: training seconds in this race rank nothing.
"""


HEAD = (
    "| parameters | steps | seconds (2-core CPU) | held-out greedy accuracy | sampled accuracy, T = 1 | pass@8 "
    "| mean length, T = 1 |"
)


def _model_row(name: str) -> tuple[dict, str]:
    s = json.loads((ROOT / "assets" / name / "pretrain_summary.json").read_text())
    cells = [
        f"`{name}`",
        f"{s['parameters']:,}",
        f"{s['steps']:,}",
        f"{s['seconds']:.0f}",
        f"{s['held_out_greedy_accuracy']:.3f}",
        f"{s['held_out_sampled_accuracy_t1']:.3f}",
        f"{s['held_out_pass@8_t1']:.3f}",
        f"{s['held_out_mean_length_t1']:.1f}",
    ]
    return s, f"| {' | '.join(cells)} |"


def model_section() -> str:
    s, row = _model_row("tiny-sum3")
    long, long_row = _model_row("tiny-sum3-long")
    return f"""## The shipped models

`python -m grpo_lab pretrain` builds `assets/tiny-sum3` from scratch and stops at the first evaluation where
held-out greedy accuracy on {s["n_eval"]} problems is {s["target_accuracy"]:.0%} or more (it evaluates every few dozen
steps, so it ends above the target), so that RL starts where groups' rewards vary. `assets/tiny-sum3-long` starts
from its weights and learns answers with 0 to {long["filler"]} filler dots (up to {long["longest_answer"]} tokens),
for the lessons on length; it stops the same way, with its evaluations at {long["max_new_tokens"]} new tokens. Its
build shared the CPU with other work, so its seconds are not a timing. Accuracies in the table are on the
{s["n_eval"]} problems of the stopping test; the runs below evaluate on 500 or 1,000.

| model {HEAD}
|---|---|---|---|---|---|---|---|
{row}
{long_row}
"""


def results_page() -> str:
    return f"""# Results, measured

Generated by `python tools/results_page.py` from the committed JSON; do not edit by hand. Each
lesson's own measurements (clip fractions, lengths, entropy) are computed and checked in its notebook.

{model_section()}
{sample_budget_section()}
{time_budget_section()}"""


def _verdict(differ: list[str]) -> str:
    if not differ:
        return "no algorithm differs from GRPO"
    names = differ[0] if len(differ) == 1 else ", ".join(differ[:-1]) + " and " + differ[-1]
    verb = "differs" if len(differ) == 1 else "differ"
    return f"{names} {verb} from GRPO; the other gaps are not separated from noise"


def readme_block() -> str:
    runs = _sample_runs()
    metrics = ("final", "gain_points", "pass@1", "pass@k")
    table = format_seed_table(seed_table(runs, metrics), metrics)
    first = first_of(runs)
    timed = _time_runs()
    seconds = first_of(timed)["config"]["max_seconds"]
    time_table = format_seed_table(
        seed_table(timed, ("final", "gain_points", "steps", "samples")), ("final", "gain_points", "steps", "samples")
    )
    tests = paired_against_baseline(timed, "grpo", "final")
    differ = [r["algo"] for r in tests if r["different"]]
    verdict = _verdict(differ)
    sample_differ = [r["algo"] for r in paired_against_baseline(runs, "grpo", "final") if r["different"]]
    sample_verdict = _verdict(sample_differ)
    return f"""{BEGIN}
Every algorithm from the shipped model, stopped after {first["config"]["max_samples"]:,} sampled completions,
{len(SEEDS)} seeds (mean ± std), held-out on {first["after"]["n"]} problems, pass@k with k = 8; paired over seeds, with
Holm's correction, {sample_verdict}:

{table}
{_labels_note(runs)}
The same {seconds:.0f} s of training for every algorithm on the quiet 2-core CPU, {len(TIME_SEEDS)} seeds, held-out on
{first_of(timed)["after"]["n"]:,} problems; paired over seeds, with Holm's correction, {verdict}:

{time_table}
{_labels_note(timed)}{_slow_sessions_note(timed, short=True)}
All measurements, each with its command: [docs/results.md](docs/results.md).
{END}"""


RUNTIMES = ROOT / "assets" / "notebook_runtimes.json"
BENCH = ROOT / "assets" / "bench" / "bench_cpu.json"
SPEED_BEGIN, SPEED_END = "<!-- speed:begin -->", "<!-- speed:end -->"
ARM_NAMES = {
    "lab": "the lab",
    "lab_no_prompt_sharing": "the lab without prompt sharing",
    "lab_no_compaction": "the lab without finished rows leaving the batch",
    "lab_no_length_grouping": "the lab without length grouping in the update",
}


def speed_block() -> str:
    b = json.loads(BENCH.read_text())
    cfg, tr = b["config"], b["config"]["train"]
    rows = []
    for c in b["comparisons"]:
        lab, trl = b["arms"][c["lab_arm"]], b["arms"][c["trl_arm"]]
        si, ti = c["step_interval"], c["token_interval"]
        step = f"**{si['estimate']:.2f}x** ({si['low']:.2f}-{si['high']:.2f})"
        token = f"{ti['estimate']:.2f}x ({ti['low']:.2f}-{ti['high']:.2f})"
        times = f"{lab['median_step_seconds']:.3f} s | {trl['median_step_seconds']:.3f} s"
        rows.append(f"| {ARM_NAMES[c['lab_arm']]} | {times} | {step} | {token} |")
    interval = b["comparisons"][0]["step_interval"]
    r, m, v = b["rollout"], b["machine"], b["versions"]
    lab_gen, hf_gen = r["lab_sample_group"], r["hf_generate"]
    same = "identical" if r["greedy_outputs_match"] else "NOT identical"
    machine = f"{m['cpu_count']}-core CPU ({m['device_name']}; torch {v['torch']}, transformers {v['transformers']}"
    return f"""{SPEED_BEGIN}
Measured on the quiet {machine}, TRL {v["trl"]}), {tr["prompts_per_step"]} prompts x G = {tr["group_size"]},
{tr["max_new_tokens"]} new tokens, {cfg["pairs"]} alternating pairs of runs of {cfg["warmup"]} warm-up +
{cfg["steps"]} timed steps each; TRL's time over the lab's, the median over pairs with its
{interval["level"]:.0%} bootstrap interval ({interval["method"]} over the pairs):

| lab arm | lab step, median | TRL step, median | TRL / lab per step | TRL / lab per generated token |
|---|---|---|---|---|
{chr(10).join(rows)}

Each speed-up switched off alone brings the ratio towards 1.0x. The lab's sampler against a plain
`model.generate` loop, {lab_gen["completions_per_call"]} completions a call, {lab_gen["calls"]} calls each:
{lab_gen["tokens_per_second"]:,.0f} against {hf_gen["tokens_per_second"]:,.0f} tokens/s
({r["speedup_tokens_per_second"]:.2f}x), the greedy outputs {same}.
TRL's continuous-batching generation was not measured on the CPU (too slow there to time in pairs).
The run is committed as `assets/bench/bench_cpu.json`.
{SPEED_END}"""


GUIDE = ROOT / "docs" / "instructors_guide.md"


def _with_runtimes(text: str, row_start: str) -> str:
    """``text`` with the runtime cell of every notebook row (``| NN | ...``) set from the measured runtimes.

    ``row_start`` picks the rows: the README's syllabus links the notebook, the guide's table names it."""
    seconds = json.loads(RUNTIMES.read_text())["seconds"]
    by_number = {stem[:2]: s for stem, s in seconds.items()}
    out = []
    for line in text.splitlines(keepends=True):
        number = line[2:4]
        if line.startswith("| ") and number in by_number and line.startswith(row_start.format(n=number)):
            cells = line.rstrip("\n").removesuffix(" |").split(" | ")
            for i, cell in enumerate(cells):
                if cell.endswith(" s") and cell[:-2].isdigit():
                    cells[i] = f"{by_number[number]} s"
            line = " | ".join(cells) + " |\n"
        out.append(line)
    return "".join(out)


def _runtime_range() -> str:
    seconds = json.loads(RUNTIMES.read_text())["seconds"].values()
    return f"between {min(seconds)} s and {max(seconds)} s a notebook"


def _guide(text: str) -> str:
    import re

    text = _with_runtimes(text, "| {n} | ")
    return re.sub(r"between \d+ s and \d+ s a notebook", _runtime_range(), text)


def _with_block(readme: str) -> str:
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"README.md must contain {BEGIN} and {END}")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme = head + readme_block() + tail
    if SPEED_BEGIN not in readme or SPEED_END not in readme:
        raise ValueError(f"README.md must contain {SPEED_BEGIN} and {SPEED_END}")
    head, rest = readme.split(SPEED_BEGIN, 1)
    _, tail = rest.split(SPEED_END, 1)
    return _with_runtimes(head + speed_block() + tail, "| {n} | [")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed pages differ from the JSON")
    args = parser.parse_args(argv)
    page, readme, guide = results_page(), _with_block(README.read_text()), _guide(GUIDE.read_text())
    pages = ((RESULTS, page), (README, readme), (GUIDE, guide))
    if args.check:
        stale = [p.name for p, text in pages if not p.exists() or p.read_text() != text]
        if stale:
            print(f"out of date with the committed JSON: {', '.join(stale)}; run: python tools/results_page.py")
            return 1
        return 0
    for path, text in pages:
        path.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
