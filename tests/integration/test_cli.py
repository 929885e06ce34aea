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
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from grpo_lab.cli.main import main
from grpo_lab.io import save_json

REPO = Path(__file__).resolve().parents[2]
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
    argv = ["train", "--resume", str(tmp_path / "ckpt"), "--steps", "1", "--n-eval", "4", "--quiet", "--json"]
    assert call(argv + [str(resumed)]) == 0
    after = json.loads(resumed.read_text())
    assert set(after) == set(summary)  # the same summary as a run: before/after evaluations, config, memory
    check_summary(after, steps=2, n_eval=4)
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


# --------------------------------------------------------------------------------------------
# No traceback at a learner: every bad input below is one line, exit 2, before any training
# --------------------------------------------------------------------------------------------


def one_error_line(capsys, *needles) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("python -m grpo_lab") and ": error: " in lines[0], lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture
def no_training(monkeypatch):
    """Fails the test if a run starts: the checks under test must come before the first step."""
    import grpo_lab.train.trainer as trainer_mod

    def refuse(*args, **kwargs):
        raise AssertionError("training started before the bad input was refused")

    monkeypatch.setattr(trainer_mod.Trainer, "__init__", refuse)
    monkeypatch.setattr(trainer_mod.Trainer, "resume", classmethod(lambda cls, *a, **k: refuse()))


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["train", "--lr", "-1e-4"], ["--lr", "must be a positive number", "-1e-4"]),
        (["train", "--lr", "-3"], ["--lr", "must be a positive number"]),
        (["train", "--temperature", "-.5"], ["--temperature", "must be a positive number"]),
        (["train", "--seed", str(2**63)], ["--seed", "[0, 4294967295]"]),
        (["train", "--seed", str(2**64 + 1)], ["--seed", "[0, 4294967295]"]),
        (["train", "--seed", "-1"], ["--seed"]),
        (["train", "--set", "critic_lr=-1e-4", "--algo", "ppo"], ["critic_lr must be > 0"]),
        (["train", "--set", "critic_lr=0.001"], ["--set critic_lr=0.001 has no effect with --algo grpo", "critic"]),
        (["train", "--set", "max_gen_batches=8"], ["--set max_gen_batches=8", "dynamic sampling"]),
        (["train", "--set", 'gfpo_metric="length"', "--algo", "dapo"], ["gfpo_metric", "GFPO"]),
        (["train", "--save-every", "2"], ["--save-every needs --save"]),
        (["train", "--device", "bogus"], ["device must be 'cpu', 'cuda', 'cuda:N' or 'mps'", "bogus"]),
        (["eval", "--seed", str(2**63)], ["--seed"]),
        (["compare", "--algos", "grpo", "ppo", "--set", "critic_lr=0.0001"], ["critic_lr", "no effect on grpo"]),
        (["compare", "--algos", "ppo", "--set", "critic_lr=-1"], ["critic_lr must be > 0"]),
        (["paired", "--vary", "critic_lr=0.001,0.0001"], ["--vary critic_lr=0.001 has no effect"]),
        (["train", "--algo", "ppo", "--set", "vf_coef=-1"], ["vf_coef must be >= 0, got -1"]),
        (["train", "--algo", "ppo", "--set", "critic_warmup_steps=-5"], ["critic_warmup_steps", "[0, "]),
        (["train", "--algo", "dapo", "--set", "max_gen_batches=0"], ["max_gen_batches", "[1, "]),
        (["train", "--set", "dual_clip=1"], ["dual_clip must be > 1"]),
        (["train", "--set", "minibatches=99999999999999999999"], ["minibatches", "[1, 2147483647]"]),
        (["train", "--set", "name=dapo"], ["name is the preset's name, not a setting"]),
        (["train", "--n-eval", "100000"], ["--n-eval 100000 is more than the 1024 held-out prompts"]),
        (["pretrain", "--target-accuracy", "5"], ["--target-accuracy", "in (0, 1], got 5"]),
        (["pretrain", "--target-accuracy", "0"], ["--target-accuracy", "in (0, 1], got 0"]),
    ],
    ids=lambda a: " ".join(a) if isinstance(a, list) and a and a[0] in ("train", "eval", "compare", "paired") else "",
)
def test_bad_input_is_one_line_with_exit_2_before_any_training(argv, needles, capsys, no_training):
    assert call(argv) == 2
    one_error_line(capsys, *needles)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_cuda_is_one_line(capsys, tmp_path):
    assert call(TINY_TRAIN + ["--device", "cuda"]) == 2
    one_error_line(capsys, "needs CUDA", "--device cpu")


