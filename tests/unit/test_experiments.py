"""The bake-off's helpers: spread across seedss against noise, the seed table, the
sample budget (trainer and command line), and the pass@k curve of ``evaluate``.

Expected values are computed by hand here, never copied from the code under test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from grpo_lab.study.compare import compare
from grpo_lab.study.histories import (
    RUN_METRICS,
    format_seed_table,
    format_tests,
    generation_speed,
    paired_against_baseline,
    run_metrics,
    seed_table,
)
from grpo_lab.train.trainer import TrainConfig, Trainer


def test_paired_against_baseline_pairs_by_seed_and_corrects_for_the_comparisons():
    def runs(accs):
        return [{**_summary(0.4, [x, x], 20.0, 0.1, 512), "seed": s} for s, x in enumerate(accs)]  # final = x

    results = {"grpo": runs([0.70, 0.75, 0.80]), "far": runs([0.50, 0.58, 0.61]), "near": runs([0.72, 0.77, 0.83])}
    rows = paired_against_baseline(results, "grpo")
    assert [r["algo"] for r in rows] == ["far", "near"]
    far, near = rows
    # By hand: far's differences -0.20, -0.17, -0.19 (mean -0.18667, sd 0.015275, SE 0.0088192, t -21.166);
    # near's 0.02, 0.02, 0.03 (t = 7 exactly). With 2 df the two-sided p is 1 - |t| / sqrt(t^2 + 2).
    assert far["diff"] == pytest.approx(-0.56 / 3) and far["t"] == pytest.approx(-21.166, abs=1e-3) and far["df"] == 2
    p_far, p_near = 1 - 21.16601 / math.sqrt(21.16601**2 + 2), 1 - 7 / math.sqrt(51)
    assert far["p"] == pytest.approx(p_far, rel=1e-4) and near["p"] == pytest.approx(p_near, rel=1e-6)
    assert far["p_holm"] == pytest.approx(2 * p_far, rel=1e-4) and far["different"]  # smallest of two: times 2
    assert near["p_holm"] == pytest.approx(p_near, rel=1e-6) and near["different"]  # already above 2 * p_far
    assert not paired_against_baseline(results, "grpo", alpha=0.01)[1]["different"]
    # with one comparison fewer, no correction
    alone = paired_against_baseline({"grpo": results["grpo"], "near": results["near"]}, "grpo")
    assert alone[0]["p_holm"] == pytest.approx(p_near, rel=1e-6)
    table = format_tests(rows, "grpo").splitlines()
    assert table[0].startswith("| algo | minus grpo | SE | t | df | p | p (Holm)")
    # detectable: (t_0.975,2 + t_0.8,2) x SE = (4.302653 + 1.060660) x 0.0088192 = 0.0473 (t tables)
    assert table[2] == "| far | -0.187 | 0.009 | -21.17 | 2.0 | 0.002 | 0.004 | yes | 0.047 |"
    with pytest.raises(ValueError, match="baseline must be one of"):
        paired_against_baseline(results, "ppo")
    with pytest.raises(ValueError, match="metric must be a name from"):
        paired_against_baseline(results, "grpo", metric="acc")
    shuffled = {"grpo": results["grpo"], "far": results["far"][::-1]}
    with pytest.raises(ValueError, match=r"results\['far'\] must hold the seeds of results\['grpo'\]"):
        paired_against_baseline(shuffled, "grpo")


def test_generation_speed_counts_every_completion_drawn():
    # Step 1 logged 100 tokens/s over 2 s at a mean length of 10: its figure counted 20 completions of the 40
    # drawn (an old DAPO run: kept groups only), so all 40 ran at 200 tokens/s. Step 2 counted 50 * 1 / 5 = 10,
    # every completion it drew: 50 tokens/s as logged.
    hist = [
        {"tokens_per_second": 100.0, "rollout_seconds": 2.0, "length_mean": 10.0, "samples_generated": 40},
        {"tokens_per_second": 50.0, "rollout_seconds": 1.0, "length_mean": 5.0, "samples_generated": 50},
    ]
    assert generation_speed({"history": hist}) == pytest.approx((200.0 + 50.0) / 2)


def _summary(before, evals, lengths_right, kl, samples, pass_curve=None):
    hist = [
        {
            "step": i + 1,
            "length_correct": lengths_right,
            "length_wrong": 10.0,
            "entropy": 0.3,
            "kl": kl,
            "clip_frac": 0.0,
            "samples_generated": samples * (i + 1) // 4,
        }
        for i in range(4)
    ]
    s = {
        "before": {"accuracy": before},
        "after": {"accuracy": evals[-1]},
        "evals": [{"accuracy": e} for e in evals],
        "history": hist,
        "steps": 4,
        "train_seconds": 12.0,
        "peak_memory_mb": 900.0,
    }
    if pass_curve:
        s["pass_at_k"] = pass_curve
    return s


def test_run_metrics_reads_the_summary():
    summary = _summary(0.4, [0.5, 0.6, 0.7], 20.0, 0.1, 512, {"1": 0.6, "2": 0.75, "4": 0.9})
    summary["after"]["accuracy"] = 0.72  # the final checkpoint's evaluation, not any of the evals during training
    m = run_metrics(summary)
    assert m["final"] == 0.72
    assert m["gain_points"] == pytest.approx(32.0)
    assert m["pass@1"] == 0.6 and m["pass@k"] == 0.9  # the largest k recorded
    assert m["samples"] == 512 and m["steps"] == 4 and m["length_correct"] == 20.0
    assert run_metrics(_summary(0.4, [0.5], 20.0, 0.1, 512))["pass@k"] is None


def test_seed_table_and_its_markdown():
    results = {
        "grpo": [_summary(0.4, [0.7], 20.0, 0.1, 512), _summary(0.4, [0.8], 22.0, 0.3, 512)],
        "gfpo": [_summary(0.4, [0.5], 14.0, 0.2, 1024)],
    }
    rows = seed_table(results, metrics=("final", "kl", "pass@k"))
    assert rows[0]["algo"] == "grpo" and rows[0]["seeds"] == 2
    assert rows[0]["final"]["mean"] == pytest.approx(0.75) and rows[0]["final"]["std"] == pytest.approx(
        0.05 * math.sqrt(2)
    )
    assert rows[0]["pass@k"] is None
    table = format_seed_table(rows, metrics=("final", "kl", "pass@k"))
    lines = table.splitlines()
    assert lines[0] == "| algo | seeds | held-out acc | KL | pass@k |"
    assert lines[2] == "| grpo | 2 | 0.750 ± 0.071 | 0.200 ± 0.141 | - |"
    assert lines[3] == "| gfpo | 1 | 0.500 | 0.200 | - |"  # one seed: no spread to show
    with pytest.raises(ValueError, match="metrics must be names from"):
        seed_table(results, metrics=("accuracy_typo",))
    with pytest.raises(ValueError, match="must hold at least one run"):
        seed_table({"grpo": []})
    with pytest.raises(ValueError, match="spread must be 'std' or 'se'"):
        format_seed_table(rows, spread="iqr")


def test_every_run_metric_has_a_label_and_a_format():
    for name, (label, fmt, fn) in RUN_METRICS.items():
        assert label and callable(fn)
        format(1.0, fmt)


@pytest.mark.parametrize("bad", [0, -5, True, 2.5])
def test_max_samples_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="max_samples must be a positive integer"):
        TrainConfig(max_samples=bad)


@pytest.mark.parametrize("algo,per_step", [("grpo", 2 * 4), ("gfpo", 2 * 16)])
def test_a_sample_budget_stops_once_enough_completions_were_sampled(fresh_policy, small_task, algo, per_step):
    # 2 prompts x 4 completions = 8 a step (GFPO samples 16 a prompt, keeps 4): budget 20 -> 3 steps of 8, 1 of 32
    model, tok = fresh_policy()
    cfg = TrainConfig(algo=algo, steps=50, prompts_per_step=2, group_size=4, max_new_tokens=12, max_samples=20)
    t = Trainer(cfg, model=model, tokenizer=tok, task=small_task)
    hist = t.train(progress=False)
    assert len(hist) == math.ceil(20 / per_step)
    assert hist[-1]["samples_generated"] == len(hist) * per_step
    assert "sample budget of 20 completions" in t.stop_reason


def test_evaluate_reports_the_whole_pass_at_k_curve(tiny_policy, small_task):
    from grpo_lab.lab.metrics import evaluate

    model, tok = tiny_policy
    out = evaluate(model, tok, small_task, n_prompts=6, samples=4, max_new_tokens=12, seed=0)
    curve = out["pass_at_k"]
    assert sorted(curve) == [1, 2, 3, 4]
    assert curve[1] == pytest.approx(out["accuracy"])  # unbiased pass@1 is the share right
    assert curve[4] == pytest.approx(out["pass@4"])
    assert all(curve[k] <= curve[k + 1] + 1e-12 for k in (1, 2, 3))


def test_cli_train_accepts_a_sample_budget(tmp_path):
    from grpo_lab.cli.main import main

    out = tmp_path / "run.json"
    rc = main(
        [
            "train",
            "--algo",
            "grpo",
            "--steps",
            "20",
            "--max-samples",
            "16",
            "--prompts",
            "2",
            "--group-size",
            "4",
            "--max-new-tokens",
            "12",
            "--n-eval",
            "4",
            "--quiet",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    s = json.loads(out.read_text())
    assert s["steps"] == 2 and s["history"][-1]["samples_generated"] == 16
    assert "sample budget" in s["stop_reason"]


# --- compare: checked before any run, written whole, stopped cleanly ------------------------------


def _fake_runs(monkeypatch, calls=None):
    """Stand in for the child `train` process: write a committed summary where it was asked to."""
    from grpo_lab.study import compare as study_compare
    from grpo_lab.study.histories import HISTORIES

    def fake(cmd):
        if calls is not None:
            calls.append(cmd)
        Path(cmd[cmd.index("--json") + 1]).write_text((HISTORIES / "timed_grpo_seed0.json").read_text())

    monkeypatch.setattr(study_compare, "_run", fake)


@pytest.mark.parametrize(
    "algos,seeds,match",
    [
        (["grpo", "grpo"], [0], r"algos must not repeat a value, got \['grpo', 'grpo'\] \(grpo twice\)"),
        (["grpo"], [0, 1, 0], r"seeds must not repeat a value, got \[0, 1, 0\] \(0 twice\)"),
        ([], [0], "algos must name at least one"),
        (["grpo"], [], "seeds must name at least one"),
    ],
)
def test_compare_refuses_a_repeated_run_before_running_anything(tmp_path, monkeypatch, algos, seeds, match):
    calls = []
    _fake_runs(monkeypatch, calls)
    with pytest.raises(ValueError, match=match):
        compare(algos, seeds, steps=1, out_dir=tmp_path / "out", progress=None)
    assert calls == [] and not (tmp_path / "out").exists()


def test_compare_refuses_a_folder_of_other_files_and_replaces_its_own(tmp_path, monkeypatch):
    _fake_runs(monkeypatch)
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("keep me")
    with pytest.raises(ValueError, match=r"out_dir .*notes is a folder with other files in it \(no summary.json\)"):
        compare(["grpo"], [0], steps=1, out_dir=foreign, progress=None)
    assert [p.name for p in foreign.iterdir()] == ["mine.txt"]

    out = tmp_path / "cmp"
    first = compare(["grpo", "dapo"], [0], steps=1, out_dir=out, progress=None)
    assert sorted(p.name for p in out.iterdir()) == ["dapo-seed0.json", "grpo-seed0.json", "summary.json"]
    assert json.loads((out / "summary.json").read_text())["runs"] == first["runs"]
    assert first["runs"]["grpo"] == [str(out / "grpo-seed0.json")]
    again = compare(["grpo"], [1], steps=1, out_dir=out, progress=None)  # a comparison's folder: replaced whole
    assert sorted(p.name for p in out.iterdir()) == ["grpo-seed1.json", "summary.json"]
    assert again["rows"][0]["seeds"] == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary folder left


def test_a_failed_run_leaves_no_half_comparison(tmp_path, monkeypatch):
    from grpo_lab.study import compare as study_compare

    def failing(cmd):
        raise study_compare.ChildRunFailed("the run failed (exit status 1): boom", 1)

    monkeypatch.setattr(study_compare, "_run", failing)
    with pytest.raises(study_compare.ChildRunFailed, match="boom"):
        compare(["grpo"], [0], steps=1, out_dir=tmp_path / "out", progress=None)
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and list((tmp_path / "out").iterdir()) == []


# A child that, like `train`, stops on SIGINT/SIGTERM: it notes the signal it got and exits 130.
_CHILD = """
import signal, sys, time
def stop(signum, frame):
    open(sys.argv[1], "w").write(signal.Signals(signum).name)
    sys.exit(130)
