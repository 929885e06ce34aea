"""The words a notebook prints about a run follow its config, not a fixed sentence."""

from __future__ import annotations

from grpo_lab.algorithms import get_algorithm
from grpo_lab.course.switches import switches


def test_one_update_per_rollout_says_the_clip_never_acts():
    text = switches(get_algorithm("grpo"))
    assert "none (this is GRPO)" in text and "the clip never acts" in text and "no KL term" in text


def test_several_updates_say_the_clip_can_act_with_its_own_bounds():
    text = switches(get_algorithm("grpo", minibatches=4, epochs=2, clip_high=0.28))
    assert "8 updates per rollout" in text and "[0.8, 1.28] can act" in text and "never acts" not in text


def test_a_kl_term_is_named_where_it_goes():
    text = switches(get_algorithm("ppo"))
    assert "KL in the reward with the k1 estimator" in text and "beta = 0.05" in text
