"""What the trainer refuses up front, and what it says when a run cannot go on:
``train(steps)`` takes a count; PPO trains with one completion per prompt; more mini-batches than
a batch has rows is refused, or recorded when only the step can know; a run whose every update is
skipped stops with a reason, and says it (a warning) where a notebook shows it.
"""

from __future__ import annotations

import math
import warnings

import pytest

import grpo_lab.train.trainer as trainer_mod
from grpo_lab.algorithms import get_algorithm
from grpo_lab.train.batch import check_batch_shape
from grpo_lab.train.trainer import TrainConfig, Trainer

SMALL = dict(prompts_per_step=2, group_size=2, max_new_tokens=8)


@pytest.fixture
def make_trainer(fresh_policy, small_task):
    def make(algo="grpo", **kwargs):
        model, tok = fresh_policy()
        return Trainer(TrainConfig(algo=algo, **(SMALL | kwargs)), model=model, tokenizer=tok, task=small_task)

    return make


@pytest.mark.parametrize("steps", [-5, 2.5, "3", True])
def test_train_refuses_steps_that_are_not_a_count(make_trainer, steps):
    trainer = make_trainer()
    with pytest.raises(ValueError, match=r"^steps must be an integer >= 0"):
        trainer.train(steps, progress=False)
    assert trainer.history == []


def test_ppo_trains_with_one_completion_per_prompt(make_trainer):
    trainer = make_trainer("ppo", group_size=1)
    m = trainer.train(1, progress=False)[-1]
    assert m["updates"] == 4  # 2 epochs x 2 mini-batches of one row each
    # Groups of one have no spread to measure: not 0, not 1, but not measured.
    assert math.isnan(m["zero_std_frac"]) and math.isnan(m["reward_std_within_group"])


def test_groups_of_one_are_refused_where_the_algorithm_compares_within_a_group():
    with pytest.raises(ValueError, match=r"^group_size must be >= 2 for ppo \(dynamic_sampling"):
        check_batch_shape(get_algorithm("ppo", dynamic_sampling=True), 4, 1)
    with pytest.raises(ValueError, match=r"^group_size must be >= 2 for grpo"):
        check_batch_shape(get_algorithm("grpo"), 4, 1)
    check_batch_shape(get_algorithm("ppo"), 4, 1)  # PPO's GAE needs no group


def test_a_trainer_refuses_a_batch_shape_before_loading_a_model(small_task):
    cfg = TrainConfig(algo="ppo", group_size=1, prompts_per_step=2, algo_overrides={"dynamic_sampling": True})
    with pytest.raises(ValueError, match="^group_size"):
        Trainer(cfg, model="not loaded", tokenizer="not loaded", task=small_task)


def test_more_minibatches_than_a_batch_can_have_rows_is_refused(small_task):
    # 2 prompts x 2 completions: a step never has more than 4 rows.
    cfg = TrainConfig(**SMALL, algo_overrides={"minibatches": 1000})
    with pytest.raises(ValueError, match=r"^minibatches must be <= .* = 4\), got 1000"):
        Trainer(cfg, model="not loaded", tokenizer="not loaded", task=small_task)


def test_mini_batches_the_batch_cannot_make_are_recorded_and_said_once(make_trainer):
    # 3 prompts x 2 = 6 rows asked to split in 4: torch.chunk makes 3 chunks of 2 rows.
    trainer = make_trainer(prompts_per_step=3, algo_overrides={"minibatches": 4})
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        history = trainer.train(2, progress=False)
    assert [m["minibatches_effective"] for m in history] == [3, 3]
    assert [m["updates"] + m["skipped_updates"] for m in history] == [3, 3]
    mentions = [w for w in said if "minibatches_effective" in str(w.message)]
    assert len(mentions) == 1 and "minibatches=4" in str(mentions[0].message)


def test_asked_mini_batches_are_not_flagged(make_trainer):
    m = make_trainer(algo_overrides={"minibatches": 2}).train(1, progress=False)[-1]
    assert "minibatches_effective" not in m and m["updates"] + m["skipped_updates"] == 2


def test_a_step_whose_every_update_is_skipped_stops_the_run(make_trainer, nan_policy_loss):
    trainer = make_trainer()
    with pytest.warns(trainer_mod.StoppedEarly, match=r"^grpo stopped after step 1: every update of step 1"):
        history = trainer.train(3, progress=False)  # said where a notebook shows it, not only in stop_reason
    assert len(history) == 1 and history[0]["updates"] == 0 and history[0]["skipped_updates"] == 1
    assert trainer.stop_reason.startswith("every update of step 1 was skipped")
    assert "lr=" in trainer.stop_reason
