"""Tests for ``grpo_lab.train.trainer`` and ``grpo_lab.algorithms``: every preset trains and reports its
metrics; each preset differs from GRPO in exactly the fields ``shared/ALGORITHMS.md`` describes;
runs are reproducible and resumable; the non-finite guard skips and counts; ``kl_stop`` stops and
saves; DAPO's dynamic sampling, GFPO's shortest-k filter and PPO's critic do what they say; bad
configurations raise ``ValueError`` naming the field.

All runs are tiny (a few prompts, 1-3 steps). Expected rewards, penalties and advantages are
recomputed here from their definitions (the sum3 reward on the decoded prompt, DAPO eq. 13, the
GFPO retained-set statistics), not pasted from the trainer's output.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import signal
import statistics
from pathlib import Path

import pytest
import torch

import grpo_lab.io as io_mod
import grpo_lab.train.checkpoint as checkpoint_mod
import grpo_lab.train.trainer as trainer_mod
from grpo_lab.algorithms import PRESETS, Algorithm, get_algorithm, unused_fields
from grpo_lab.lab.tasks import sum3_reward
from grpo_lab.train.step_metrics import sample_metrics
from grpo_lab.train.trainer import TrainConfig, Trainer, ValueModel

TIMING_KEYS = {"wall_seconds", "step_seconds", "rollout_seconds", "tokens_per_second"}
DOCUMENTED_KEYS = {
    "accuracy", "reward_mean", "reward_std_within_group", "zero_std_frac", "kl", "entropy", "length_mean",
    "length_correct", "length_wrong", "clip_frac_low", "clip_frac_high", "approx_kl", "ratio_mean", "grad_norm",
    "tokens_per_second", "wall_seconds",
}  # fmt: skip
SMALL = dict(prompts_per_step=2, group_size=4, max_new_tokens=12)


@pytest.fixture
def make_trainer(fresh_policy, small_task):
    def make(algo="grpo", **kwargs):
        cfg = TrainConfig(algo=algo, **(SMALL | kwargs))
        model, tok = fresh_policy()
        return Trainer(cfg, model=model, tokenizer=tok, task=small_task)

    return make


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def same_value(x, y) -> bool:
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    return x == y


def assert_same_history(h1: list[dict], h2: list[dict]):
    assert len(h1) == len(h2)
    for step, (a, b) in enumerate(zip(h1, h2), start=1):
        ka, kb = set(a) - TIMING_KEYS, set(b) - TIMING_KEYS
        assert ka == kb, f"step {step}: keys differ {ka ^ kb}"
        diff = {k: (a[k], b[k]) for k in ka if not same_value(a[k], b[k])}
        assert not diff, f"step {step}: {diff}"


def prompt_answers(tok, ro) -> list[int]:
    """The sum3 answer of each row, from its decoded prompt ("07+85+29=" -> 121)."""
    out = []
    for text in tok.batch_decode(ro.prompt_ids, skip_special_tokens=True):
        m = re.fullmatch(r"(\d\d)\+(\d\d)\+(\d\d)=", text)
        assert m is not None, text
        out.append(sum(int(x) for x in m.groups()))
    return out


# --------------------------------------------------------------------------------------------
# Every preset trains
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algo", sorted(PRESETS))
def test_every_preset_trains_two_steps_with_finite_documented_metrics(make_trainer, algo):
    trainer = make_trainer(algo)
    history = trainer.train(2, progress=False)
    assert [m["step"] for m in history] == [1, 2]
    assert trainer.step == 2
    for m in history:
        assert "skipped" not in m, m.get("skipped")
        missing = DOCUMENTED_KEYS - set(m)
        assert not missing, missing
        for k in DOCUMENTED_KEYS - {"length_correct", "length_wrong"}:
            assert math.isfinite(m[k]), (k, m[k])
        # Lengths of right/wrong answers exist exactly when there are right/wrong answers.
        assert math.isfinite(m["length_correct"]) == (m["accuracy"] > 0)
        assert math.isfinite(m["length_wrong"]) == (m["accuracy"] < 1)
        assert 0.0 <= m["accuracy"] <= 1.0
        assert 0.0 <= m["zero_std_frac"] <= 1.0
        assert 1.0 <= m["length_mean"] <= SMALL["max_new_tokens"]
        assert m["entropy"] >= 0 and m["grad_norm"] >= 0
        assert m["updates"] >= 1 and m["skipped_updates"] == 0
    assert history[0]["wall_seconds"] <= history[1]["wall_seconds"]


# --------------------------------------------------------------------------------------------
# The presets as differences from GRPO (shared/ALGORITHMS.md)
# --------------------------------------------------------------------------------------------

EXPECTED_CHANGES = {
    "grpo": {},
    # Section 4: no std division, constant normaliser (token sum / L_MAX), nothing else.
    "dr_grpo": {"scale": "none", "aggregation": "seq_mean_token_sum_norm"},
    # Section 5: clip-higher 0.2/0.28, dynamic sampling, token-level loss, soft overlong punishment
    # (no overlong filtering: the best runs did not use it; no KL: GRPO's lab default is already 0).
    # Several updates per rollout: the paper's 16 (mini-batch 512 of 512 x 16 answers), scaled to the lab's 4.
    "dapo": {"clip_high": 0.28, "dynamic_sampling": True, "aggregation": "token_mean", "overlong_penalty": True,
             "minibatches": 4},
    # Section 6: sequence-level ratio, clip ranges 3e-4 / 4e-4, each rollout split into 4 mini-batches
    # as in the paper (fully on-policy GSPO is GRPO).
    "gspo": {"ratio_level": "sequence", "clip_low": 3e-4, "clip_high": 4e-4, "minibatches": 4},
    # Section 7: sample G > k, keep the shortest k, statistics over the retained set, token mean.
    "gfpo": {"advantage": "gfpo", "aggregation": "token_mean", "gfpo_group_size": 16},
    # Section 1: a critic with GAE, the KL folded into the reward as k1 with TRL's kl_coef 0.05,
    # token-mean surrogate; several updates per rollout (the sheet's PPO columns use 4 epochs; the
    # lab takes 2 epochs x 2 mini-batches); plus the lab's critic warm-up.
    "ppo": {"advantage": "gae", "aggregation": "token_mean", "beta": 0.05, "kl_kind": "k1", "kl_in_reward": True,
            "critic_warmup_steps": 4, "minibatches": 2, "epochs": 2},
}  # fmt: skip


def test_the_expected_changes_cover_every_preset():
    assert set(EXPECTED_CHANGES) == set(PRESETS)


@pytest.mark.parametrize("name", sorted(EXPECTED_CHANGES))
def test_each_preset_changes_exactly_the_fields_its_algorithm_implies(name):
    assert PRESETS[name].name == name
    assert PRESETS[name].changes_from_grpo() == EXPECTED_CHANGES[name]


def test_grpo_defaults_follow_the_reference_sheet():
    g = PRESETS["grpo"]
    assert (g.advantage, g.scale, g.ratio_level, g.aggregation) == ("group", "group", "token", "seq_mean_token_mean")
    assert (g.clip_low, g.clip_high, g.kl_kind, g.beta) == (0.2, None, "k3", 0.0)


def test_ppo_preset_uses_the_rlhf_ppo_defaults():
    p = PRESETS["ppo"]
    # ALGORITHMS.md section 1, "RLHF PPO" column: gamma 1, lambda 0.95, c_v 0.1, eps_v 0.2, eps 0.2.
    assert (p.gamma, p.lam, p.vf_coef, p.value_clip, p.clip_low) == (1.0, 0.95, 0.1, 0.2, 0.2)


def test_with_changes_one_field_and_rejects_unknown_fields():
    a = PRESETS["grpo"].with_(clip_high=0.28)
    assert a.changes_from_grpo() == {"clip_high": 0.28}
    with pytest.raises(ValueError, match="nonsense_field"):
        PRESETS["grpo"].with_(nonsense_field=1)


def test_get_algorithm_rejects_unknown_names_and_applies_overrides():
    assert get_algorithm("dapo", clip_high=0.3).clip_high == 0.3
    with pytest.raises(ValueError, match="algo"):
        get_algorithm("nope")


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"scale": "huge"}, "scale"),
        ({"aggregation": "median"}, "aggregation"),
        ({"clip_low": -0.1}, "clip_low"),
        ({"minibatches": 0}, "minibatches"),
        ({"beta": -1.0}, "beta"),
        ({"advantage": "gfpo"}, "gfpo_group_size"),
    ],
)
def test_algorithm_rejects_bad_fields_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Algorithm(**kwargs)


# --------------------------------------------------------------------------------------------
# Reproducibility and resume
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algo", ["grpo", "gspo"])
def test_two_trainers_with_the_same_seed_give_identical_histories_and_weights(make_trainer, algo):
    a = make_trainer(algo, seed=3, lr=1e-3)
    b = make_trainer(algo, seed=3, lr=1e-3)
    a.train(2, progress=False)
    b.train(2, progress=False)
    assert_same_history(a.history, b.history)
    assert same_weights(weights(a.model), weights(b.model))


@pytest.mark.parametrize("algo, extra", [("grpo", {}), ("ppo", {"algo_overrides": {"critic_warmup_steps": 1}})])
def test_save_and_resume_continues_exactly_like_an_uninterrupted_run(make_trainer, small_task, tmp_path, algo, extra):
    straight = make_trainer(algo, seed=1, lr=1e-3, **extra)
    straight.train(3, progress=False)

    first = make_trainer(algo, seed=1, lr=1e-3, **extra)
    start = weights(first.model)
    first.train(2, progress=False)
    first.save(tmp_path / "run")
    resumed = Trainer.resume(tmp_path / "run", task=small_task)
    assert resumed.step == 2
    resumed.train(1, progress=False)

    assert resumed.step == 3
    assert_same_history(resumed.history, straight.history)
    assert same_weights(weights(resumed.model), weights(straight.model))
    assert not same_weights(weights(resumed.model), start)  # the run did train
    if algo == "ppo":
        assert same_weights(weights(resumed.critic), weights(straight.critic))


def test_resume_rejects_a_folder_without_trainer_state(tmp_path):
    with pytest.raises(ValueError, match="path"):
        Trainer.resume(tmp_path)


# --------------------------------------------------------------------------------------------
# The non-finite guard
# --------------------------------------------------------------------------------------------


def _nan_logps(monkeypatch, request):
    real = trainer_mod.token_logps

    def fake(*args, **kwargs):
        logp, ent = real(*args, **kwargs)
        if torch.is_grad_enabled():  # only the update's pass; rollout/ref/old passes stay finite
            logp = logp * float("nan")
        return logp, ent

    monkeypatch.setattr(trainer_mod, "token_logps", fake)


def _nan_loss(monkeypatch, request):
    request.getfixturevalue("nan_policy_loss")  # conftest's: every update's loss is NaN


def _nan_grad(monkeypatch, request):
    real = trainer_mod.policy_loss

    def fake(logp, *args, **kwargs):
        loss, stats = real(logp, *args, **kwargs)
        # Adds exactly 0 to the loss, but d sqrt(x)/dx at x = 0 is infinite: the gradient is NaN.
        return loss + torch.sqrt(logp.sum() * 0.0), stats

    monkeypatch.setattr(trainer_mod, "policy_loss", fake)


@pytest.mark.parametrize("sabotage", [_nan_logps, _nan_loss, _nan_grad], ids=["nan_logp", "nan_loss", "nan_grad"])
def test_a_non_finite_update_is_skipped_counted_and_leaves_the_weights_alone(
    make_trainer, monkeypatch, request, sabotage
):
    trainer = make_trainer("grpo", lr=1e-2, algo_overrides={"entropy_coef": 0.01})
    before = weights(trainer.model)
    sabotage(monkeypatch, request)
    m = trainer.train(1, progress=False)[-1]
    assert m["skipped_updates"] == 1
    assert m["updates"] == 0
    assert trainer.skipped_steps == 1
    assert m["skipped_steps_total"] == 1
    assert trainer.step == 1
    assert same_weights(weights(trainer.model), before)
    assert len(trainer.opt.state) == 0  # the optimiser never stepped

    monkeypatch.undo()  # the next, healthy step trains (the entropy bonus guarantees a gradient)
    m2 = trainer.train(1, progress=False)[-1]
    assert (m2["updates"], m2["skipped_updates"]) == (1, 0)
    assert not same_weights(weights(trainer.model), before)
    assert trainer.skipped_steps == 1


# --------------------------------------------------------------------------------------------
# kl_stop
# --------------------------------------------------------------------------------------------


def test_kl_stop_ends_the_run_early_and_saves_a_resumable_checkpoint(make_trainer, small_task, tmp_path):
    trainer = make_trainer("grpo", lr=5e-2, kl_stop=1e-9, algo_overrides={"entropy_coef": 0.05})
    history = trainer.train(4, progress=False, checkpoint_dir=tmp_path / "ckpt")
    assert len(history) < 4
    assert trainer.stop_reason is not None and "kl_stop" in trainer.stop_reason
    assert history[-1]["kl"] > 1e-9
    assert all(m["kl"] <= 1e-9 for m in history[:-1])
    assert (tmp_path / "ckpt" / "trainer_state.pt").exists()
    assert (tmp_path / "ckpt" / "policy" / "config.json").exists()
    resumed = Trainer.resume(tmp_path / "ckpt", task=small_task)
    assert resumed.step == len(history)
    assert resumed.stop_reason == trainer.stop_reason
    assert same_weights(weights(resumed.model), weights(trainer.model))


def test_without_kl_stop_the_run_takes_every_step(make_trainer):
    trainer = make_trainer("grpo", lr=5e-2, algo_overrides={"entropy_coef": 0.05})
    assert len(trainer.train(2, progress=False)) == 2
    assert trainer.stop_reason is None


# --------------------------------------------------------------------------------------------
# collect(): rewards, DAPO dynamic sampling, GFPO shortest-k
# --------------------------------------------------------------------------------------------


def test_grpo_collect_scores_each_row_with_the_sum3_reward_of_its_prompt(make_trainer):
    trainer = make_trainer("grpo", prompts_per_step=3, group_size=3)
    batch = trainer.collect()
    ro, correct, rewards, info = batch.rollout, batch.correct, batch.rewards, batch.stats
    assert ro.completion_ids.shape[0] == 9
    answers = prompt_answers(trainer.tokenizer, ro)
    want = [sum3_reward(t, a, bool(f)) for t, a, f in zip(ro.texts, answers, ro.finished.tolist())]
    assert correct.tolist() == want
    assert rewards.tolist() == want  # GRPO adds no shaping
    assert batch.sampled is None  # no filter: the batch is everything sampled
    assert info["gen_rounds"] == 1
    groups = [want[g * 3 : g * 3 + 3] for g in range(3)]
    assert info["zero_std_frac"] == pytest.approx(sum(len(set(g)) == 1 for g in groups) / 3)
    assert info["reward_std_within_group"] == pytest.approx(sum(statistics.stdev(g) for g in groups) / 3, abs=1e-6)


def _dapo_penalty(length: int, max_len: int, cache: int) -> float:
    # DAPO eq. 13.
    if length <= max_len - cache:
        return 0.0
    if length <= max_len:
        return ((max_len - cache) - length) / cache
    return -1.0


def test_dapo_dynamic_sampling_trains_only_on_groups_with_mixed_rewards(make_trainer):
    trainer = make_trainer("dapo", prompts_per_step=4, group_size=4, seed=2)
    a = trainer.algo
    batch = trainer.collect()
    ro, correct, rewards, info = batch.rollout, batch.correct, batch.rewards, batch.stats
    G = 4
    assert 1 <= info["gen_rounds"] <= a.max_gen_batches
    n_groups = info["kept_groups"]
    assert ro.completion_ids.shape[0] == correct.shape[0] == rewards.shape[0] == n_groups * G
    assert n_groups <= 4
    if n_groups < 4:
        assert info["gen_rounds"] == a.max_gen_batches  # it gave up refilling only at the cap
    answers = prompt_answers(trainer.tokenizer, ro)
    for g in range(n_groups):
        rows = range(g * G, g * G + G)
        assert all(torch.equal(ro.prompt_ids[i], ro.prompt_ids[g * G]) for i in rows)
        # The filter keeps groups whose *correctness* varies (DAPO filters on accuracy): a group of
        # all-wrong answers whose overlong penalties spread its shaped rewards must not be kept.
        group_correct = [float(correct[i]) for i in rows]
        assert max(group_correct) > min(group_correct), group_correct
    for i in range(n_groups * G):
        c = sum3_reward(ro.texts[i], answers[i], bool(ro.finished[i]))
        assert float(correct[i]) == c
        want = c + _dapo_penalty(int(ro.lengths[i]), trainer.cfg.max_new_tokens, a.overlong_cache)
        assert float(rewards[i]) == pytest.approx(want, abs=1e-6)
    # Every completion drawn, in every round, is kept for the step's metrics; keep marks the rows trained on.
    drawn = batch.sampled
    assert drawn.correct.numel() == drawn.lengths.numel() == len(drawn.texts) == info["gen_rounds"] * 4 * G
    assert int(drawn.keep.sum()) == n_groups * G
    assert torch.equal(drawn.correct[drawn.keep], correct) and torch.equal(drawn.lengths[drawn.keep], ro.lengths)
    assert [t for t, k in zip(drawn.texts, drawn.keep) if k] == ro.texts
    m = sample_metrics(batch, 2.0, None)
    assert m["accuracy"] == pytest.approx(float(drawn.correct.float().mean()))
    assert m["tokens_per_second"] == pytest.approx(float(drawn.lengths.sum()) / 2.0)  # dropped groups' tokens too


def _gfpo_trainer(make_trainer):
    return make_trainer("gfpo", prompts_per_step=2, group_size=2, seed=0, algo_overrides={"gfpo_group_size": 6})


def test_gfpo_collect_keeps_the_k_shortest_of_each_sampled_group(make_trainer):
    trainer = _gfpo_trainer(make_trainer)
    batch = trainer.collect()
    ro, correct, rewards = batch.rollout, batch.correct, batch.rewards
    adv = trainer.prepare(batch).advantages.advantages
    G, k = 6, 2
    sampled_lengths = batch.sampled.lengths.tolist()
    assert len(sampled_lengths) == 2 * G
    assert ro.completion_ids.shape[0] == correct.shape[0] == adv.shape[0] == 2 * k
    kept = ro.lengths.tolist()
    for g in range(2):
        group = sampled_lengths[g * G : g * G + G]
        assert sorted(kept[g * k : g * k + k]) == sorted(group)[:k], (group, kept)
        assert torch.equal(ro.prompt_ids[g * k], ro.prompt_ids[g * k + 1])
    # Advantages: (R - mean) / population std over the retained set, 0 when it has no spread.
    for g in range(2):
        r = [float(x) for x in rewards[g * k : g * k + k]]
        mu = sum(r) / k
        sd = math.sqrt(sum((x - mu) ** 2 for x in r) / k)
        want = [0.0 if sd == 0 else (x - mu) / sd for x in r]
        assert [float(x) for x in adv[g * k : g * k + k]] == pytest.approx(want, abs=1e-4)


def test_gfpo_collected_rollout_reports_the_number_kept_per_prompt_as_its_group_size(make_trainer):
    # Rollout documents "rows g*G .. g*G+G-1 answer prompt g": after keeping k per prompt, G is k.
    trainer = _gfpo_trainer(make_trainer)
    ro = trainer.collect().rollout
    assert ro.completion_ids.shape[0] == 2 * 2
    assert ro.group_size == 2


# --------------------------------------------------------------------------------------------
# PPO's critic
# --------------------------------------------------------------------------------------------


def test_ppo_has_a_separate_critic_and_a_finite_value_loss(make_trainer):
    trainer = make_trainer("ppo", prompts_per_step=2, group_size=2)
    assert isinstance(trainer.critic, ValueModel)
    policy_ptrs = {p.data_ptr() for p in trainer.model.parameters()}
    assert policy_ptrs.isdisjoint(p.data_ptr() for p in trainer.critic.parameters())
    before = weights(trainer.model)
    m = trainer.train(1, progress=False)[-1]
    assert math.isfinite(m["value_loss"]) and m["value_loss"] >= 0
    assert m["updates"] == 4  # 2 epochs x 2 mini-batches
    # Step 1 is inside the critic warm-up (critic_warmup_steps=4): the policy must not move.
    assert same_weights(weights(trainer.model), before)


def test_value_model_reads_one_value_per_completion_token_and_zero_on_padding(make_trainer):
    trainer = make_trainer("ppo", prompts_per_step=2, group_size=2)
    ro = trainer.collect().rollout
    with torch.no_grad():
        v = trainer.critic(ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    assert v.shape == ro.completion_ids.shape
    assert (v[ro.completion_mask == 0] == 0).all()


def test_non_critic_algorithms_have_no_critic(make_trainer):
    assert make_trainer("grpo").critic is None


# --------------------------------------------------------------------------------------------
# TrainConfig checks
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"steps": -1}, "steps"),
        ({"steps": 1.5}, "steps"),
        ({"steps": True}, "steps"),
        ({"prompts_per_step": 0}, "prompts_per_step"),
        ({"group_size": 0}, "group_size"),
        ({"group_size": 1}, "group_size"),  # GRPO needs a spread within a group
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"temperature": 0.0}, "temperature"),
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"lr": 0.0}, "lr"),
        ({"lr": -1e-3}, "lr"),
        ({"lr": float("nan")}, "lr"),
        ({"lr": float("inf")}, "lr"),
        ({"kl_stop": 0.0}, "kl_stop"),
        ({"kl_stop": -1.0}, "kl_stop"),
        ({"algo": "nope"}, "algo"),
        ({"algo_overrides": {"nonsense_field": 1}}, "nonsense_field"),
        ({"algo_overrides": {"clip_low": -0.5}}, "clip_low"),
        ({"algo": "gfpo", "group_size": 8, "algo_overrides": {"gfpo_group_size": 4}}, "gfpo_group_size"),
        ({"sampler_noise": -0.1}, "sampler_noise"),
        ({"sampler_noise": float("nan")}, "sampler_noise"),
        ({"rollout_is": "token"}, "rollout_is"),
        ({"rollout_is_max": 0.0}, "rollout_is_max"),
        ({"rollout_is_max": 2.0}, "rollout_is_max"),  # without rollout_is it would be ignored
    ],
)
def test_train_config_rejects_bad_values_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**kwargs)


def test_train_config_accepts_a_group_of_one_for_ppo():
    assert TrainConfig(algo="ppo", group_size=1).group_size == 1


def test_dapo_with_a_budget_below_the_overlong_cache_is_rejected_up_front_or_trains(make_trainer):
    # DAPO's default overlong_cache is 8 tokens; a 4-token budget must either be refused by the
    # config (naming the setting) or train, not fail in the middle of the first step.
    try:
        trainer = make_trainer("dapo", max_new_tokens=4)
    except ValueError as err:
        assert "max_new_tokens" in str(err) or "overlong_cache" in str(err)
        return
    m = trainer.train(1, progress=False)[-1]
    assert m["step"] == 1


def test_trainer_needs_the_tokenizer_with_a_given_model(fresh_policy, small_task):
    model, _ = fresh_policy()
    with pytest.raises(ValueError, match="tokenizer"):
        Trainer(TrainConfig(**SMALL), model=model, task=small_task)


# --------------------------------------------------------------------------------------------
# Metrics: every stat reaches the history, absent where it does not apply, one meaning each
# --------------------------------------------------------------------------------------------


def test_every_stat_policy_loss_returns_reaches_the_history(make_trainer):
    from grpo_lab.core.losses import policy_loss

    # The stats policy_loss returns with every option on, asked of policy_loss itself.
    z = torch.zeros(1, 2)
    _, stats = policy_loss(z, z, torch.tensor([1.0]), torch.ones(1, 2), kl=z, beta=0.1, dual_clip=3.0)
    assert {"dual_clip_frac", "kl_mean"} <= set(stats)
    trainer = make_trainer("grpo", algo_overrides={"beta": 0.04, "dual_clip": 3.0})
    m = trainer.train(1, progress=False)[-1]
    assert m["updates"] == 1
    missing = set(stats) - set(m)
    assert not missing, missing
    for k in stats:
        assert math.isfinite(m[k]), (k, m[k])


@pytest.mark.parametrize("algo", ["grpo", "dapo", "gfpo"])
def test_value_loss_is_absent_without_a_critic(make_trainer, algo):
    kwargs = {"algo_overrides": {"gfpo_group_size": 6}, "group_size": 2} if algo == "gfpo" else {}
    m = make_trainer(algo, **kwargs).train(1, progress=False)[-1]
    assert "value_loss" not in m
    assert "kl_mean" not in m  # beta = 0: no KL term in the loss


def test_reward_std_within_group_is_the_shaped_reward_spread_of_the_sampled_groups_for_gfpo_too(make_trainer):
    # GFPO with DAPO's overlong penalty, so that shaped rewards and correctness differ.
    trainer = make_trainer(
        "gfpo",
        group_size=2,
        max_new_tokens=12,
        algo_overrides={"gfpo_group_size": 6, "overlong_penalty": True, "overlong_cache": 8},
    )
    batch = trainer.collect()
    s = batch.sampled
    assert not torch.equal(s.rewards, s.correct)
    groups = [s.rewards[g * 6 : g * 6 + 6].tolist() for g in range(2)]
    want = sum(statistics.stdev(g) for g in groups) / 2
    assert batch.stats["reward_std_within_group"] == pytest.approx(want, abs=1e-6)


def test_the_advantage_table_covers_every_advantage_setting():
    from grpo_lab.train.trainer import ADVANTAGE_ESTIMATORS

    # Algorithm validates `advantage` against this list; each value needs exactly one estimator.
    assert set(ADVANTAGE_ESTIMATORS) == {"group", "gae", "gfpo"}
    for name in ADVANTAGE_ESTIMATORS:
        Algorithm(advantage=name, gfpo_group_size=8 if name == "gfpo" else None)


def test_a_grpo_step_is_the_step_composed_by_hand_from_the_math_layer(make_trainer):
    """Pins the trainer's GRPO update to its definition: group advantages of the batch's rewards,
    policy_loss on-policy, gradient clipping, one AdamW step. Bit for bit, weights and loss."""
    from grpo_lab.core.advantages import group_advantages
    from grpo_lab.core.losses import masked_mean, policy_loss
    from grpo_lab.lab.rollout import token_logps

    trainer = make_trainer("grpo", lr=1e-3, seed=4, prompts_per_step=3, algo_overrides={"entropy_coef": 0.01})
    batch = trainer.collect()
    ro = batch.rollout
    by_hand = copy.deepcopy(trainer.model)
    opt = torch.optim.AdamW(by_hand.parameters(), lr=1e-3, weight_decay=0.0)

    m = trainer.train_step(batch)

    by_hand.train()
    logp, ent = token_logps(
        by_hand, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask, 1.0, with_entropy=True
    )
    mask = ro.completion_mask.float()
    adv = group_advantages(batch.rewards, 4, scale="group")
    loss, _ = policy_loss(logp, logp.detach(), adv, mask, clip_low=0.2, aggregation="seq_mean_token_mean", max_len=12)
    loss = loss - 0.01 * masked_mean(ent, mask)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in by_hand.parameters() if p.grad is not None], 1.0)
    opt.step()
    assert m["updates"] == 1
    assert m["loss"] == loss.item()
    assert same_weights(weights(trainer.model), weights(by_hand))


# Robust runs: more config checks, clean stops on a signal, whole checkpoints
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"seed": -1}, "seed"),
        ({"seed": 2**32}, "seed"),
        ({"seed": 2**63}, "seed"),
        ({"seed": "0"}, "seed"),
        ({"lr": "1e-4"}, "lr"),
        ({"temperature": float("inf")}, "temperature"),
        ({"temperature": None}, "temperature"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"grad_clip": 0.0}, "grad_clip"),
        ({"kl_stop": "0.1"}, "kl_stop"),
        ({"algo_overrides": [("beta", 0.1)]}, "algo_overrides"),
        ({"algo": "ppo", "algo_overrides": {"critic_lr": -1e-4}}, "critic_lr"),
        ({"algo": "ppo", "algo_overrides": {"critic_lr": 0.0}}, "critic_lr"),
    ],
)
def test_train_config_rejects_more_bad_values_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**kwargs)


def test_train_config_accepts_the_largest_32_bit_seed():
    assert TrainConfig(seed=2**32 - 1).seed == 2**32 - 1


def _interrupt_at(step: int, times: int = 1):
    """A train callback that sends this process SIGINT ``times`` times after step ``step``."""

    def callback(m):
        if m["step"] == step:
            for _ in range(times):
                os.kill(os.getpid(), signal.SIGINT)

    return callback


def test_sigint_stops_training_after_the_current_step_and_saves(make_trainer, small_task, tmp_path):
    trainer = make_trainer("grpo", seed=2, lr=1e-3)
    handler_before = signal.getsignal(signal.SIGINT)
    history = trainer.train(5, progress=False, callback=_interrupt_at(2), checkpoint_dir=tmp_path / "ckpt")
    assert len(history) == 2 and trainer.step == 2
    assert trainer.stop_reason == "interrupted"
    assert signal.getsignal(signal.SIGINT) is handler_before  # the handler is put back
    resumed = Trainer.resume(tmp_path / "ckpt", task=small_task)
    assert resumed.step == 2 and resumed.stop_reason == "interrupted"
    assert same_weights(weights(resumed.model), weights(trainer.model))
    resumed.train(1, progress=False)  # a new train() call starts with no stop reason and is not stopped
    assert resumed.step == 3 and resumed.stop_reason is None


def test_sigterm_stops_training_like_sigint(make_trainer):
    trainer = make_trainer("grpo")

    def callback(m):
        if m["step"] == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    trainer.train(3, progress=False, callback=callback)
    assert trainer.step == 1 and trainer.stop_reason == "interrupted"


def test_a_second_sigint_stops_at_once(make_trainer):
    trainer = make_trainer("grpo")
    with pytest.raises(KeyboardInterrupt):
        trainer.train(3, progress=False, callback=_interrupt_at(1, times=2))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    trainer.train(1, progress=False)  # nothing left over from the interrupted call
    assert trainer.stop_reason is None


def test_save_every_keeps_the_checkpoint_at_most_that_many_steps_behind(make_trainer, tmp_path):
    trainer = make_trainer("grpo")
    seen = []

    def callback(m):
        state = tmp_path / "ckpt" / "trainer_state.pt"
        seen.append(torch.load(state, weights_only=False)["step"] if state.exists() else None)

    trainer.train(5, progress=False, callback=callback, checkpoint_dir=tmp_path / "ckpt", save_every=2)
    # seen[i] is read after step i + 1 ran and before its own save: saves after steps 2 and 4, and at the end.
    assert seen == [None, None, 2, 2, 4]
    assert torch.load(tmp_path / "ckpt" / "trainer_state.pt", weights_only=False)["step"] == 5
    with pytest.raises(ValueError, match="save_every"):
        trainer.train(1, progress=False, save_every=1)
    with pytest.raises(ValueError, match="save_every"):
        trainer.train(1, progress=False, checkpoint_dir=tmp_path / "ckpt", save_every=0)


def test_save_replaces_a_checkpoint_whole_and_leaves_no_temporary_folder(make_trainer, small_task, tmp_path):
    trainer = make_trainer("grpo", lr=1e-3)
    trainer.train(1, progress=False)
    trainer.save(tmp_path / "ckpt")
    trainer.train(1, progress=False)
    trainer.save(tmp_path / "ckpt")
    # beside the checkpoint only its lock file (empty but for the writer's pid), kept so that one file is the lock
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ckpt.lock", "ckpt"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["policy", "trainer_state.pt"]
    resumed = Trainer.resume(tmp_path / "ckpt", task=small_task)
    assert resumed.step == 2
    state = torch.load(tmp_path / "ckpt" / "trainer_state.pt", weights_only=False)
    assert state["algorithm"] == {**state["algorithm"], "name": "grpo"}
    assert state["step"] == 2 and state["policy_digest"] == checkpoint_mod.policy_digest(trainer.model)


def test_save_removes_the_temporary_folder_of_a_save_killed_earlier(make_trainer, tmp_path):
    trainer = make_trainer("grpo")
    dead = tmp_path / ".ckpt.tmp-999999999-abcd"  # no such process
    (dead / "policy").mkdir(parents=True)
    trainer.save(tmp_path / "ckpt")
    assert not dead.exists()


def test_save_refuses_to_replace_a_folder_that_is_not_a_checkpoint(make_trainer, tmp_path):
    trainer = make_trainer("grpo")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    with pytest.raises(ValueError, match="other files"):
        trainer.save(tmp_path / "notes")
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep me"
    (tmp_path / "afile").write_text("")
    with pytest.raises(ValueError, match="is a file"):
        trainer.save(tmp_path / "afile")
    trainer.save(tmp_path / "empty")  # a new folder is fine, and so is an empty one
    (tmp_path / "empty2").mkdir()
    trainer.save(tmp_path / "empty2")


def test_without_an_atomic_swap_a_kill_between_the_renames_is_recovered(
    make_trainer, small_task, tmp_path, monkeypatch
):
    trainer = make_trainer("grpo")
    trainer.train(1, progress=False)
    trainer.save(tmp_path / "ckpt")
    monkeypatch.setattr(io_mod, "exchange", lambda a, b: False)
    real_rename = os.rename
    calls = []

    def rename(src, dst):
        calls.append((Path(src).name, Path(dst).name))
        if len(calls) == 3:  # 1: onto the existing folder (refused), 2: old aside, 3: new into place
            raise KeyboardInterrupt  # the process stops here
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    trainer.train(1, progress=False)
    with pytest.raises(KeyboardInterrupt):
        trainer.save(tmp_path / "ckpt")
    monkeypatch.setattr(os, "rename", real_rename)
    assert not (tmp_path / "ckpt").exists()  # between the renames
    resumed = Trainer.resume(tmp_path / "ckpt", task=small_task)  # the old one is put back
    assert resumed.step == 1


def test_policy_digest_changes_with_any_weight_and_survives_save_and_load(make_trainer, tmp_path):
    from grpo_lab.lab.models import load_policy

    trainer = make_trainer("grpo")
    d0 = checkpoint_mod.policy_digest(trainer.model)
    trainer.model.save_pretrained(tmp_path / "m")
    trainer.tokenizer.save_pretrained(tmp_path / "m")
    assert checkpoint_mod.policy_digest(load_policy(str(tmp_path / "m"), "cpu")[0]) == d0
    with torch.no_grad():
        next(trainer.model.parameters()).view(-1)[0] += 1e-6
    assert checkpoint_mod.policy_digest(trainer.model) != d0


def test_save_json_leaves_the_previous_file_whole_when_writing_fails(tmp_path, monkeypatch):
    path = tmp_path / "run.json"
    io_mod.save_json({"a": 1}, path)

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io_mod.os, "replace", fail)
    with pytest.raises(OSError):
        io_mod.save_json({"a": 2}, path)
    assert json.loads(path.read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_sampling_from_nan_weights_names_the_learning_rate(make_trainer):
    trainer = make_trainer("grpo")
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.fill_(float("nan"))
    with pytest.raises(ValueError, match=r"logits hold NaN or infinity.*learning rate \(lr\)"):
        trainer.train(1, progress=False)


def test_a_near_zero_temperature_is_named_before_sampling_nonsense(make_trainer):
    trainer = make_trainer("grpo", temperature=1e-40)
    with pytest.raises(ValueError, match="temperature 1e-40 is too close to 0"):
        trainer.train(1, progress=False)


def test_a_policy_with_nan_weights_is_not_saved_over_the_last_checkpoint(make_trainer, small_task, tmp_path):
    trainer = make_trainer("grpo")
    trainer.train(1, progress=False)
    trainer.save(tmp_path / "ckpt")
    with torch.no_grad():
        next(trainer.model.parameters()).view(-1)[0] = float("nan")
    with pytest.raises(ValueError, match="NaN or infinity.*not saved"):
        trainer.save(tmp_path / "ckpt")
    assert Trainer.resume(tmp_path / "ckpt", task=small_task).step == 1


def test_target_kl_skips_the_rest_of_a_rollout_once_the_policy_has_moved():
    # The first mini-batch is on-policy (approx-KL exactly 0); once it has been stepped on, the next one's is > 0.
    def updates(target_kl):
        algo = {"minibatches": 4, "target_kl": target_kl}
        t = Trainer(TrainConfig(algo="grpo", seed=0, **SMALL, algo_overrides=algo))
        return t.train(1, progress=False)[0]

    tight, loose = updates(1e-12), updates(10.0)
    assert (tight["updates"], tight["target_kl_stopped"]) == (1, 1.0)
    assert (loose["updates"], loose["target_kl_stopped"]) == (4, 0.0)
    # with one update per rollout there is nothing to stop: the command line refuses it rather than ignore it
    assert "target_kl" in unused_fields(get_algorithm("grpo", target_kl=0.01), ["target_kl"])
    assert not unused_fields(get_algorithm("grpo", minibatches=2, target_kl=0.01), ["target_kl"])


# --------------------------------------------------------------------------------------------
# A sampler that is not the policy, and its correction
# --------------------------------------------------------------------------------------------


def test_sampler_noise_samples_from_another_policy_and_logs_how_far(make_trainer):
    trainer = make_trainer(sampler_noise=0.1, rollout_is="token_mask", rollout_is_max=1.5)
    before = weights(trainer.model)
    sampler = trainer._sampling_policy()
    assert not same_weights(weights(sampler), before), "the sampler must be a perturbed copy"
    assert same_weights(weights(trainer.model), before), "perturbing the sampler must leave the policy alone"
    m = trainer.train_step()
    assert m["sampler_logp_diff_mean"] > 0 and m["sampler_logp_diff_max"] >= m["sampler_logp_diff_mean"]
    assert 0 <= m["is_ratio_min"] <= m["is_ratio_mean"] and m["is_ratio_max"] <= 1.5  # masked above C_max
    assert 0 <= m["is_zero_frac"] <= 1


def test_without_a_mismatch_the_correction_weights_are_one(make_trainer):
    m = make_trainer(rollout_is="sequence_truncate").train_step()
    assert m["sampler_logp_diff_max"] < 1e-4  # sampling's cached pass and the trainer's full pass agree
    assert abs(m["is_ratio_min"] - 1) < 1e-3 and abs(m["is_ratio_max"] - 1) < 1e-3


def test_a_run_with_sampler_noise_repeats_from_its_seed(make_trainer):
    a, b = (make_trainer(sampler_noise=0.05, rollout_is="sequence_mask") for _ in range(2))
    ha, hb = a.train(2, progress=False), b.train(2, progress=False)
    assert [m["loss"] for m in ha] == [m["loss"] for m in hb]
    assert same_weights(weights(a.model), weights(b.model))
