"""Unit tests for ``grpo_lab.core.losses``: the clipped policy loss, value loss, entropy and masked means.

Where the expected values come from:
- ``shared/ALGORITHMS.md`` section 10 (PPO surrogate, dual clip, clip-higher, value loss,
  entropy, loss aggregation with per-token gradient weights, GSPO), computed independently;
- hand computation written out in the tests with plain Python floats (``math``), e.g. the
  unclipped gradient ``d(-r*A)/dlogp = -r*A`` or an aggregation's normaliser;
- properties stated in the sheet (sections 1, 6): zero gradient exactly on the clipped side,
  GSPO == GRPO on-policy, GSPO-token == GSPO for per-sequence advantages, KL added before
  aggregation.
Nothing here was obtained by running the code under test and pasting its output.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from grpo_lab.core.losses import entropy_from_logits, masked_mean, masked_sum, policy_loss, value_loss

F64 = torch.float64


def t(values, dtype=F64):
    return torch.tensor(values, dtype=dtype)


def one_token(r, A, **kwargs):
    """Loss and d loss / d logp for a single token with ratio r (logp = log r, old_logp = 0)."""
    logp = t([[math.log(r)]]).requires_grad_()
    loss, stats = policy_loss(
        logp, torch.zeros(1, 1, dtype=F64), t([A]), torch.ones(1, 1), aggregation="token_mean", **kwargs
    )
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.item(), grad.item(), stats


def loss_and_grad(logp, *args, **kwargs):
    leaf = logp.detach().clone().requires_grad_()
    loss, stats = policy_loss(leaf, *args, **kwargs)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad, stats


def ragged_mask(lengths, T):
    return (torch.arange(T).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).to(F64)


# --------------------------------------------------------------------------------------------
# PPO surrogate, dual clip, clip-higher (sheet section 10)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "r, A, expected_loss, clipped",
    [
        (1.5, +1.0, -1.2, True),
        (0.5, +1.0, -0.5, False),
        (0.5, -1.0, +0.8, True),
        (1.5, -1.0, +1.5, False),
    ],
)
def test_ppo_surrogate_per_token_loss_matches_sheet(r, A, expected_loss, clipped):
    loss, grad, _ = one_token(r, A)
    assert loss == pytest.approx(expected_loss, abs=1e-12)
    # Unclipped: d(-r*A)/dlogp = -r*A; clipped: the branch is a constant, the gradient is exactly 0.
    assert grad == (0.0 if clipped else pytest.approx(-r * A, abs=1e-12))


def test_dual_clip_caps_negative_advantage_loss_at_c():
    loss, grad, stats = one_token(5.0, -1.0, dual_clip=3.0)
    assert loss == pytest.approx(3.0, abs=1e-12)
    assert grad == 0.0
    assert stats["dual_clip_frac"] == 1.0


def test_plain_ppo_without_dual_clip_gives_five():
    loss, grad, stats = one_token(5.0, -1.0)
    assert loss == pytest.approx(5.0, abs=1e-12)
    assert grad == pytest.approx(5.0, abs=1e-12)
    assert stats["dual_clip_frac"] == 0.0


@pytest.mark.parametrize("r, A, expected", [(5.0, +1.0, -1.2), (2.0, -1.0, 2.0), (0.5, -1.0, 0.8)])
def test_dual_clip_leaves_other_tokens_alone(r, A, expected):
    loss, _, stats = one_token(r, A, dual_clip=3.0)
    assert loss == pytest.approx(expected, abs=1e-12)
    assert stats["dual_clip_frac"] == 0.0


@pytest.mark.parametrize("r, A, expected", [(1.25, +1.0, -1.25), (1.35, +1.0, -1.28), (0.75, -1.0, +0.8)])
def test_clip_higher_matches_sheet(r, A, expected):
    loss, _, _ = one_token(r, A, clip_low=0.2, clip_high=0.28)
    assert loss == pytest.approx(expected, abs=1e-12)


def test_symmetric_clip_gives_minus_1_2_where_clip_higher_gives_minus_1_25():
    loss, _, _ = one_token(1.25, +1.0, clip_low=0.2)
    assert loss == pytest.approx(-1.2, abs=1e-12)


# --------------------------------------------------------------------------------------------
# Clipping property: zero gradient exactly on the clipped side, per token
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("clip_low, clip_high", [(0.2, None), (0.2, 0.28)])
def test_clipping_zeroes_gradient_exactly_where_it_should(clip_low, clip_high):
    torch.manual_seed(0)
    B, T = 4, 50
    log_r = torch.empty(B, T, dtype=F64).uniform_(-0.6, 0.6)
    adv = torch.randn(B, T, dtype=F64)
    hi = clip_low if clip_high is None else clip_high
    r = log_r.exp()
    # Keep away from the exact clip boundaries, where the side is a matter of rounding.
    assert ((r - (1 + hi)).abs() > 1e-9).all() and ((r - (1 - clip_low)).abs() > 1e-9).all()
    _, grad, stats = loss_and_grad(
        log_r,
        torch.zeros(B, T, dtype=F64),
        adv,
        torch.ones(B, T),
        clip_low=clip_low,
        clip_high=clip_high,
        aggregation="token_mean",
    )
    clipped = ((adv > 0) & (r > 1 + hi)) | ((adv < 0) & (r < 1 - clip_low))
    assert 0 < clipped.sum() < B * T
    assert (grad[clipped] == 0).all()
    assert (grad[~clipped] != 0).all()
    # Unclipped tokens: d(-r*A)/dlogp / (B*T).
    assert_close(grad[~clipped], (-r * adv / (B * T))[~clipped], rtol=1e-12, atol=0.0)
    # The stats are floats computed in float32: compare at float32 precision.
    assert stats["clip_frac"] == pytest.approx(clipped.double().mean().item(), abs=1e-6)
    assert stats["clip_frac_high"] == pytest.approx(((adv > 0) & (r > 1 + hi)).double().mean().item(), abs=1e-6)
    assert stats["clip_frac_low"] == pytest.approx(((adv < 0) & (r < 1 - clip_low)).double().mean().item(), abs=1e-6)


# --------------------------------------------------------------------------------------------
# Value loss (sheet section 10)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "v_new, v_old, ret, expected", [(1.0, 0.5, 2.0, 0.845), (1.0, 0.5, 0.0, 0.5), (0.6, 0.5, 2.0, 0.98)]
)
def test_clipped_value_loss_matches_sheet(v_new, v_old, ret, expected):
    loss = value_loss(t([[v_new]]), t([[v_old]]), t([[ret]]), torch.ones(1, 1), clip=0.2)
    assert loss.item() == pytest.approx(expected, abs=1e-12)


def test_value_loss_is_masked_token_mean_by_hand():
    v = [[1.0, 2.0, 7.0], [0.5, 0.0, 0.0]]
    ret = [[1.5, 1.0, -3.0], [0.0, 9.0, 9.0]]
    mask = [[1, 1, 0], [1, 0, 0]]
    terms = [0.5 * (v[i][j] - ret[i][j]) ** 2 for i in range(2) for j in range(3) if mask[i][j]]
    loss = value_loss(t(v), t(v), t(ret), torch.tensor(mask))
    assert loss.item() == pytest.approx(sum(terms) / len(terms), abs=1e-12)


# --------------------------------------------------------------------------------------------
# Entropy (sheet section 10)
# --------------------------------------------------------------------------------------------


def test_entropy_of_uniform_over_two_is_ln2():
    assert entropy_from_logits(t([0.5, 0.5]).log()).item() == pytest.approx(0.693147, abs=1e-6)


def test_entropy_of_07_02_01_matches_sheet():
    assert entropy_from_logits(t([0.7, 0.2, 0.1]).log()).item() == pytest.approx(0.801819, abs=1e-6)


def test_entropy_is_per_position_and_shift_invariant():
    p = [[0.7, 0.2, 0.1], [1 / 3, 1 / 3, 1 / 3]]
    expected = [-sum(q * math.log(q) for q in row) for row in p]
    logits = t(p).log() + t([[3.0], [-7.0]])
    out = entropy_from_logits(logits.unsqueeze(0))
    assert out.shape == (1, 2)
    assert_close(out[0], t(expected), rtol=0.0, atol=1e-12)


def test_entropy_is_finite_for_huge_logits():
    out = entropy_from_logits(torch.tensor([[1000.0, 1000.0], [1000.0, 0.0]]))
    assert torch.isfinite(out).all()
    # float32 spacing near 1000 is 6e-5, so the answer is only good to about that much.
    assert out[0].item() == pytest.approx(math.log(2), abs=1e-4)
    assert out[1].item() == pytest.approx(0.0, abs=1e-4)


# --------------------------------------------------------------------------------------------
# Loss aggregation: value and per-token gradient weight (sheet section 10)
# --------------------------------------------------------------------------------------------

AGG_MASK = [[1, 1, 0, 0], [1, 1, 1, 1]]  # lengths [2, 4]
AGG_ADV = [+1.0, -1.0]


@pytest.mark.parametrize(
    "aggregation, max_len, expected_loss, weights",
    [
        ("seq_mean_token_mean", None, 0.0, (0.25, 0.125)),
        ("token_mean", None, 1 / 3, (1 / 6, 1 / 6)),
        ("seq_mean_token_sum_norm", 8, 0.125, (1 / 16, 1 / 16)),
    ],
)
def test_aggregation_value_and_per_token_gradient_weight(aggregation, max_len, expected_loss, weights):
    # On-policy (r = 1): the gradient on token t of row i is -A_i * weight_i; padding gets 0.
    loss, grad, _ = loss_and_grad(
        torch.zeros(2, 4, dtype=F64),
        torch.zeros(2, 4, dtype=F64),
        t(AGG_ADV),
        torch.tensor(AGG_MASK),
        aggregation=aggregation,
        max_len=max_len,
    )
    assert loss.item() == pytest.approx(expected_loss, abs=1e-12)
    w0, w1 = weights
    expected_grad = t([[-w0, -w0, 0.0, 0.0], [w1, w1, w1, w1]])
    assert_close(grad, expected_grad, rtol=0.0, atol=1e-12)


@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"])
def test_padding_values_do_not_matter(aggregation):
    torch.manual_seed(1)
    logp, old = torch.randn(3, 5, dtype=F64) * 0.1, torch.randn(3, 5, dtype=F64) * 0.1
    adv, mask = torch.randn(3, dtype=F64), ragged_mask([2, 5, 3], 5)
    garbage = torch.where(mask.bool(), torch.zeros(3, 5, dtype=F64), torch.full((3, 5), 7.0, dtype=F64))
    l1, g1, _ = loss_and_grad(logp, old, adv, mask, aggregation=aggregation, max_len=6)
    l2, g2, _ = loss_and_grad(logp + garbage, old - garbage, adv, mask, aggregation=aggregation, max_len=6)
    assert_close(l1, l2, rtol=1e-14, atol=0.0)
    assert_close(g1, g2, rtol=1e-14, atol=0.0)
    assert (g1[~mask.bool()] == 0).all()


def test_token_ratio_with_token_mean_allows_an_empty_row():
    # An empty row has no per-sequence mean, but token_mean with token ratios never needs one.
    mask = torch.tensor([[1, 1], [0, 0]])
    loss, _ = policy_loss(
        torch.zeros(2, 2, dtype=F64), torch.zeros(2, 2, dtype=F64), t([2.0, 5.0]), mask, aggregation="token_mean"
    )
    assert loss.item() == pytest.approx(-2.0, abs=1e-12)


def test_per_token_advantages_by_hand():
    logp = t([[math.log(1.1), math.log(0.7)], [math.log(1.5), 0.0]])
    adv = t([[1.0, 1.0], [-2.0, 0.5]])
    mask = torch.tensor([[1, 1], [1, 0]])
    # -min(rA, clip(r)A): 1.1 -> -1.1 ; 0.7 -> -0.7 ; 1.5 with A=-2 -> 3.0 ; row means -0.9 and 3.0.
    loss, _ = policy_loss(logp, torch.zeros(2, 2, dtype=F64), adv, mask)
    assert loss.item() == pytest.approx((-0.9 + 3.0) / 2, abs=1e-12)


# --------------------------------------------------------------------------------------------
# GSPO (sheet section 10)
# --------------------------------------------------------------------------------------------

GSPO_RATIOS = [1.10, 0.95, 1.30, 0.90]


def gspo_row(advantage, **kwargs):
    logp = t([[math.log(x) for x in GSPO_RATIOS]])
    return loss_and_grad(logp, torch.zeros(1, 4, dtype=F64), t([advantage]), torch.ones(1, 4), **kwargs)


def test_gspo_sequence_ratio_is_geometric_mean():
    mean_log = sum(math.log(x) for x in GSPO_RATIOS) / 4
    assert mean_log == pytest.approx(0.050255, abs=1e-6)  # the sheet's value, by hand
    _, _, stats = gspo_row(+1.0, ratio_level="sequence", clip_low=3e-4, clip_high=4e-4)
    assert stats["ratio_mean"] == pytest.approx(1.051539, abs=1e-6)
    assert stats["ratio_min"] == pytest.approx(1.051539, abs=1e-6)
    assert stats["ratio_max"] == pytest.approx(1.051539, abs=1e-6)


def test_gspo_positive_advantage_is_clipped_whole_sequence_no_gradient():
    loss, grad, stats = gspo_row(+1.0, ratio_level="sequence", clip_low=3e-4, clip_high=4e-4)
    assert loss.item() == pytest.approx(-1.0004, abs=1e-9)
    assert (grad == 0).all()
    assert stats["clip_frac_high"] == 1.0 and stats["clip_frac"] == 1.0


def test_gspo_negative_advantage_is_unclipped():
    s = math.exp(sum(math.log(x) for x in GSPO_RATIOS) / 4)
    loss, grad, stats = gspo_row(-1.0, ratio_level="sequence", clip_low=3e-4, clip_high=4e-4)
    assert loss.item() == pytest.approx(1.051539, abs=1e-6)
    # d(s * 1)/dlogp_t = s / |y|: every token of the sequence gets the same weight.
    assert_close(grad, torch.full((1, 4), s / 4, dtype=F64), rtol=1e-12, atol=0.0)
    assert stats["clip_frac"] == 0.0


def test_token_level_eps_02_clips_only_the_130_token():
    loss, grad, stats = gspo_row(+1.0, ratio_level="token", clip_low=0.2)
    assert loss.item() == pytest.approx(-(1.10 + 0.95 + 1.20 + 0.90) / 4, abs=1e-12)
    assert (grad[0] == 0).tolist() == [False, False, True, False]
    assert stats["clip_frac_high"] == 0.25
    assert stats["clip_frac_low"] == 0.0
    assert stats["clip_frac"] == 0.25


def test_gspo_tiny_log_ratios_are_unclipped():
    logp = t([[2e-4, 4e-4]])
    loss, grad, stats = loss_and_grad(
        logp,
        torch.zeros(1, 2, dtype=F64),
        t([1.0]),
        torch.ones(1, 2),
        ratio_level="sequence",
        clip_low=3e-4,
        clip_high=4e-4,
    )
    assert loss.item() == pytest.approx(-1.0003, abs=1e-6)
    assert_close(grad, torch.full((1, 2), -math.exp(3e-4) / 2, dtype=F64), rtol=1e-12, atol=0.0)
    assert stats["clip_frac"] == 0.0


def test_gspo_sequence_ratio_ignores_padding():
    logp = t([[math.log(1.1), math.log(0.9), 5.0]])
    mask = torch.tensor([[1, 1, 0]])
    s = math.exp((math.log(1.1) + math.log(0.9)) / 2)
    loss, _ = policy_loss(logp, torch.zeros(1, 3, dtype=F64), t([-1.0]), mask, ratio_level="sequence")
    assert loss.item() == pytest.approx(s, abs=1e-12)


@pytest.mark.parametrize("clip_low, clip_high", [(0.2, None), (3e-4, 4e-4)])
def test_gspo_equals_grpo_on_policy_in_value_and_gradient(clip_low, clip_high):
    torch.manual_seed(2)
    B, T = 6, 7
    logp = torch.randn(B, T, dtype=F64) - 1.0
    old = logp.detach().clone()
    adv, mask = torch.randn(B, dtype=F64), ragged_mask([1, 7, 3, 5, 2, 6], T)
    kw = dict(clip_low=clip_low, clip_high=clip_high, aggregation="seq_mean_token_mean")
    l_seq, g_seq, _ = loss_and_grad(logp, old, adv, mask, ratio_level="sequence", **kw)
    l_tok, g_tok, _ = loss_and_grad(logp, old, adv, mask, ratio_level="token", **kw)
    assert l_seq.item() == pytest.approx(-adv.mean().item(), abs=1e-12)
    assert_close(l_seq, l_tok, rtol=1e-12, atol=1e-14)
    assert_close(g_seq, g_tok, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"])
def test_gspo_token_equals_gspo_for_per_sequence_advantages(aggregation):
    torch.manual_seed(3)
    B, T = 8, 6
    logp = torch.randn(B, T, dtype=F64) - 1.0
    old = logp + 0.05 * torch.randn(B, T, dtype=F64)  # off-policy
    adv, mask = torch.randn(B, dtype=F64), ragged_mask([6, 1, 4, 3, 6, 2, 5, 4], T)
    kw = dict(clip_low=0.02, clip_high=0.03, aggregation=aggregation, max_len=T)
    l_seq, g_seq, st_seq = loss_and_grad(logp, old, adv, mask, ratio_level="sequence", **kw)
    l_st, g_st, st_st = loss_and_grad(logp, old, adv, mask, ratio_level="sequence_token", **kw)
    assert 0 < st_seq["clip_frac"] < 1  # some sequences clipped, some not: both paths are exercised
    assert_close(l_st, l_seq, rtol=1e-12, atol=1e-14)
    assert_close(g_st, g_seq, rtol=1e-12, atol=1e-14)
    assert st_st == pytest.approx(st_seq, abs=1e-12)


def test_gspo_token_with_per_token_advantages_weights_each_token_by_its_advantage():
    # s_{i,t} = sg[s_i] * pi/sg[pi]: value s_i, gradient s_i * grad log pi_t (sheet section 6).
    logp = t([[math.log(1.1), math.log(0.9), math.log(1.05)]])
    adv = t([[1.0, -2.0, 0.5]])
    s = math.exp((math.log(1.1) + math.log(0.9) + math.log(1.05)) / 3)
    loss, grad, _ = loss_and_grad(
        logp, torch.zeros(1, 3, dtype=F64), adv, torch.ones(1, 3), ratio_level="sequence_token"
    )
    assert loss.item() == pytest.approx(-s * (1.0 - 2.0 + 0.5) / 3, abs=1e-12)
    assert_close(grad, t([[-s * 1.0 / 3, s * 2.0 / 3, -s * 0.5 / 3]]), rtol=1e-12, atol=0.0)


# --------------------------------------------------------------------------------------------
# KL term in the policy loss
# --------------------------------------------------------------------------------------------


def aggregate_by_hand(x, mask, aggregation, max_len):
    rows = [[v for v, m in zip(xr, mr) if m] for xr, mr in zip(x.tolist(), mask.tolist())]
    if aggregation == "seq_mean_token_mean":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    if aggregation == "token_mean":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    return sum(sum(r) for r in rows) / (len(rows) * max_len)


@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"])
@pytest.mark.parametrize("ratio_level", ["token", "sequence"])
def test_kl_term_adds_beta_times_aggregated_kl(aggregation, ratio_level):
    torch.manual_seed(4)
    B, T, beta, max_len = 4, 5, 0.04, 9
    logp, old = torch.randn(B, T, dtype=F64), torch.randn(B, T, dtype=F64)
    adv, mask = torch.randn(B, dtype=F64), ragged_mask([5, 2, 4, 1], T)
    kl = torch.rand(B, T, dtype=F64)
    kw = dict(aggregation=aggregation, ratio_level=ratio_level, max_len=max_len)
    base, _ = policy_loss(logp, old, adv, mask, **kw)
    with_kl, stats = policy_loss(logp, old, adv, mask, kl=kl, beta=beta, **kw)
    expected = base.item() + beta * aggregate_by_hand(kl, mask, aggregation, max_len)
    assert with_kl.item() == pytest.approx(expected, abs=1e-12)
    assert stats["kl_mean"] == pytest.approx(aggregate_by_hand(kl, mask, "token_mean", None), abs=1e-12)


def test_kl_with_beta_zero_changes_nothing():
    torch.manual_seed(5)
    logp, old, adv = torch.randn(2, 3, dtype=F64), torch.randn(2, 3, dtype=F64), torch.randn(2, dtype=F64)
    base, _ = policy_loss(logp, old, adv, torch.ones(2, 3))
    same, _ = policy_loss(logp, old, adv, torch.ones(2, 3), kl=torch.rand(2, 3, dtype=F64), beta=0.0)
    assert same.item() == base.item()


def test_kl_gradient_flows_through_the_kl_term():
    logp = torch.zeros(1, 2, dtype=F64, requires_grad=True)
    kl = 0.5 * (logp - t([[-1.0, 0.5]])) ** 2  # d kl / d logp = logp - ref = [1, -0.5]
    loss, _ = policy_loss(logp, torch.zeros(1, 2, dtype=F64), t([0.0]), torch.ones(1, 2), kl=kl, beta=0.1)
    (grad,) = torch.autograd.grad(loss, logp)
    assert_close(grad, t([[0.1 * 1.0 / 2, 0.1 * -0.5 / 2]]), rtol=1e-12, atol=0.0)


# --------------------------------------------------------------------------------------------
# masked_sum / masked_mean
# --------------------------------------------------------------------------------------------


def test_masked_sum_and_mean_by_hand():
    x = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 0, 1], [0, 1, 1]])
    assert masked_sum(x, mask).item() == 1 + 3 + 5 + 6
    assert masked_mean(x, mask).item() == pytest.approx((1 + 3 + 5 + 6) / 4, abs=1e-12)
    assert masked_sum(x, mask, dim=1).tolist() == [4.0, 11.0]
    assert_close(masked_mean(x, mask, dim=1), t([2.0, 5.5]), rtol=0.0, atol=1e-12)
    assert_close(masked_mean(x, mask, dim=0), t([1.0, 5.0, 4.5]), rtol=0.0, atol=1e-12)


# --------------------------------------------------------------------------------------------
# Bad input: ValueError naming the argument
# --------------------------------------------------------------------------------------------


def good_args(B=2, T=3):
    return dict(
        logp=torch.zeros(B, T, dtype=F64),
        old_logp=torch.zeros(B, T, dtype=F64),
        advantages=torch.ones(B, dtype=F64),
        mask=torch.ones(B, T),
    )


class TestPolicyLossBadInput:
    def test_good_args_work(self):
        loss, _ = policy_loss(**good_args())
        assert loss.item() == pytest.approx(-1.0, abs=1e-12)

    def test_mismatched_shapes(self):
        with pytest.raises(ValueError, match="old_logp"):
            policy_loss(**{**good_args(), "old_logp": torch.zeros(2, 4, dtype=F64)})
        with pytest.raises(ValueError, match="mask"):
            policy_loss(**{**good_args(), "mask": torch.ones(3, 3)})
        with pytest.raises(ValueError, match="advantages"):
            policy_loss(**{**good_args(), "advantages": torch.ones(3, dtype=F64)})
        with pytest.raises(ValueError, match="advantages"):
            policy_loss(**{**good_args(), "advantages": torch.ones(2, 4, dtype=F64)})
        with pytest.raises(ValueError, match=r"\bkl\b"):
            policy_loss(**good_args(), kl=torch.zeros(2, 4, dtype=F64), beta=0.1)

    def test_wrong_ndim(self):
        with pytest.raises(ValueError, match=r"\blogp\b"):
            policy_loss(**{**good_args(), "logp": torch.zeros(6, dtype=F64)})

    def test_non_tensor(self):
        with pytest.raises(ValueError, match=r"\blogp\b"):
            policy_loss(**{**good_args(), "logp": [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]})
        with pytest.raises(ValueError, match="advantages"):
            policy_loss(**{**good_args(), "advantages": [1.0, 1.0]})
        with pytest.raises(ValueError, match="mask"):
            policy_loss(**{**good_args(), "mask": [[1, 1, 1], [1, 1, 1]]})

    def test_integer_dtype(self):
        with pytest.raises(ValueError, match=r"\blogp\b"):
            policy_loss(**{**good_args(), "logp": torch.zeros(2, 3, dtype=torch.long)})
        with pytest.raises(ValueError, match="advantages"):
            policy_loss(**{**good_args(), "advantages": torch.ones(2, dtype=torch.long)})

    @pytest.mark.parametrize("bad", [float("nan"), float("inf")])
    def test_non_finite(self, bad):
        logp = torch.zeros(2, 3, dtype=F64)
        logp[0, 1] = bad
        with pytest.raises(ValueError, match=r"\blogp\b"):
            policy_loss(**{**good_args(), "logp": logp})
        with pytest.raises(ValueError, match="advantages"):
            policy_loss(**{**good_args(), "advantages": t([1.0, bad])})

    @pytest.mark.parametrize("value", [2, 0.5, -1])
    def test_mask_not_binary(self, value):
        mask = torch.ones(2, 3)
        mask[1, 2] = value
        with pytest.raises(ValueError, match="mask"):
            policy_loss(**{**good_args(), "mask": mask})

    @pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"])
    def test_all_zero_mask(self, aggregation):
        with pytest.raises(ValueError, match="mask"):
            policy_loss(**{**good_args(), "mask": torch.zeros(2, 3)}, aggregation=aggregation, max_len=3)

    def test_empty_row_for_seq_mean_token_mean(self):
        with pytest.raises(ValueError, match="mask"):
            policy_loss(
                **{**good_args(), "mask": torch.tensor([[1, 1, 0], [0, 0, 0]])}, aggregation="seq_mean_token_mean"
            )

    @pytest.mark.parametrize("ratio_level", ["sequence", "sequence_token"])
    def test_empty_row_for_sequence_ratio(self, ratio_level):
        with pytest.raises(ValueError, match="mask"):
            policy_loss(
                **{**good_args(), "mask": torch.tensor([[1, 1, 0], [0, 0, 0]])},
                ratio_level=ratio_level,
                aggregation="token_mean",
            )

    def test_unknown_aggregation_lists_options(self):
        with pytest.raises(ValueError, match="aggregation") as info:
            policy_loss(**good_args(), aggregation="sum")
        for option in ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"):
            assert option in str(info.value)

    def test_unknown_ratio_level_lists_options(self):
        with pytest.raises(ValueError, match="ratio_level") as info:
            policy_loss(**good_args(), ratio_level="tokens")
        for option in ("token", "sequence", "sequence_token"):
            assert repr(option) in str(info.value)

    def test_bad_clip_range(self):
        with pytest.raises(ValueError, match="clip_low"):
            policy_loss(**good_args(), clip_low=-0.1)
        with pytest.raises(ValueError, match="clip_high"):
            policy_loss(**good_args(), clip_high=-0.1)
        with pytest.raises(ValueError, match="clip_low"):
            policy_loss(**good_args(), clip_low="0.2")

    def test_dr_grpo_needs_max_len(self):
        with pytest.raises(ValueError, match="max_len"):
            policy_loss(**good_args(), aggregation="seq_mean_token_sum_norm")

    def test_dr_grpo_max_len_shorter_than_a_row(self):
        with pytest.raises(ValueError, match="max_len"):
            policy_loss(**good_args(), aggregation="seq_mean_token_sum_norm", max_len=2)

    @pytest.mark.parametrize("max_len", [0, -3, 2.5, True])
    def test_dr_grpo_max_len_not_a_positive_int(self, max_len):
        with pytest.raises(ValueError, match="max_len"):
            policy_loss(**good_args(), aggregation="seq_mean_token_sum_norm", max_len=max_len)

    def test_beta_without_kl(self):
        with pytest.raises(ValueError, match=r"\bkl\b"):
            policy_loss(**good_args(), beta=0.04)

    def test_negative_beta(self):
        with pytest.raises(ValueError, match="beta"):
            policy_loss(**good_args(), kl=torch.zeros(2, 3, dtype=F64), beta=-0.1)

    def test_non_finite_kl(self):
        kl = torch.zeros(2, 3, dtype=F64)
        kl[0, 0] = float("nan")
        with pytest.raises(ValueError, match=r"\bkl\b"):
            policy_loss(**good_args(), kl=kl, beta=0.1)

    @pytest.mark.parametrize("c", [1.0, 0.5, -3.0])
    def test_dual_clip_not_above_one(self, c):
        with pytest.raises(ValueError, match="dual_clip"):
            policy_loss(**good_args(), dual_clip=c)


class TestOtherBadInput:
    def test_value_loss_shapes(self):
        v = torch.zeros(2, 3)
        with pytest.raises(ValueError, match="old_values"):
            value_loss(v, torch.zeros(2, 4), v, torch.ones(2, 3))
        with pytest.raises(ValueError, match="returns"):
            value_loss(v, v, torch.zeros(3, 3), torch.ones(2, 3))
        with pytest.raises(ValueError, match="mask"):
            value_loss(v, v, v, torch.ones(2, 2))

    def test_value_loss_dtype_and_type(self):
        with pytest.raises(ValueError, match=r"\bvalues\b"):
            value_loss(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3))
        with pytest.raises(ValueError, match=r"\bvalues\b"):
            value_loss([[0.0]], torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1))

    def test_value_loss_mask(self):
        v = torch.zeros(1, 2)
        with pytest.raises(ValueError, match="mask"):
            value_loss(v, v, v, torch.tensor([[1, 3]]))
        with pytest.raises(ValueError, match="mask"):
            value_loss(v, v, v, torch.zeros(1, 2))

    @pytest.mark.parametrize("clip", [0.0, -0.2])
    def test_value_loss_clip_not_positive(self, clip):
        v = torch.zeros(1, 2)
        with pytest.raises(ValueError, match="clip"):
            value_loss(v, v, v, torch.ones(1, 2), clip=clip)

    def test_masked_mean_empty(self):
        x = torch.ones(2, 2)
        with pytest.raises(ValueError, match="mask"):
            masked_mean(x, torch.zeros(2, 2))
        with pytest.raises(ValueError, match="mask"):
            masked_mean(x, torch.zeros(2, 2), dim=1)  # nothing selected anywhere

    def test_masked_reductions_bad_args(self):
        with pytest.raises(ValueError, match=r"\bx\b"):
            masked_mean([1.0, 2.0], torch.ones(2))
        with pytest.raises(ValueError, match="mask"):
            masked_sum(torch.ones(2), torch.ones(3))
        with pytest.raises(ValueError, match="mask"):
            masked_sum(torch.ones(2), torch.tensor([1, 2]))

    def test_entropy_bad_logits(self):
        with pytest.raises(ValueError, match="logits"):
            entropy_from_logits(torch.tensor([1, 2, 3]))
        with pytest.raises(ValueError, match="logits"):
            entropy_from_logits([0.1, 0.2])
        with pytest.raises(ValueError, match="logits"):
            entropy_from_logits(torch.tensor(1.0))


# --------------------------------------------------------------------------------------------
# A lower clip of 1 or more; means over empty slices; the formulas other modules reuse
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("clip_low", [1.0, 10.0])
def test_a_clip_low_of_one_or_more_switches_the_lower_clip_off(clip_low):
    # TRL: epsilon=10 makes 1 - epsilon negative, a bound a ratio never crosses. By hand, A = -1:
    # r = 0.5 -> -min(-0.5, -clip(0.5)) = 0.5 (with clip_low 0.2 it would be clipped to 0.8).
    loss, grad, stats = one_token(0.5, -1.0, clip_low=clip_low, clip_high=0.28)
    assert loss == pytest.approx(0.5, abs=1e-12)
    assert grad == pytest.approx(0.5, abs=1e-12)  # d(-r A)/d logp = -A r: the gradient still flows
    assert stats["clip_frac_low"] == 0.0
    # The upper clip still acts: r = 1.5, A = +1 is held at 1.28.
    loss, grad, stats = one_token(1.5, +1.0, clip_low=clip_low, clip_high=0.28)
    assert loss == pytest.approx(-1.28, abs=1e-12) and grad == 0.0 and stats["clip_frac_high"] == 1.0


def test_masked_mean_over_a_dim_gives_nan_for_an_empty_slice_and_the_means_elsewhere():
    x = t([[1.0, 2.0, 4.0], [3.0, 5.0, 7.0]])
    out = masked_mean(x, t([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]), dim=1)
    assert out[0].item() == pytest.approx(2.5, abs=1e-12)
    assert math.isnan(out[1].item())  # as torch.tensor([]).mean() is
    out = masked_mean(x, t([[1.0, 0.0, 1.0], [1.0, 0.0, 0.0]]), dim=0)
    assert out[0].item() == pytest.approx(2.0, abs=1e-12) and math.isnan(out[1].item())
    assert out[2].item() == pytest.approx(4.0, abs=1e-12)


def test_sequence_log_ratio_is_the_mean_token_log_ratio_over_valid_tokens():
    from grpo_lab.core.losses import sequence_log_ratio

    # ALGORITHMS.md section 6: token ratios [1.10, 0.95, 1.30, 0.90] give s = 1.051539.
    lr = torch.log(t([[1.10, 0.95, 1.30, 0.90]]))
    assert sequence_log_ratio(lr, torch.ones(1, 4)).exp().item() == pytest.approx(1.051539, abs=1e-6)
    # Padding does not count: the mean of 0.3 and -0.1 only.
    out = sequence_log_ratio(t([[0.3, -0.1, 9.0]]), t([[1.0, 1.0, 0.0]]))
    assert out.item() == pytest.approx(0.1, abs=1e-12)


def test_clip_masks_mark_where_the_clip_acts_by_the_sign_of_the_advantage():
    from grpo_lab.core.losses import clip_masks

    r = t([0.5, 0.5, 1.5, 1.5, 1.1])
    a = t([-1.0, 1.0, 1.0, -1.0, 1.0])
    low, high = clip_masks(r, a, 0.2, 0.28)
    assert low.tolist() == [True, False, False, False, False]
    assert high.tolist() == [False, False, True, False, False]
    with pytest.raises(ValueError, match="clip_high"):
        clip_masks(r, a, 0.2, -1.0)


def test_token_gradient_weights_are_the_aggregations_normalisers():
    from grpo_lab.core.losses import token_gradient_weights

    # ALGORITHMS.md section 3 setup: lengths 2 and 4, A = +1 and -1.
    w = token_gradient_weights([2, 4], [1.0, -1.0], "token_mean", 4)
    assert_close(w, t([[1 / 6, 1 / 6, 0, 0], [-1 / 6] * 4]), rtol=0.0, atol=1e-12)
    w = token_gradient_weights([2, 4], [1.0, -1.0], "seq_mean_token_mean", 4)
    assert_close(w, t([[1 / 4, 1 / 4, 0, 0], [-1 / 8] * 4]), rtol=0.0, atol=1e-12)
    w = token_gradient_weights([2, 4], [1.0, -1.0], "seq_mean_token_sum_norm", 8)
    assert_close(w[:, :4], t([[1 / 16, 1 / 16, 0, 0], [-1 / 16] * 4]), rtol=0.0, atol=1e-12)


def test_approx_kl_is_k3_of_the_sampling_policy_on_unmasked_tokens_by_hand():
    # Ratios 2, 1/2 and 1 on the three unmasked tokens; the masked one (ratio e^5) must not count.
    # k3 = (w - 1) - log w: 1 - ln 2 = 0.306853, -0.5 + ln 2 = 0.193147, 0; mean 0.5 / 3 = 0.166667.
    old = torch.zeros(1, 4, dtype=F64)
    logp = torch.tensor([[math.log(2.0), -math.log(2.0), 0.0, 5.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=F64)
    _, stats = policy_loss(logp, old, torch.ones(1, dtype=F64), mask)
    assert stats["approx_kl"] == pytest.approx(0.5 / 3, abs=1e-12)
    _, on_policy = policy_loss(old.clone(), old, torch.ones(1, dtype=F64), mask)
    assert on_policy["approx_kl"] == 0.0  # the first update of a rollout has not moved


def test_approx_kl_uses_token_ratios_even_when_gspo_clips_the_sequence_ratio():
    old = torch.zeros(1, 2, dtype=F64)
    logp = torch.tensor([[math.log(2.0), -math.log(2.0)]], dtype=F64)  # sequence ratio exp(0) = 1, tokens 2, 1/2
    _, stats = policy_loss(logp, old, torch.ones(1, dtype=F64), torch.ones(1, 2), ratio_level="sequence")
    assert stats["ratio_max"] == pytest.approx(1.0) and stats["approx_kl"] == pytest.approx(0.25, abs=1e-12)
