"""grpo_lab.scale.health: the within-group reward std and the zero-std share, by hand, and in the log of the
exported TRL script run on the shipped tiny model, next to TRL's own ``frac_reward_zero_std``."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_lab.scale.export import export_recipe
from grpo_lab.scale.health import group_health, with_group_health

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
    for h in rows:
        # one reward function, equal groups: TRL's per-completion share equals the share of groups
        assert h["health/zero_std_frac"] == pytest.approx(h["frac_reward_zero_std"])
        assert 0.0 <= h["health/reward_std_within_group"] <= math.sqrt(4 / 3 * 0.25) + 1e-9  # 0/1 rewards, G = 4
