"""Algorithm fields: each checked where it is declared, and what each stage of the trainer reads."""

from __future__ import annotations

import pytest

from grpo_lab.algorithms import PRESETS, SETTINGS, UPDATE_FIELDS, Algorithm, choices, get_algorithm, unused_fields
from grpo_lab.core.advantages import SCALES


@pytest.mark.parametrize(
    "changes, wanted",
    [
        ({"vf_coef": -1.0}, r"vf_coef must be >= 0, got -1"),  # a critic that ascends its own error
        ({"critic_warmup_steps": -5}, r"critic_warmup_steps must be an integer in \[0, "),
        ({"max_gen_batches": 0}, r"max_gen_batches must be an integer in \[1, "),
        ({"max_gen_batches": -3}, r"max_gen_batches must be an integer in \[1, "),
        ({"dual_clip": 1.0}, r"dual_clip must be > 1, got 1"),
        ({"dual_clip": 0.5}, r"dual_clip must be > 1, got 0.5"),
        ({"value_clip": 0.0}, r"value_clip must be > 0, got 0"),
        ({"gamma": 1.5}, r"gamma must be <= 1, got 1.5"),
        ({"gamma": -0.1}, r"gamma must be >= 0, got -0.1"),
        ({"lam": 1.01}, r"lam must be <= 1, got 1.01"),
        ({"lam": -1.0}, r"lam must be >= 0"),
        ({"minibatches": 10**20}, r"minibatches must be an integer in \[1, 2147483647\], got 10{20}"),
        ({"epochs": 2**31}, r"epochs must be an integer in \[1, 2147483647\], got 2147483648"),
        ({"overlong_cache": 0}, r"overlong_cache must be an integer in \[1, "),
        ({"gfpo_group_size": 1}, r"gfpo_group_size must be an integer in \[2, "),
        ({"entropy_coef": -0.01}, r"entropy_coef must be >= 0"),
        ({"clip_low": -0.1}, r"clip_low must be >= 0"),
        ({"clip_high": -0.1}, r"clip_high must be >= 0"),
        ({"beta": float("nan")}, r"beta must be finite, got nan"),
        ({"critic_lr": 0.0}, r"critic_lr must be > 0, got 0"),
        ({"scale": "std"}, r"scale must be one of 'group', 'batch', 'none'; got 'std'"),
        ({"kl_in_reward": 1}, r"kl_in_reward must be true or false, got 1"),
        ({"clip_low": "0.2"}, r"clip_low must be a number, got str"),
    ],
)
def test_a_bad_field_is_refused_when_the_algorithm_is_made(changes, wanted):
    with pytest.raises(ValueError, match=wanted):
        get_algorithm("ppo", **changes)
    with pytest.raises(ValueError, match=wanted):
        Algorithm(**changes)


def test_the_edges_of_each_range_are_accepted():
    a = Algorithm(gamma=0.0, lam=1.0, vf_coef=0.0, critic_warmup_steps=0, max_gen_batches=1, dual_clip=1.5)
    assert (a.gamma, a.lam, a.vf_coef, a.dual_clip) == (0.0, 1.0, 0.0, 1.5)
    assert Algorithm(minibatches=2**31 - 1).minibatches == 2**31 - 1


def test_name_is_not_a_setting():
    with pytest.raises(ValueError, match=r"^name is the preset's name, not a setting, got name='dapo'"):
        get_algorithm("grpo", name="dapo")
    assert "name" not in SETTINGS


def test_choices_come_from_the_literal_types():
    assert choices("scale") == SCALES
    assert choices("advantage") == ("group", "gae", "gfpo")


def test_update_fields_are_the_fields_the_policy_update_reads():
    # Written out by hand from the trainer's update (the policy loss, its KL term, the optimiser loop).
    assert set(UPDATE_FIELDS) == {
        "clip_low", "clip_high", "dual_clip", "ratio_level", "aggregation", "beta", "kl_kind", "entropy_coef",
        "minibatches", "epochs", "target_kl",
    }  # fmt: skip


def test_unused_fields_names_what_an_algorithm_does_not_read():
    grpo, ppo, dapo = PRESETS["grpo"], PRESETS["ppo"], PRESETS["dapo"]
    assert set(unused_fields(grpo, ["critic_lr", "gamma", "clip_high", "beta"])) == {"critic_lr", "gamma"}
    assert unused_fields(ppo, ["critic_lr", "gamma", "vf_coef"]) == {}
    assert set(unused_fields(grpo, ["max_gen_batches", "overlong_cache", "gfpo_metric", "kl_kind"])) == {
        "max_gen_batches", "overlong_cache", "gfpo_metric", "kl_kind"}  # fmt: skip
    assert unused_fields(dapo, ["max_gen_batches", "overlong_cache"]) == {}
    assert unused_fields(grpo.with_(beta=0.04), ["kl_kind"]) == {}
    assert "scale" in unused_fields(ppo, ["scale"])
    assert "critic" in unused_fields(grpo, ["vf_coef"])["vf_coef"]