def test_output_paths_are_checked_before_the_first_step(tmp_path, capsys, no_training):
    (tmp_path / "afile").write_text("")
    (tmp_path / "adir").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep")
    cases = [
        (["--json", str(tmp_path / "afile" / "run.json")], ["--json", "afile is a file, not a folder"]),
        (["--json", str(tmp_path / "adir")], ["--json", "is a folder; give a file name"]),
        (["--save", str(tmp_path / "afile")], ["--save", "is a file"]),
        (["--save", str(tmp_path / "afile" / "ckpt")], ["--save", "is a file, not a folder"]),
        (["--save", str(tmp_path / "notes")], ["--save", "other files in it"]),
    ]
    if Path("/proc").is_dir():
        cases.append((["--json", "/proc/grpo_lab_run.json"], ["--json", "cannot be written"]))
    for extra, needles in cases:
        assert call(TINY_TRAIN + extra) == 2, extra
        one_error_line(capsys, *needles)
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep"
    for argv in (["eval", "--json", str(tmp_path / "afile" / "e.json")],
                 ["paired", "--vary", "clip_high=0.2,0.28", "--json", str(tmp_path / "adir")],
                 ["bench", "--json", str(tmp_path / "afile" / "b.json")],
                 ["compare", "--out", str(tmp_path / "afile")],
                 ["pretrain", "--out", str(tmp_path / "afile")]):  # fmt: skip
        assert call(argv) == 2, argv
        one_error_line(capsys)


@pytest.mark.parametrize("flag", [["--model", "x"], ["--task", "sum3"], ["--seconds", "5"],
                                  ["--algo", "ppo"], ["--lr", "1e-3"], ["--seed", "1"], ["--prompts", "4"],
                                  ["--kl-stop", "0.1"], ["--lr", "1e-4"], ["--set", "beta=0.1"]])  # fmt: skip
def test_resume_refuses_each_flag_it_would_ignore_by_name(flag, capsys, no_training, tmp_path):
    assert call(["train", "--resume", str(tmp_path), "--steps", "1", *flag]) == 2
    line = one_error_line(capsys, "cannot be used with --resume")
    assert line.split(": error: ")[1].startswith(flag[0]), line


def test_resume_of_a_missing_or_damaged_checkpoint_is_one_line(tmp_path, capsys):
    argv = ["train", "--resume", str(tmp_path / "nothing"), "--steps", "1", "--quiet", "--json", str(tmp_path / "j")]
    assert call(argv) == 2
    one_error_line(capsys, "no trainer_state.pt")


def test_a_bad_model_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for model, needle in ((tmp_path / "missing", "does not exist"), (tmp_path / "empty", "has no config.json")):
        assert call(TINY_TRAIN + ["--model", str(model)]) == 2
        one_error_line(capsys, needle, str(model))
        assert call(["eval", "--model", str(model)]) == 2
        one_error_line(capsys, needle)


def test_task_gsm8k_offline_is_one_line(monkeypatch, capsys, tiny_qwen_dir):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    assert call(["eval", "--model", str(tiny_qwen_dir), "--task", "gsm8k", "--n", "2"]) == 2
    one_error_line(capsys, "task 'gsm8k' needs the Hugging Face hub", "'words'")


def test_an_absurd_learning_rate_is_warned_about_before_the_run(capsys, monkeypatch, tmp_path):
    import grpo_lab.train.run as run_mod

    started = []

    def fake_run(cfg, **kwargs):  # what matters here is what is printed before the run starts
        started.append(capsys.readouterr().err)
        raise ValueError("stop here")

    monkeypatch.setattr(run_mod, "train_and_evaluate", fake_run)
    for lr, word in (("1e30", "above"), ("1e-12", "below")):
        assert call(TINY_TRAIN + ["--lr", lr]) == 2
        warning = started[-1].strip().splitlines()
        assert len(warning) == 1 and warning[0].startswith("python -m grpo_lab train: warning: --lr")
        assert word in warning[0] and "usual range" in warning[0]
        capsys.readouterr()
    assert call(TINY_TRAIN + ["--lr", "1e-3"]) == 2
    assert started[-1] == ""  # an ordinary learning rate: no warning


