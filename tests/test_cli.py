"""Tests for the command line ``python -m grpo_lab``: ``train`` writes the documented JSON summary
(and can save and resume), ``eval`` prints greedy accuracy and pass@k and writes JSON, and bad
arguments exit non-zero with one line on stderr and no traceback. Most calls run ``main(argv)``
in-process; one real subprocess proves the module entry point works.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_lab.__main__ import main
from grpo_lab.trainer import save_json

REPO = Path(__file__).resolve().parent.parent
TINY_TRAIN = ["train", "--algo", "grpo", "--steps", "1", "--prompts", "2", "--group-size", "2",
              "--max-new-tokens", "12", "--n-eval", "4", "--quiet"]  # fmt: skip


def call(argv) -> int:
    """``main(argv)``'s exit status, whether it returns it or raises SystemExit."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1


def check_summary(summary: dict, steps: int, n_eval: int):
    for key in ("algo", "steps", "seed", "wall_seconds", "before", "after", "peak_memory_mb", "history"):
        assert key in summary, key
    assert summary["algo"] == "grpo"
    assert summary["steps"] == steps
    assert summary["seed"] == 0
    assert summary["wall_seconds"] >= 0
    assert summary["peak_memory_mb"] > 0
    assert len(summary["history"]) == steps
    for side in ("before", "after"):
        acc, length = summary[side]["accuracy"], summary[side]["mean_length"]
        assert 0.0 <= acc <= 1.0
        assert math.isclose(acc * n_eval, round(acc * n_eval))  # a fraction of n_eval prompts
        assert length >= 1.0
        assert summary[side]["n"] == n_eval


def test_train_writes_the_json_summary_prints_one_line_and_can_save(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert call(TINY_TRAIN + ["--json", str(out), "--save", str(tmp_path / "ckpt")]) == 0
    summary = json.loads(out.read_text())
    check_summary(summary, steps=1, n_eval=4)
    assert summary["history"][0]["step"] == 1
    assert (tmp_path / "ckpt" / "trainer_state.pt").exists()
    printed = capsys.readouterr().out
    assert re.search(r"grpo: greedy accuracy \d\.\d{3} -> \d\.\d{3} on 4 held-out prompts", printed), printed

    resumed = tmp_path / "resumed.json"
    assert call(["train", "--resume", str(tmp_path / "ckpt"), "--steps", "1", "--quiet", "--json", str(resumed)]) == 0
    after = json.loads(resumed.read_text())
    assert after["steps"] == 2
    assert [m["step"] for m in after["history"]] == [1, 2]
    assert after["history"][0] == summary["history"][0]


def test_eval_prints_greedy_accuracy_and_pass_at_k_and_writes_json(tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert call(["eval", "--n", "4", "--samples", "2", "--max-new-tokens", "12", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"greedy accuracy \d\.\d{3}, pass@2 \d\.\d{3} \(T=1\) on 4 held-out prompts", printed), printed
    result = json.loads(out.read_text())
    assert result["n"] == 4
    for key in ("greedy_accuracy", "pass@2", "sampled_accuracy_t1"):
        assert 0.0 <= result[key] <= 1.0, key
    # pass@k with k = n samples is the share of prompts with at least one right answer:
    # never below the mean per-sample accuracy.
    assert result["pass@2"] >= result["sampled_accuracy_t1"] - 1e-9
    assert math.isclose(result["greedy_accuracy"] * 4, round(result["greedy_accuracy"] * 4))


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--algo", "nope"],
        ["train", "--steps", "0"],
        ["train", "--steps", "x"],
        ["train", "--temperature", "-1"],
        ["train", "--lr", "inf"],
        ["train", "--set", "no_equals_sign"],
        ["train", "--set", "nonsense_field=1"],
        ["train", "--set", "clip_low=-1"],
        ["train", "--set", "minibatches=abc"],
        ["eval", "--n", "0"],
        ["frobnicate"],
    ],
    ids=lambda a: " ".join(a),
)
def test_bad_arguments_exit_non_zero_with_one_line_and_no_traceback(argv, capsys):
    code = call(argv)
    err = capsys.readouterr().err
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("python -m grpo_lab")
    assert "error" in lines[0]


def test_save_json_writes_strict_json_with_nan_and_infinity_as_null(tmp_path):
    path = tmp_path / "sub" / "x.json"
    save_json({"a": float("nan"), "b": [1.5, float("inf")], "c": {"d": 2}}, path)
    assert json.loads(path.read_text()) == {"a": None, "b": [1.5, None], "c": {"d": 2}}


def test_module_entry_point_trains_and_writes_json_in_a_subprocess(tmp_path):
    out = tmp_path / "sub.json"
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_lab", "train", "--algo", "grpo", "--steps", "1", "--prompts", "2",
         "--group-size", "2", "--n-eval", "8", "--json", str(out), "--quiet"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "grpo: greedy accuracy" in proc.stdout
    check_summary(json.loads(out.read_text()), steps=1, n_eval=8)
