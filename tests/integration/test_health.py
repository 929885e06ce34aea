"""grpo_lab.scale.health: the within-group reward std and the zero-std share, by hand, and in the log of the
exported TRL script run on the shipped tiny model, next to TRL's own ``frac_reward_zero_std``; the KL to the starting
weights at beta = 0: its k3 estimator by hand, its value next to TRL's own ``kl`` on the same rollouts, and a loss
and trajectory identical to TRL's plain ``GRPOTrainer``."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpo_lab.scale.export import export_recipe
from grpo_lab.scale.health import KL_TO_START, group_health, k3_sum_and_count, measuring_kl_to_start, with_group_health

TINY = str(Path(__file__).resolve().parents[2] / "assets" / "tiny-sum3")


def test_group_health_by_hand():
    # two groups of 4: all right (std 0), and 0,1,0,1 (mean 0.5, (N-1) variance 4 x 0.25 / 3 = 1/3)
    prompts = ["a"] * 4 + ["b"] * 4
    got = group_health(prompts, [1, 1, 1, 1, 0, 1, 0, 1])
    assert got["health/reward_std_within_group"] == pytest.approx((0 + math.sqrt(1 / 3)) / 2)
    assert got["health/zero_std_frac"] == 0.5
    assert group_health(["a", "b"], [1, 0]) == {}  # no group of two or more


def test_the_wrapper_keeps_the_rewards_and_the_name_and_logs_through_log_metric():
    def task_reward(prompts, completions, **kwargs):
        return [1.0 if c == "right" else 0.0 for c in completions]

    logged = {}
    wrapped = with_group_health(task_reward)
    got = wrapped(["p", "p"], ["right", "wrong"], log_metric=lambda k, v: logged.setdefault(k, v))
    assert got == [1.0, 0.0] and wrapped.__name__ == "task_reward"
    assert logged == {"health/reward_std_within_group": pytest.approx(math.sqrt(0.5)), "health/zero_std_frac": 0.0}


def test_the_exported_trl_script_logs_the_health_metrics_next_to_trls(tmp_path):
    export_recipe("grpo", "trl", TINY, "sum3", tmp_path / "recipe")
    out = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "train_grpo.py", "--smoke", "--model", TINY, "--output-dir", str(out)]
    proc = subprocess.run(cmd, cwd=tmp_path / "recipe", env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [h for h in json.loads((out / "resolved_config.json").read_text())["log_history"] if "reward" in h]
    assert len(rows) == 2
    # beta = 0: TRL logs no kl; the first rollout is sampled by the starting weights, the second after one update
    assert all("kl" not in h for h in rows)
    assert rows[0][KL_TO_START] == pytest.approx(0.0, abs=1e-9)
    assert rows[1][KL_TO_START] > 1e-9
    for h in rows:
        # one reward function, equal groups: TRL's per-completion share equals the share of groups
        assert h["health/zero_std_frac"] == pytest.approx(h["frac_reward_zero_std"])
        assert 0.0 <= h["health/reward_std_within_group"] <= math.sqrt(4 / 3 * 0.25) + 1e-9  # 0/1 rewards, G = 4


def test_k3_by_hand():
    # policy p = (1/4, 3/4), start q = (1/2, 1/2) over two tokens. k3 = r - log r - 1 with r = q / p:
    # token 0: r = 2, k3 = 1 - ln 2; token 1: r = 2/3, k3 = ln 1.5 - 1/3
    logp = torch.tensor([[math.log(1 / 4), math.log(3 / 4), 0.0]])
    start = torch.tensor([[math.log(1 / 2), math.log(1 / 2), -50.0]])  # the third token is padding
    total, count = k3_sum_and_count(logp, start, torch.tensor([[1, 1, 0]])).tolist()
    assert count == 2
    assert total == pytest.approx((1 - math.log(2)) + (math.log(1.5) - 1 / 3))
    # its mean under p is KL(p || q) = 1/4 ln(1/2) + 3/4 ln(3/2): the mask as p's weights
    weighted, _ = k3_sum_and_count(logp[:, :2], start[:, :2], torch.tensor([[1 / 4, 3 / 4]])).tolist()
    assert weighted == pytest.approx(0.25 * math.log(0.5) + 0.75 * math.log(1.5))
    # same policy, no divergence
    assert k3_sum_and_count(logp, logp, torch.ones(1, 3)).tolist() == [0.0, 3.0]


def _trainer(trainer_cls, tmp_path, beta, seed=0):
    """A GRPOTrainer on the tiny model: one rollout of 2 prompts x 4 completions per optimiser step, three steps."""
    from datasets import Dataset
    from trl import GRPOConfig

    def longer(prompts, completions, **kwargs):  # a reward that varies within groups
        return [min(len(c), 20) / 20 for c in completions]

    config = GRPOConfig(
        output_dir=str(tmp_path / f"run_{beta}_{trainer_cls.__name__}"),
        beta=beta,
        learning_rate=1e-3,  # the tiny model moves in three steps
        num_generations=4,
        per_device_train_batch_size=8,
        steps_per_generation=1,
        gradient_accumulation_steps=1,
        max_completion_length=12,
        max_steps=3,
        logging_steps=1,
        seed=seed,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        dataloader_num_workers=0,
    )
    data = Dataset.from_list([{"prompt": f"{a}+{b}+{c}="} for a, b, c in [(12, 30, 7), (5, 61, 20)] * 8])
    return trainer_cls(model=TINY, reward_funcs=[longer], args=config, train_dataset=data)


def test_the_kl_to_start_equals_trls_own_kl_on_the_same_rollouts(tmp_path):
    """At beta > 0 TRL logs kl: k3 of the policy being updated to its reference, on the rollout's samples. With one
    optimiser step per rollout, that policy is the one that sampled, so TRL's kl and the measurement (switched on by
    hand next to it) must agree on every rollout."""
    from trl import GRPOTrainer

    trainer = _trainer(measuring_kl_to_start(GRPOTrainer), tmp_path, beta=0.5)
    assert not trainer.measures_kl_to_start  # off at beta > 0: TRL's kl is there
    assert trainer.beta == 0.5 and trainer.args.beta == 0.5
    trainer.measures_kl_to_start = True
    trainer.train()
    rows = [h for h in trainer.state.log_history if "kl" in h]
    assert len(rows) == 3
    for h in rows:
        assert h[KL_TO_START] == pytest.approx(h["kl"], rel=1e-4, abs=1e-9)
    assert rows[0][KL_TO_START] == pytest.approx(0.0, abs=1e-9) and rows[-1][KL_TO_START] > 1e-6


def test_at_beta_0_the_training_is_trls_own(tmp_path):
    """The reference model is loaded only to measure: the same seed gives the same losses and gradients as TRL's
    plain GRPOTrainer, whose config and trainer keep beta = 0 and load no reference."""
    from trl import GRPOTrainer

    plain = _trainer(GRPOTrainer, tmp_path, beta=0.0)
    assert plain.ref_model is None
    plain.train()
    measured = _trainer(measuring_kl_to_start(GRPOTrainer), tmp_path, beta=0.0)
    assert measured.measures_kl_to_start and measured.ref_model is not None
    assert measured.beta == 0.0 and measured.args.beta == 0.0
    measured.train()
    keys = ("loss", "grad_norm", "reward", "entropy")
    rows = [h for h in measured.state.log_history if "loss" in h]
    assert [{k: h[k] for k in keys} for h in rows] == [
        {k: h[k] for k in keys} for h in plain.state.log_history if "loss" in h
    ]
    assert all("kl" not in h for h in rows) and rows[-1][KL_TO_START] > 1e-6


def test_the_config_must_be_given_by_keyword():
    base = type("Trainer", (), {"__init__": lambda self, *args, **kwargs: None})
    with pytest.raises(TypeError, match=r"args must be given by keyword \(a GRPOConfig\), got None"):
        measuring_kl_to_start(base)("model", [], object())
