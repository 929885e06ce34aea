"""Tests for ``python -m grpo_lab bench``: one tiny run (2 prompts x G=2, 8 new tokens, 1 warm-up +
2 timed steps) writes the documented JSON with sane values, and bad arguments exit 2 with one line.

No timing is asserted (the machine may be busy); what is checked is bookkeeping: counts, sums,
shares and that both libraries did the same work (same prompts, tokens counted = tokens generated).
"""

from __future__ import annotations

import json
import math

import pytest

from grpo_lab.__main__ import main
from grpo_lab.trainer import TrainConfig, Trainer

PROMPTS, G, T, STEPS, WARMUP = 2, 2, 8, 2, 1
TINY = ["bench", "--prompts", str(PROMPTS), "--group-size", str(G), "--max-new-tokens", str(T), "--steps", str(STEPS),
        "--warmup", str(WARMUP), "--rollout-repeats", "1"]  # fmt: skip


def call(argv) -> int:
    try:
        return main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    assert call(TINY + ["--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_the_json_has_every_part(result):
    for key in ("config", "versions", "machine", "fairness", "lab", "trl", "rollout", "speedup", "same_prompts"):
        assert key in result, key
    assert result["versions"]["trl"]
    assert result["config"]["prompts"] == PROMPTS and result["config"]["group_size"] == G


@pytest.mark.parametrize("side", ["lab", "trl"])
def test_each_trainer_side_times_every_step_and_its_parts_add_up(result, side):
    r = result[side]
    steps = r["step_seconds"]
    assert len(steps) == STEPS and len(r["warmup_step_seconds"]) == WARMUP
    assert all(s > 0 for s in steps)
    assert min(steps) <= r["median_step_seconds"] <= max(steps)
    parts = r["breakdown_seconds"]
    assert set(parts) == {"generation", "reward", "forward_backward", "optimizer", "other"}
    assert parts["generation"] > 0 and parts["forward_backward"] > 0 and parts["optimizer"] > 0
    assert all(parts[k] >= 0 for k in ("generation", "reward", "forward_backward", "optimizer"))
    assert sum(parts.values()) == pytest.approx(r["mean_step_seconds"], rel=1e-6)
    assert sum(r["breakdown_fraction"].values()) == pytest.approx(1.0, rel=1e-6)
    assert r["completions"] == STEPS * PROMPTS * G
    assert r["completions"] <= r["tokens"] <= r["completions"] * T  # at least one token (EOS or not) per completion
    assert r["mean_completion_length"] == pytest.approx(r["tokens"] / r["completions"])
    assert 0.0 <= r["reward_mean"] <= 1.0
    m = r["memory"]
    assert m["peak_mb"] >= m["before_mb"] > 0 and m["peak_added_mb"] >= 0
    assert r["threads"] >= 1


def test_the_speedup_is_the_ratio_of_median_step_times(result):
    assert result["speedup"] > 0
    assert result["speedup"] == pytest.approx(result["trl"]["median_step_seconds"] / result["lab"]["median_step_seconds"])


def test_both_libraries_saw_the_prompts_the_lab_trainer_draws_in_the_same_order(result):
    # What a fresh Trainer with the same seed draws, step by step (its own prompt stream).
    trainer = Trainer(TrainConfig(algo="grpo", seed=0, prompts_per_step=PROMPTS, group_size=G, max_new_tokens=T))
    want = [list(trainer._next_prompts(PROMPTS)["prompt"]) for _ in range(WARMUP + STEPS)]
    assert result["lab"]["prompts"] == want
    assert result["trl"]["prompts"] == want
    assert result["same_prompts"] is True


def test_lab_tokens_counted_equal_the_tokens_its_trainer_generated(result):
    # The bench counts tokens from the rollouts; the trainer's own metrics give mean length x completions.
    timed = result["lab"]["learning"][WARMUP:]
    from_metrics = sum(h["length_mean"] * PROMPTS * G for h in timed)
    assert result["lab"]["tokens"] == round(from_metrics)


def test_rollout_counts_tokens_and_both_generators_agree_greedily(result):
    ro = result["rollout"]
    assert ro["greedy_outputs_match"] is True
    for name in ("lab_sample_group", "hf_generate"):
        r = ro[name]
        assert r["calls"] == 1 and r["completions_per_call"] == PROMPTS * G
        assert r["completions_per_call"] <= r["tokens"] <= r["calls"] * r["completions_per_call"] * T
        assert r["tokens_per_second"] * r["seconds"] == pytest.approx(r["tokens"])
    ratio = ro["lab_sample_group"]["tokens_per_second"] / ro["hf_generate"]["tokens_per_second"]
    assert ro["speedup_tokens_per_second"] == pytest.approx(ratio)
    assert math.isfinite(ratio) and ratio > 0


def test_in_process_rollout_only(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert call(["bench", "--only", "rollout", "--in-process", "--prompts", "1", "--group-size", "2", "--max-new-tokens", "4",
                 "--rollout-repeats", "1", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert "rollout" in r and "lab" not in r and "speedup" not in r
    assert "tokens/s" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--steps", "0"], "--steps"),
        (["--group-size", "1"], "group_size"),
        (["--temperature", "-1"], "--temperature"),
        (["--only", "nothing"], "--only"),
        (["--device", "tpu"], "--device"),
        (["--prompts", "two"], "--prompts"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(capsys, argv, needle):
    assert call(["bench"] + argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert needle in err and "error" in err
