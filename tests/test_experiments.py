"""The bake-off's helpers: spread across seedss against noise, the seed table, the
sample budget (trainer and command line), and the pass@k curve of ``evaluate``.

Expected values are computed by hand here, never copied from the code under test.
"""

from __future__ import annotations

import json
import math

import pytest

from grpo_lab.study.histories import (
    RUN_METRICS,
    format_seed_table,
    format_tests,
    run_metrics,
    seed_table,
    welch_against_baseline,
)
from grpo_lab.train.trainer import TrainConfig, Trainer


def test_welch_against_baseline_a_baseline_corrects_for_the_comparisons():
    def runs(accs):
        return [_summary(0.4, [x, x], 20.0, 0.1, 512) for x in accs]  # final accuracy = x

    results = {"grpo": runs([0.70, 0.75, 0.80]), "far": runs([0.50, 0.58, 0.61]), "near": runs([0.72, 0.77, 0.83])}
    rows = welch_against_baseline(results, "grpo")
    assert [r["algo"] for r in rows] == ["far", "near"]
    far, near = rows
    assert far["p"] == pytest.approx(0.0134096291604444, rel=1e-9)  # as in test_welch_test_matches_scipy
    assert far["p_holm"] == pytest.approx(2 * far["p"]) and far["different"]  # smallest of two p: times 2
    assert near["p_holm"] == pytest.approx(max(near["p"], 2 * far["p"])) and not near["different"]
    # with one comparison fewer, no correction: the same p passes a stricter alpha
    alone = welch_against_baseline({"grpo": results["grpo"], "far": results["far"]}, "grpo", alpha=0.02)
    assert alone[0]["p_holm"] == pytest.approx(far["p"]) and alone[0]["different"]
    assert not welch_against_baseline(results, "grpo", alpha=0.02)[0]["different"]
    table = format_tests(rows, "grpo").splitlines()
    assert table[0].startswith("| algo | minus grpo | SE | t | df | p | p (Holm)")
    assert table[2].startswith("| far | -0.187 | 0.044 | -4.27 | 3.9 | 0.013 | 0.027 |")
    assert table[2].endswith("| yes |")
    with pytest.raises(ValueError, match="baseline must be one of"):
        welch_against_baseline(results, "ppo")
    with pytest.raises(ValueError, match="metric must be a name from"):
        welch_against_baseline(results, "grpo", metric="acc")


def _summary(before, evals, lengths_right, kl, samples, pass_curve=None):
    hist = [{"step": i + 1, "length_correct": lengths_right, "length_wrong": 10.0, "entropy": 0.3, "kl": kl,
             "clip_frac": 0.0, "samples_generated": samples * (i + 1) // 4} for i in range(4)]
    s = {"before": {"accuracy": before}, "after": {"accuracy": evals[-1]}, "evals": [{"accuracy": e} for e in evals],
         "history": hist, "steps": 4, "train_seconds": 12.0, "peak_memory_mb": 900.0}
    if pass_curve:
        s["pass_at_k"] = pass_curve
    return s


def test_run_metrics_reads_the_summary():
    m = run_metrics(_summary(0.4, [0.5, 0.6, 0.7], 20.0, 0.1, 512, {"1": 0.6, "2": 0.75, "4": 0.9}))
    assert m["final"] == pytest.approx(0.65)  # mean of the last two evaluations
    assert m["gain_points"] == pytest.approx(25.0)
    assert m["pass@1"] == 0.6 and m["pass@k"] == 0.9  # the largest k recorded
    assert m["samples"] == 512 and m["steps"] == 4 and m["length_correct"] == 20.0
    assert run_metrics(_summary(0.4, [0.5], 20.0, 0.1, 512))["pass@k"] is None


def test_seed_table_and_its_markdown():
    results = {"grpo": [_summary(0.4, [0.7], 20.0, 0.1, 512), _summary(0.4, [0.8], 22.0, 0.3, 512)],
               "gfpo": [_summary(0.4, [0.5], 14.0, 0.2, 1024)]}
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
