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


@pytest.mark.parametrize("name", ["fast", "cpu", "gpu"])
def test_the_lab_profiles_train_sum3_as_the_lab_does(monkeypatch, name):
    monkeypatch.setenv("GRPO_LAB_PROFILE", name)
    for var in course.OVERRIDES:
        monkeypatch.delenv(var, raising=False)
    P = course.profile()
    assert (P["task"], P["data_dir"]) == ("sum3", None)
    # what the notebooks pass changes nothing against a TrainConfig that is not given it
    assert TrainConfig(max_new_tokens=P["max_new_tokens"]) == TrainConfig()


def test_the_hf_profile_is_a_chat_model_on_gsm8k_and_two_variables_point_it_at_local_files(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_LAB_PROFILE", "hf")
    for var in course.OVERRIDES:
        monkeypatch.delenv(var, raising=False)
    P = course.profile()
    assert (P["model"], P["task"], P["data_dir"]) == ("Qwen/Qwen2.5-0.5B-Instruct", "gsm8k", None)
    assert P["max_new_tokens"] > TrainConfig().max_new_tokens  # room for a worked solution
    monkeypatch.setenv("GRPO_LAB_MODEL", "~/my-model")
    monkeypatch.setenv("GRPO_LAB_DATA_DIR", str(tmp_path))
    P = course.profile()
    assert (P["model"], P["data_dir"]) == ("~/my-model", str(tmp_path))
    assert course.PROFILES["hf"]["data_dir"] is None  # profile() returns a copy
    monkeypatch.setenv("GRPO_LAB_PROFILE", "cpu")
    monkeypatch.delenv("GRPO_LAB_DATA_DIR")
    assert course.profile()["model"] == "~/my-model"  # the model variable works on any profile


@pytest.mark.parametrize(
    "profile_name, data_dir, needle",
    [
        ("hf", "nowhere", "GRPO_LAB_DATA_DIR must be a folder with GSM8K's train.jsonl and test.jsonl, got"),
        ("hf", "a-file", "(not a folder)"),
        ("cpu", ".", "GRPO_LAB_DATA_DIR is read only by a profile whose task is gsm8k (hf), got it with profile 'cpu'"),
    ],
)
def test_a_bad_data_dir_variable_is_one_line_naming_it(monkeypatch, tmp_path, profile_name, data_dir, needle):
    (tmp_path / "a-file").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRPO_LAB_PROFILE", profile_name)
    monkeypatch.setenv("GRPO_LAB_DATA_DIR", data_dir)
    with pytest.raises(ValueError) as e:
        course.profile()
    assert needle in str(e.value) and "\n" not in str(e.value)


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
    if "runs" in s:  # tools/gspo_long_ratios.py (notebook 06's ratios against length): per completion, per seed
        per_completion = ("length", "log_s", "top_token_share", "advantage", "gspo_clipped", "token_clip_share")
        assert {"model", "lr", "steps_taken", "clip_low", "clip_high", "token_eps"} <= set(s) and s["runs"]
        for run in s["runs"]:
            assert {"seed", *per_completion} <= set(run)
            assert len({len(run[k]) for k in per_completion}) == 1 and min(run["length"]) >= 1
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
