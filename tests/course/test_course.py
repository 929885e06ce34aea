"""The notebooks' helpers: the hardware profile, the committed histories, and that the command
line still writes histories in the format the notebooks read (a short regeneration)."""

from __future__ import annotations

import pytest

from grpo_lab.course import profile as course
from grpo_lab.study import histories
from grpo_lab.train.run import run
from grpo_lab.train.trainer import TrainConfig

# What the notebooks read from a history file (see notebooks 01 and 03).
SUMMARY_KEYS = {
    "algo",
    "steps",
    "seed",
    "wall_seconds",
    "train_seconds",
    "before",
    "after",
    "evals",
    "peak_memory_mb",
    "history",
}
STEP_KEYS = {
    "step",
    "loss",
    "accuracy",
    "wall_seconds",
    "step_seconds",
    "length_mean",
    "length_correct",
    "length_wrong",
    "entropy",
    "kl",
    "clip_frac",
    "reward_std_within_group",
    "zero_std_frac",
}


def test_profile_follows_the_environment_variable(monkeypatch):
    monkeypatch.setenv("GRPO_LAB_PROFILE", "fast")
    assert course.profile()["name"] == "fast"
    assert course.profile()["steps"] == course.PROFILES["fast"]["steps"]


def test_profile_defaults_to_cpu_without_cuda(monkeypatch):
    monkeypatch.delenv("GRPO_LAB_PROFILE", raising=False)
    monkeypatch.setattr(course.torch.cuda, "is_available", lambda: False)
    assert course.profile_name() == "cpu"
    monkeypatch.setattr(course.torch.cuda, "is_available", lambda: True)
    assert course.profile_name() == "gpu"


def test_unknown_profile_is_a_value_error(monkeypatch):
    monkeypatch.setenv("GRPO_LAB_PROFILE", "huge")
    with pytest.raises(ValueError, match="GRPO_LAB_PROFILE must be one of"):
        course.profile()


def test_unknown_history_lists_the_committed_ones():
    with pytest.raises(ValueError, match="committed histories"):
        histories.load_history("no-such-run")


@pytest.mark.parametrize("path", sorted(histories.HISTORIES.glob("*.json")), ids=lambda p: p.stem)
def test_committed_histories_have_what_the_notebooks_read(path):
    s = histories.load_history(path.stem)
    if "history" not in s and "pass_at_k" in s:  # an `eval` summary (notebook 08's pass@k of the shipped model)
        assert {"model", "n", "greedy_accuracy", "pass_at_k"} <= set(s)
        assert 0.0 <= s["greedy_accuracy"] <= 1.0 and s["pass_at_k"]
        return
    if "arms" in s:  # a `paired` run (notebook 05's clip-higher measurement)
        assert {"config", "follow", "low_p", "history", "summary"} <= set(s) and s["follow"] in s["arms"]
        assert s["history"] and set(s["history"][0]["arms"]) == set(s["arms"])
        return
    assert SUMMARY_KEYS <= set(s)
    assert s["history"] and STEP_KEYS <= set(s["history"][0])
    assert {"accuracy", "mean_length"} <= set(s["before"]) and s["evals"]


def test_a_short_regeneration_has_the_same_format():
    s = run(
        TrainConfig(algo="grpo", steps=2, prompts_per_step=2, group_size=2, max_new_tokens=16),
        n_eval=8,
        progress=False,
        eval_every=1,
    )
    assert SUMMARY_KEYS <= set(s)
    assert STEP_KEYS <= set(s["history"][0])
    assert [e["step"] for e in s["evals"]] == [1, 2]