def test_a_run_whose_updates_are_all_skipped_says_why_in_its_summary_line_only(capsys, nan_policy_loss):
    import grpo_lab.train.trainer as trainer_mod

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert call(TINY_TRAIN) == 0
    out, err = capsys.readouterr()
    assert "stopped: every update of step 1 was skipped" in out
    assert "was skipped" not in err  # said once, in the summary line
    assert [w for w in said if issubclass(w.category, trainer_mod.StoppedEarly)] == []


def test_ctrl_c_during_training_saves_writes_the_summary_and_exits_130(tmp_path, capsys, monkeypatch):
    import grpo_lab.train.trainer as trainer_mod

    real_step = trainer_mod.Trainer.train_step

    def step_then_ctrl_c(self, *args, **kwargs):
        m = real_step(self, *args, **kwargs)
        if self.step == 1:  # during the 2nd step, as Ctrl-C would arrive
            os.kill(os.getpid(), signal.SIGINT)
        return m

    monkeypatch.setattr(trainer_mod.Trainer, "train_step", step_then_ctrl_c)
    out, ckpt = tmp_path / "run.json", tmp_path / "ckpt"
    argv = ["train", "--steps", "5", "--prompts", "2", "--group-size", "2", "--max-new-tokens", "8", "--n-eval", "2",
            "--quiet", "--json", str(out), "--save", str(ckpt)]  # fmt: skip
    assert call(argv) == 130
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0] == (
        f"python -m grpo_lab train: interrupted: grpo stopped after step 2; "
        f"checkpoint saved to {ckpt}, summary written to {out}"
    )
    summary = json.loads(out.read_text())
    assert summary["stop_reason"] == "interrupted" and summary["steps"] == 2 and summary["after"] is None
    assert len(summary["history"]) == 2
    from grpo_lab.train.trainer import Trainer

    assert Trainer.resume(ckpt).step == 2


def test_quiet_silences_the_shard_writing_progress_bar(tmp_path, capsys):
    assert call(TINY_TRAIN + ["--save", str(tmp_path / "ckpt")]) == 0
    err = capsys.readouterr().err
    assert "Writing model shards" not in err and "%|" not in err, err


def test_compare_forwards_a_runs_one_line_error_not_its_traceback(tmp_path):
    from grpo_lab.study.compare import ChildRunFailed, _run

    with pytest.raises(ChildRunFailed) as info:
        _run(
            [sys.executable, "-m", "grpo_lab", "train", "--model", str(tmp_path / "missing"), "--steps", "1", "--quiet"]
        )
    msg = str(info.value)
    assert "\n" not in msg and "Traceback" not in msg
    assert "does not exist" in msg and "exit status 2" in msg
    assert info.value.returncode == 2


def test_compare_prints_a_failed_runs_line_and_exits_with_its_status(tmp_path, capsys, monkeypatch):
    from grpo_lab.study import compare as experiments

    def failing(cmd):
        raise experiments.ChildRunFailed(
            "the run `train --algo grpo --seed 0 ...` failed (exit status 2): "
            "python -m grpo_lab train: error: model 'x' does not exist",
            2,
        )

    monkeypatch.setattr(experiments, "_run", failing)
    assert call(["compare", "--algos", "grpo", "--seeds", "0", "--out", str(tmp_path / "out")]) == 2
    one_error_line(capsys, "failed (exit status 2)", "does not exist")


def test_a_stopped_compare_says_interrupted_and_what_it_kept_in_one_line(tmp_path, capsys, monkeypatch):
    from grpo_lab.study import compare as experiments
    from grpo_lab.study.histories import HISTORIES

    def second_run_stopped(cmd):
        Path(cmd[cmd.index("--json") + 1]).write_text((HISTORIES / "timed_grpo_seed0.json").read_text())
        if "dapo" in cmd:
            raise experiments.ChildRunFailed("the run `train --algo dapo ...` was stopped: interrupted", 130)

    monkeypatch.setattr(experiments, "_run", second_run_stopped)
    out = tmp_path / "out"
    assert call(["compare", "--algos", "grpo", "dapo", "--seeds", "0", "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "python -m grpo_lab compare: interrupted: stopped during the run of dapo with seed 0; the 1 finished run "
        f"with its table and the stopped run's steps are in {out}"
    ]


def test_ctrl_c_while_the_command_is_still_starting_is_one_line_and_exit_130():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_lab", "train", "--steps", "1", "--n-eval", "2", "--quiet"], cwd=REPO, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal's foreground job has it
    )  # fmt: skip
    import time

    time.sleep(0.5)  # torch is most likely still importing; if not, main() handles it: one line either way
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0] and "Traceback" not in err, err