for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, stop)
open(sys.argv[1] + ".started", "w").close()
time.sleep(60)
"""


@pytest.mark.parametrize("sent,received", [("SIGTERM", "SIGTERM"), ("SIGHUP", "SIGTERM"), ("SIGINT", "SIGINT")])
def test_a_stop_signal_to_compare_is_passed_on_to_its_running_child(tmp_path, sent, received):
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    from grpo_lab.study.compare import ChildRunFailed, _run

    note = tmp_path / "got"
    pids = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):  # note the child's pid, to check it is gone afterwards
        proc = real_popen(*args, **kwargs)
        pids.append(proc.pid)
        return proc

    def send_when_started():
        deadline = time.monotonic() + 60
        while not Path(str(note) + ".started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), getattr(signal, sent))  # to this process, as `kill` or a closed terminal would

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    threading.Thread(target=send_when_started, daemon=True).start()
    subprocess.Popen = popen
    try:
        with pytest.raises(ChildRunFailed) as info:
            _run([sys.executable, "-c", _CHILD, str(note)])
    finally:
        subprocess.Popen = real_popen
    assert info.value.returncode == 130 and "was stopped" in str(info.value)
    assert note.read_text() == received
    with pytest.raises(ProcessLookupError):  # the child is gone, not running on as an orphan
        os.kill(pids[0], 0)
    assert {s: signal.getsignal(s) for s in before} == before  # this process's own handlers are back


def test_a_stopped_compare_keeps_its_finished_runs_and_their_table(tmp_path, monkeypatch):
    from grpo_lab.study import compare as study_compare
    from grpo_lab.study.histories import HISTORIES

    def second_run_stopped(cmd):
        out = Path(cmd[cmd.index("--json") + 1])
        out.write_text((HISTORIES / "timed_grpo_seed0.json").read_text())  # a stopped run writes its steps too
        if "dapo" in cmd:
            raise study_compare.ChildRunFailed("the run `train --algo dapo ...` was stopped: interrupted", 130)

    monkeypatch.setattr(study_compare, "_run", second_run_stopped)
    out = tmp_path / "cmp"
    kept = r"stopped during the run of dapo with seed 0; the 1 finished run with its table and the stopped run.s steps"
    with pytest.raises(study_compare.ChildRunFailed, match=kept):
        compare(["grpo", "dapo"], [0], steps=1, out_dir=out, progress=None)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] is True and summary["runs"] == {"grpo": [str(out / "grpo-seed0.json")]}
    assert [r["algo"] for r in summary["rows"]] == ["grpo"]
    assert (out / "dapo-seed0.json").exists()  # the stopped run's measured steps, kept
