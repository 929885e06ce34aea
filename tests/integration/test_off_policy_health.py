"""The DAPO and GSPO presets make several updates per rollout (4 mini-batches; DAPO's paper makes 16, GSPO's 4),
so the ratio leaves 1: the history shows the clip acting on each side and the approx-KL between the sampling
policy and the updated one. With one update per rollout (GRPO's preset) all of it is exactly 0."""

from __future__ import annotations

import pytest

from grpo_lab.train.trainer import TrainConfig, Trainer


def _run(algo: str, **overrides: int) -> list[dict]:
    config = TrainConfig(algo=algo, seed=0, prompts_per_step=8, group_size=4, algo_overrides=overrides)
    return Trainer(config).train(6)


@pytest.mark.parametrize("algo", ["dapo", "gspo"])
def test_the_preset_makes_the_clip_act_on_both_sides(algo):
    history = _run(algo)
    assert sum(h["clip_frac"] for h in history) > 0
    assert sum(h["clip_frac_low"] for h in history) > 0 and sum(h["clip_frac_high"] for h in history) > 0
    assert all(h["approx_kl"] > 0 for h in history)  # every step's later updates have moved off the sampler
    assert max(h["ratio_max"] for h in history) > 1


def test_one_update_per_rollout_never_leaves_the_sampling_policy():
    history = _run("dapo", minibatches=1)
    assert {h["clip_frac"] for h in history} == {0.0} and {h["approx_kl"] for h in history} == {0.0}
    assert {h["ratio_max"] for h in history} == {1.0}