@pytest.mark.parametrize(
    "extra, seconds, steps",
    [
        ([], "90.0", "100000"),  # no budget named: the same 90 s for every algorithm
        (["--seconds", "30"], "30.0", "100000"),
        (["--steps", "7"], None, "7"),  # a step budget alone: no time limit
        (["--max-samples", "640"], None, "100000"),  # a sample budget alone
        (["--steps", "7", "--seconds", "30"], "30.0", "7"),
    ],
)
def test_compare_gives_every_algorithm_the_same_budget(tmp_path, monkeypatch, extra, seconds, steps):
    from grpo_lab.study import compare as experiments

    commands = []

    def record(cmd):  # stands in for the child `train` process: note its command line, write a committed summary
        commands.append(cmd)
        summary = REPO / "assets" / "histories" / "timed_grpo_seed0.json"
        Path(cmd[cmd.index("--json") + 1]).write_text(summary.read_text())

    monkeypatch.setattr(experiments, "_run", record)
    argv = ["compare", "--algos", "grpo", "dapo", "ppo", "--seeds", "0", "--out", str(tmp_path / "out"), *extra]
    assert call(argv) == 0
    assert [c[c.index("--algo") + 1] for c in commands] == ["grpo", "dapo", "ppo"]
    for cmd in commands:
        assert (cmd[cmd.index("--seconds") + 1] if "--seconds" in cmd else None) == seconds
        assert cmd[cmd.index("--steps") + 1] == steps


# --------------------------------------------------------------------------------------------
# The task a model gets, and models that cannot be trained
# --------------------------------------------------------------------------------------------


