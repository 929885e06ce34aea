"""Parity of the lab's ``policy_loss`` / ``group_advantages`` with TRL's ``GRPOTrainer``.

Where the expected values come from: TRL's own code, called for real.
- The loss: ``trl.GRPOTrainer._compute_loss`` (trl 1.16, ``trl/trainer/grpo_trainer.py``,
  ``def _compute_loss`` around line 3020) is called unbound with a ``SimpleNamespace`` standing in
  for the trainer. The stand-in provides exactly the attributes that method reads, and its
  ``_get_per_token_logps_and_entropies`` returns our chosen per-token log-probs (a float64 leaf
  that requires grad), so TRL's loss and the lab's loss can be differentiated w.r.t. the same
  tensor. TRL's KL is k3 computed from those log-probs; the lab gets
  ``kl=kl_estimate(logp, ref_logp, "k3")``.
- The advantages: TRL computes them inline in ``_generate_and_score_completions`` (around lines
  2760-2790), which needs a model and reward functions. We call TRL's own ``nanstd`` (from
  ``trl.trainer.utils``) the way those lines do; the few lines around it are transcribed with their
  line numbers.
- The soft overlong penalty is compared with TRL's ``trl.rewards.get_soft_overlong_punishment``.

Mapping (see ``grpo_lab/core/losses.py``): grpo -> "seq_mean_token_mean"; bnpo, dapo -> "token_mean"
(dapo with num_items_in_batch = mask.sum() and steps_per_generation = 1); dr_grpo ->
"seq_mean_token_sum_norm" with max_len = max_completion_length; importance_sampling_level
"sequence" -> ratio_level="sequence".
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

# trl is a test requirement (requirements.txt): import it plainly so a missing install fails loudly.
from trl import GRPOTrainer
from trl.rewards import get_soft_overlong_punishment
from trl.trainer.utils import nanstd

from grpo_lab.core.advantages import group_advantages
from grpo_lab.core.kl import kl_estimate
from grpo_lab.core.losses import policy_loss
from grpo_lab.core.rewards import soft_overlong_penalty
from grpo_lab.scale.trl_bridge import trl_stand_in

F64 = torch.float64
B, T, P = 8, 7, 3  # completions, completion length, prompt length
MAX_COMPLETION_LENGTH = 10  # > T, so Dr. GRPO's constant normaliser differs from the padded width
EPS_LOW, EPS_HIGH = 0.2, 0.28
AGGREGATION = {
    "grpo": "seq_mean_token_mean",
    "bnpo": "token_mean",
    "dapo": "token_mean",
    "dr_grpo": "seq_mean_token_sum_norm",
}


def fake_trainer(loss_type, importance_sampling_level, beta, logp, entropies, delta=None, use_bias_correction_kl=False):
    """The attributes ``GRPOTrainer._compute_loss`` reads, and nothing else (``grpo_lab.scale.trl_bridge.trl_stand_in``;
    its accelerator is the identity, one process)."""
    return trl_stand_in(
        logp,
        loss_type,
        importance_sampling_level,
        EPS_LOW,
        EPS_HIGH,
        beta,
        MAX_COMPLETION_LENGTH,
        delta=delta,
        use_bias_correction_kl=use_bias_correction_kl,
        entropies=entropies,
    )


def make_batch(seed):
    """Random off-policy batch with ragged (right-padded) completions, float64."""
    torch.manual_seed(seed)
    lengths = torch.tensor([7, 1, 4, 6, 2, 7, 3, 5])
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).long()  # TRL's completion_mask is int
    logp = -torch.rand(B, T, dtype=F64) * 3 - 0.05
    # Per-row drift plus per-token noise; rows 0 (A > 0) and 5 (A < 0), both 7 tokens long, drift far
    # enough that their sequence ratios (about e^0.6 and e^-0.6) are clipped on the active side.
    drift = torch.tensor([-0.6, 0.0, 0.1, -0.1, 0.0, 0.6, -0.2, 0.0], dtype=F64).unsqueeze(1)
    old_logp = logp + drift + 0.35 * torch.randn(B, T, dtype=F64)
    ref_logp = logp + 0.5 * torch.randn(B, T, dtype=F64)
    signs = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0], dtype=F64)
    advantages = (torch.randn(B, dtype=F64).abs() + 0.1) * signs
    entropies = torch.rand(B, T, dtype=F64)
    return logp, old_logp, ref_logp, advantages, mask, entropies


def trl_loss_and_grad(loss_type, level, beta, batch):
    logp, old_logp, ref_logp, advantages, mask, entropies = batch
    leaf = logp.clone().requires_grad_()
    trainer = fake_trainer(loss_type, level, beta, leaf, entropies)
    inputs = {
        "prompt_ids": torch.ones(B, P, dtype=torch.long),
        "prompt_mask": torch.ones(B, P, dtype=torch.long),
        "completion_ids": torch.ones(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": advantages,
        "old_per_token_logps": old_logp,
        "num_items_in_batch": mask.sum(),
    }
    if beta != 0.0:
        inputs["ref_per_token_logps"] = ref_logp
    loss = GRPOTrainer._compute_loss(trainer, None, inputs)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad, trainer._metrics["train"]


def lab_loss_and_grad(loss_type, level, beta, batch):
    logp, old_logp, ref_logp, advantages, mask, _ = batch
    leaf = logp.clone().requires_grad_()
    kl = kl_estimate(leaf, ref_logp, "k3") if beta != 0.0 else None
    loss, stats = policy_loss(
        leaf,
        old_logp,
        advantages,
        mask,
        clip_low=EPS_LOW,
        clip_high=EPS_HIGH,
        ratio_level=level,
        aggregation=AGGREGATION[loss_type],
        max_len=MAX_COMPLETION_LENGTH if loss_type == "dr_grpo" else None,
        kl=kl,
        beta=beta,
    )
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad, stats


CASES = [
    (loss_type, level, beta)
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo")
    for level in ("token", "sequence")
    for beta in (0.0, 0.04)
]


@pytest.mark.parametrize("loss_type, level, beta", CASES)
def test_policy_loss_equals_trl_compute_loss_in_value_and_gradient(loss_type, level, beta):
    batch = make_batch(seed=CASES.index((loss_type, level, beta)))
    trl_loss, trl_grad, _ = trl_loss_and_grad(loss_type, level, beta, batch)
    lab_loss, lab_grad, _ = lab_loss_and_grad(loss_type, level, beta, batch)
    assert trl_loss.dtype == F64 and lab_loss.dtype == F64
    assert_close(lab_loss, trl_loss, rtol=1e-12, atol=1e-14)
    assert_close(lab_grad, trl_grad, rtol=1e-12, atol=1e-14)
    assert (lab_grad != 0).any()


@pytest.mark.parametrize("loss_type, level, beta", CASES)
def test_parity_batch_exercises_both_clip_sides(loss_type, level, beta):
    # Guard: every parity batch clips on both sides (else the clip branches would go untested).
    _, _, stats = lab_loss_and_grad(loss_type, level, beta, make_batch(seed=CASES.index((loss_type, level, beta))))
    assert stats["clip_frac_low"] > 0 and stats["clip_frac_high"] > 0
    assert stats["clip_frac"] < 1


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_token_level_clip_fractions_and_kl_equal_trl_metrics(loss_type):
    # Token level: both count clipped tokens over valid tokens. (At sequence level TRL counts each
    # sequence once, the lab once per token: a documented difference, not compared.)
    batch = make_batch(seed=11)
    _, _, metrics = trl_loss_and_grad(loss_type, "token", 0.04, batch)
    _, _, stats = lab_loss_and_grad(loss_type, "token", 0.04, batch)
    assert stats["clip_frac_low"] == pytest.approx(metrics["clip_ratio/low_mean"][0], abs=1e-6)
    assert stats["clip_frac_high"] == pytest.approx(metrics["clip_ratio/high_mean"][0], abs=1e-6)
    assert stats["clip_frac"] == pytest.approx(metrics["clip_ratio/region_mean"][0], abs=1e-6)
    assert stats["kl_mean"] == pytest.approx(metrics["kl"][0], abs=1e-6)


def test_on_policy_old_logps_omitted_in_trl_equals_lab_with_detached_copy():
    # TRL uses per_token_logps.detach() when old_per_token_logps is absent (grpo_trainer.py ~3063).
    logp, _, _, advantages, mask, entropies = make_batch(seed=5)
    leaf = logp.clone().requires_grad_()
    trainer = fake_trainer("grpo", "token", 0.0, leaf, entropies)
    inputs = {
        "prompt_ids": torch.ones(B, P, dtype=torch.long),
        "prompt_mask": torch.ones(B, P, dtype=torch.long),
        "completion_ids": torch.ones(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": advantages,
    }
    trl_loss = GRPOTrainer._compute_loss(trainer, None, inputs)
    (trl_grad,) = torch.autograd.grad(trl_loss, leaf)
    lab_loss, lab_grad, _ = lab_loss_and_grad("grpo", "token", 0.0, (logp, logp.clone(), None, advantages, mask, None))
    assert_close(lab_loss, trl_loss.detach(), rtol=1e-12, atol=1e-14)
    assert_close(lab_grad, trl_grad, rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------------------------
# Advantages: grpo_trainer.py lines ~2764-2788 (sum_then_normalize, one reward function)
# --------------------------------------------------------------------------------------------


def trl_advantages(rewards, num_generations, scale_rewards):
    # grpo_trainer.py 2765-2766
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    if scale_rewards in ["group", "none"]:  # 2767-2771
        std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)
        std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
    elif scale_rewards == "batch":  # 2774-2777
        std_rewards = nanstd(rewards).expand_as(rewards)
    advantages = rewards - mean_grouped_rewards  # 2785
    if scale_rewards != "none":  # 2786-2787
        advantages = advantages / (std_rewards + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)  # ~2808


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_group_advantages_equal_trl(scale, dtype):
    torch.manual_seed(7)
    G = 4
    continuous = torch.randn(6 * G, dtype=dtype)
    binary = torch.tensor([1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0, 1, 1, 1, 0, 0, 1, 1, 0], dtype=dtype)
    # float32 tolerance in both dtypes: TRL's nanstd applies its Bessel factor in float32
    # (see test_trl_nanstd_is_the_unbiased_std), the lab's torch.std in the input dtype.
    tol = dict(rtol=1e-6, atol=1e-6)
    for rewards in (continuous, binary):
        assert_close(group_advantages(rewards, G, scale=scale), trl_advantages(rewards, G, scale), **tol)


def test_trl_nanstd_is_the_unbiased_std():
    # The sheet's unbiased std of [1,0,0,0] is 0.5. TRL's nanstd computes its Bessel factor
    # count / (count - 1) from integer counts, i.e. in float32, so it is good to ~1e-8 even in float64.
    x = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64)
    assert nanstd(x).item() == pytest.approx(0.5, rel=1e-7)


# --------------------------------------------------------------------------------------------
# DAPO soft overlong penalty: trl.rewards.get_soft_overlong_punishment
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_len, cache_len", [(100, 20), (20480, 4096), (10, 10)])
def test_soft_overlong_penalty_equals_trl(max_len, cache_len):
    lengths = sorted(
        {
            0,
            1,
            max_len - cache_len,
            max_len - cache_len + 1,
            (2 * max_len - cache_len) // 2,
            max_len - 1,
            max_len,
            max_len + 1,
            2 * max_len,
        }
    )
    trl_fn = get_soft_overlong_punishment(max_completion_len=max_len, soft_punish_cache=cache_len)
    expected = torch.tensor(trl_fn([[1] * n for n in lengths]), dtype=F64)
    got = soft_overlong_penalty(torch.tensor(lengths), max_len=max_len, cache_len=cache_len)
    assert_close(got.double(), expected, rtol=0.0, atol=1e-7)


def test_parity_is_not_vacuous_the_aggregation_mapping_matters():
    # Negative control: on a ragged batch, TRL's grpo (per-sequence mean) differs from the lab's
    # token_mean, so the equalities above really pin each mapping down.
    batch = make_batch(seed=3)
    trl_loss, _, _ = trl_loss_and_grad("grpo", "token", 0.0, batch)
    lab_loss, _, _ = lab_loss_and_grad("bnpo", "token", 0.0, batch)
    assert abs(trl_loss.item() - lab_loss.item()) > 1e-3


# --------------------------------------------------------------------------------------------
# TRL's two-sided clip `delta` (INTELLECT-2) is the lab's (verl's) dual clip, and TRL's default
# `use_bias_correction_kl=True` changes the KL gradient, not the on-policy loss value.
# --------------------------------------------------------------------------------------------


def _far_off_policy_batch(seed):
    # Rows with A < 0 whose ratios reach e^1.5 ~ 4.5 > delta = 3, so the dual clip is active.
    logp, old_logp, ref_logp, advantages, mask, entropies = make_batch(seed)
    old_logp = old_logp.clone()
    old_logp[1::2] = logp[1::2] - 1.5 + 0.1 * torch.randn(B // 2, T, dtype=F64)
    return logp, old_logp, ref_logp, advantages, mask, entropies


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_trl_delta_equals_lab_dual_clip(loss_type, level):
    logp, old_logp, _, advantages, mask, entropies = _far_off_policy_batch(seed=21)
    leaf = logp.clone().requires_grad_()
    trainer = fake_trainer(loss_type, level, 0.0, leaf, entropies, delta=3.0)
    inputs = {
        "prompt_ids": torch.ones(B, P, dtype=torch.long),
        "prompt_mask": torch.ones(B, P, dtype=torch.long),
        "completion_ids": torch.ones(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": advantages,
        "old_per_token_logps": old_logp,
        "num_items_in_batch": mask.sum(),
    }
    trl_loss = GRPOTrainer._compute_loss(trainer, None, inputs)
    (trl_grad,) = torch.autograd.grad(trl_loss, leaf)
    leaf2 = logp.clone().requires_grad_()
    lab_loss, stats = policy_loss(
        leaf2,
        old_logp,
        advantages,
        mask,
        clip_low=EPS_LOW,
        clip_high=EPS_HIGH,
        ratio_level=level,
        aggregation=AGGREGATION[loss_type],
        max_len=MAX_COMPLETION_LENGTH if loss_type == "dr_grpo" else None,
        dual_clip=3.0,
    )
    (lab_grad,) = torch.autograd.grad(lab_loss, leaf2)
    assert stats["dual_clip_frac"] > 0  # the dual clip really bites on this batch
    assert_close(lab_loss.detach(), trl_loss.detach(), rtol=1e-12, atol=1e-14)
    assert_close(lab_grad, trl_grad, rtol=1e-12, atol=1e-14)
    # and without the dual clip the lab's loss is different here (so the equality is not vacuous)
    plain, _ = policy_loss(
        logp,
        old_logp,
        advantages,
        mask,
        clip_low=EPS_LOW,
        clip_high=EPS_HIGH,
        ratio_level=level,
        aggregation=AGGREGATION[loss_type],
        max_len=MAX_COMPLETION_LENGTH if loss_type == "dr_grpo" else None,
    )
    assert abs(plain.item() - lab_loss.item()) > 1e-3


def test_trl_default_bias_corrected_kl_keeps_the_value_but_changes_the_gradient():
    # On-policy (old logps omitted, TRL uses logp.detach()): the ratio is 1 in value, so the loss is the lab's,
    # but TRL's default multiplies the KL by that differentiable ratio, which changes the gradient.
    logp, _, ref_logp, advantages, mask, entropies = make_batch(seed=9)
    grads = {}
    for correct in (False, True):
        leaf = logp.clone().requires_grad_()
        trainer = fake_trainer("grpo", "token", 0.04, leaf, entropies, use_bias_correction_kl=correct)
        inputs = {
            "prompt_ids": torch.ones(B, P, dtype=torch.long),
            "prompt_mask": torch.ones(B, P, dtype=torch.long),
            "completion_ids": torch.ones(B, T, dtype=torch.long),
            "completion_mask": mask,
            "advantages": advantages,
            "ref_per_token_logps": ref_logp,
        }
        loss = GRPOTrainer._compute_loss(trainer, None, inputs)
        (grads[correct],) = torch.autograd.grad(loss, leaf)
        grads[(correct, "loss")] = loss.detach()
    lab_loss, lab_grad, _ = lab_loss_and_grad(
        "grpo", "token", 0.04, (logp, logp.clone(), ref_logp, advantages, mask, None)
    )
    assert_close(grads[(False, "loss")], lab_loss, rtol=1e-12, atol=1e-14)
    assert_close(grads[(True, "loss")], lab_loss, rtol=1e-12, atol=1e-14)
    assert_close(grads[False], lab_grad, rtol=1e-12, atol=1e-14)
    assert (grads[True] - lab_grad).abs().max() > 1e-4