def test_the_readmes_eval_of_the_shipped_folder_and_of_a_saved_policy_uses_sum3(tmp_path, capsys):
    """``--model assets/tiny-sum3`` and ``--model run/policy`` are the lab's model: sum3, not words."""
    assert call(["eval", "--model", str(REPO / "assets" / "tiny-sum3"), "--samples", "2", "--n", "4",
                 "--max-new-tokens", "12"]) == 0  # fmt: skip
    assert "on 4 held-out prompts" in capsys.readouterr().out
    assert call(TINY_TRAIN + ["--save", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    out = tmp_path / "next.json"
    assert call(TINY_TRAIN + ["--model", str(tmp_path / "run" / "policy"), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["config"]["task"] == "sum3"


def test_a_chat_task_on_a_model_without_a_chat_template_names_task(tmp_path, capsys):
    from grpo_lab.lab.models import build_char_tokenizer

    folder = tmp_path / "plain"  # a tokenizer that is not the lab's and has no chat template
    build_char_tokenizer("abcdefghij0123456789").save_pretrained(folder)
    (folder / "config.json").write_text("{}")
    for argv in (["eval", "--model", str(folder), "--n", "2"], TINY_TRAIN + ["--model", str(folder)]):
        assert call(argv) == 2
        line = one_error_line(capsys, "--task words", "--task sum3", "chat template")
        assert "chat=True" not in line
    assert call(["eval", "--task", "words", "--n", "2"]) == 2
    one_error_line(capsys, "--task words wraps its prompts", "'tiny-sum3' has none")


def test_a_model_that_is_not_causal_is_one_line(tmp_path, capsys):
    from transformers import BertConfig, BertForMaskedLM

    from grpo_lab.lab.models import build_char_tokenizer
    from grpo_lab.lab.tasks import SUM3_CHARS

    folder = tmp_path / "berttiny"
    config = BertConfig(vocab_size=3 + len(SUM3_CHARS), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, pad_token_id=0)  # fmt: skip
    BertForMaskedLM(config).save_pretrained(folder)
    build_char_tokenizer(SUM3_CHARS).save_pretrained(folder)
    capsys.readouterr()
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the library's own notes go to a stream an earlier test may have closed
    try:
        assert call(["eval", "--model", str(folder), "--task", "sum3", "--n", "4", "--samples", "2"]) == 2
    finally:
        hf_logging.set_verbosity(verbosity)
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("[transformers]")]  # the library's own note
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("python -m grpo_lab eval: error: ") and "is not a causal language model" in lines[0]
    assert str(folder) in lines[0]


def test_eval_refuses_more_prompts_than_the_task_holds(capsys, monkeypatch, tiny_qwen_dir):
    from grpo_lab.lab import tasks

    real = tasks.synthetic_word_problems
    monkeypatch.setattr(tasks, "synthetic_word_problems", lambda n, seed: real(min(n, 3), seed))
    assert call(["eval", "--model", str(tiny_qwen_dir), "--task", "words", "--n", "5"]) == 2
    one_error_line(capsys, "--n 5 is more than the 3 held-out prompts of task words")


def test_out_of_memory_is_one_line_naming_what_to_lower(capsys, monkeypatch):
    from grpo_lab.lab import metrics

    def oom(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:121] DefaultCPUAllocator: can't allocate memory: you "
                           "tried to allocate 1228800000 bytes. Error code 12 (Cannot allocate memory)")  # fmt: skip

    monkeypatch.setattr(metrics, "evaluate", oom)
    assert call(["eval", "--n", "4", "--samples", "60000"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m grpo_lab eval: error: out of memory"), err
    assert "lower --samples, --n or --max-new-tokens" in err[0]


def test_the_generated_flags_are_the_documented_ones():
    from grpo_lab.cli.main import build_parser

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    flags = {s for a in train._actions for s in a.option_strings}
    for flag in ("--algo", "--model", "--task", "--steps", "--seed", "--prompts", "--group-size", "--max-new-tokens",
                 "--temperature", "--lr", "--kl-stop", "--seconds", "--max-samples", "--device", "--json", "--n-eval",
                 "--eval-every", "--save", "--save-every", "--resume", "--set", "--quiet"):  # fmt: skip
        assert flag in flags, flag
    task = next(a for a in train._actions if "--task" in a.option_strings)
    assert tuple(task.choices) == ("sum3", "words", "gsm8k")


# --------------------------------------------------------------------------------------------
# pretrain: no stray warning, an unreached target said, nothing half-written
# --------------------------------------------------------------------------------------------

TINY_PRETRAIN = ["pretrain", "--hidden", "16", "--layers", "1", "--heads", "1", "--ffn", "16", "--batch-size", "4",
                 "--max-steps", "2", "--eval-from", "1", "--eval-every", "1", "--n-eval", "4", "--quiet"]  # fmt: skip


def test_pretrain_says_when_the_target_was_not_reached_and_warns_nothing(tmp_path, capsys):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # torch's "Converting a tensor with requires_grad=True"
        assert call(TINY_PRETRAIN + ["--out", str(tmp_path / "m"), "--target-accuracy", "1"]) == 0
    captured = capsys.readouterr()
    assert "did NOT reach the target 1 in 2 steps" in captured.out, captured.out
    assert "Warning" not in captured.err, captured.err
    assert json.loads((tmp_path / "m" / "pretrain_summary.json").read_text())["reached_target"] is False


def test_pretrain_with_long_filler_records_the_longest_answer_and_runs_refuse_less_room(tmp_path, capsys):
    out = tmp_path / "long"
    args = ["--out", str(out), "--target-accuracy", "1", "--filler", "64", "--max-new-tokens", "96"]
    assert call(TINY_PRETRAIN + args) == 0
    summary = json.loads((out / "pretrain_summary.json").read_text())
    assert (summary["filler"], summary["longest_answer"], summary["max_new_tokens"]) == (64, 85, 96)
    assert json.loads((out / "config.json").read_text())["lab_longest_answer"] == 85
    capsys.readouterr()
    base = ["train", "--model", str(out), "--steps", "1", "--prompts", "2", "--group-size", "2", "--n-eval", "2"]
    assert call(base + ["--max-new-tokens", "32"]) == 2
    one_error_line(capsys, "--max-new-tokens) 32", "at least 85")
    assert call(["eval", "--model", str(out), "--n", "2", "--samples", "1", "--max-new-tokens", "84"]) == 2
    one_error_line(capsys, "--max-new-tokens) 84", "at least 85")
    assert call(base + ["--max-new-tokens", "85"]) == 0


def test_a_model_built_with_the_usual_filler_takes_any_max_new_tokens(tmp_path, capsys):
    out = tmp_path / "short"
    assert call(TINY_PRETRAIN + ["--out", str(out), "--target-accuracy", "1"]) == 0
    assert json.loads((out / "config.json").read_text()).get("lab_longest_answer") is None
    base = ["train", "--model", str(out), "--steps", "1", "--prompts", "2", "--group-size", "2", "--n-eval", "2"]
    assert call(base + ["--max-new-tokens", "8"]) == 0  # a quick smoke run cuts every answer, and may


def test_pretrain_refuses_too_few_new_tokens_for_its_filler_and_an_init_that_is_not_a_lab_model(tmp_path, capsys):
    assert call(TINY_PRETRAIN + ["--out", str(tmp_path / "a"), "--filler", "64", "--max-new-tokens", "84"]) == 2
    one_error_line(capsys, "--max-new-tokens", ">= 85", "got 84")
    from transformers import LlamaForCausalLM

    from grpo_lab.lab.models import build_char_tokenizer, tiny_llama_config

    folder = tmp_path / "other"  # a Llama with a character tokenizer that is not the lab's
    build_char_tokenizer("abcdefghij0123456789").save_pretrained(folder)
    init_run = [
        "pretrain",
        "--batch-size",
        "4",
        "--max-steps",
        "2",
        "--eval-from",
        "1",
        "--eval-every",
        "1",
        "--n-eval",
        "4",
        "--quiet",
    ]  # no shape flags: --init brings the shape
    assert call(init_run + ["--out", str(tmp_path / "b"), "--init", str(folder)]) == 2
    one_error_line(capsys, "--init", "config.json")
    LlamaForCausalLM(tiny_llama_config(23, hidden=16, layers=1, heads=1, ffn=16)).save_pretrained(folder)
    assert call(init_run + ["--out", str(tmp_path / "b"), "--init", str(folder)]) == 2
    one_error_line(capsys, "--init", "not a lab model")
    assert not (tmp_path / "b" / "config.json").exists()
    assert call(TINY_PRETRAIN + ["--out", str(tmp_path / "c"), "--init", "tiny-sum3"]) == 2  # it gives --hidden
    one_error_line(capsys, "--hidden sets the shape of a new model", "--init")


def test_pretrain_that_cannot_write_leaves_the_old_model_and_says_one_line(tmp_path, capsys, monkeypatch):
    from transformers import LlamaForCausalLM

    out = tmp_path / "m"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"the old model")

    def disk_full(self, folder, **kwargs):
        Path(folder, "model.safetensors").write_bytes(b"half")
        raise RuntimeError("Error while serializing: IoError(No space left on device)")  # as safetensors says it

    monkeypatch.setattr(LlamaForCausalLM, "save_pretrained", disk_full)
    assert call(TINY_PRETRAIN + ["--out", str(out)]) == 1
    one_error_line(capsys, f"could not write the model to {out}", "No space left", "the folder is as it was")
    assert (out / "model.safetensors").read_bytes() == b"the old model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temporary folder left behind


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_pretrain_stopped_by_a_signal_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch, signum, code):
    from grpo_lab.lab import pretrain

    real = pretrain.evaluate

    def evaluate_then_signal(*args, **kwargs):
        result = real(*args, **kwargs)
        os.kill(os.getpid(), signum)  # as `kill` or a closed terminal would, while pretraining
        return result

    monkeypatch.setattr(pretrain, "evaluate", evaluate_then_signal)
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)
    assert call(TINY_PRETRAIN + ["--out", str(tmp_path / "m")]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"python -m grpo_lab pretrain: interrupted: stopped by {signal.Signals(signum).name}; "
        "nothing was written (the --out folder is as it was)"
    ]
    assert list(tmp_path.iterdir()) == []  # not even the --out folder it would have made
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)) == handlers


def test_pretrain_signalled_while_saving_leaves_no_half_model(tmp_path, capsys, monkeypatch):
    from transformers import PreTrainedTokenizerFast

    real = PreTrainedTokenizerFast.save_pretrained

    def save_then_sigterm(self, folder, *args, **kwargs):
        files = real(self, folder, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # the weights are written, the summary not yet
        return files

    monkeypatch.setattr(PreTrainedTokenizerFast, "save_pretrained", save_then_sigterm)
    out = tmp_path / "m"
    assert call(TINY_PRETRAIN + ["--out", str(out)]) == 143
    capsys.readouterr()
    assert list(out.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["m"]
