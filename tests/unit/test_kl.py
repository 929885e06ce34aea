"""Unit tests for ``grpo_lab.core.kl``: the k1/k2/k3/k3+ estimators and the adaptive KL controller.

Where the expected values come from:
- ``shared/ALGORITHMS.md`` section 10 ("KL estimators, single sample", "KL estimators, gradient
  check", "Adaptive KL"), computed independently in float64 Python;
- hand computation in the tests: the estimator formulas of section 8 written with ``math``,
  and the reverse/forward KL of two small categoricals written out as sums.
The gradient check takes the exact expectation over the 3 outcomes x of q = softmax(theta):
``E[grad] = sum_x q(x).detach() * grad kl_estimate(log q(x), log ref(x))`` (pathwise, as in the
sheet). Nothing here was obtained by running the code under test and pasting its output.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from grpo_lab.core.kl import adaptive_kl_beta, kl_estimate

F64 = torch.float64


def t(values, dtype=F64):
    return torch.tensor(values, dtype=dtype)


# --------------------------------------------------------------------------------------------
# Single-sample table
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "logp, logref, k1, k2, k3",
    [
        (-1.0, -1.5, 0.5, 0.125, 0.106531),
        (-2.0, -1.0, -1.0, 0.5, 0.718282),
        (-0.7, -0.7, 0.0, 0.0, 0.0),
    ],
)
def test_single_sample_estimators_match_sheet(logp, logref, k1, k2, k3):
    lp, lr = t([logp]), t([logref])
    assert kl_estimate(lp, lr, "k1").item() == pytest.approx(k1, abs=1e-6)
    assert kl_estimate(lp, lr, "k2").item() == pytest.approx(k2, abs=1e-6)
    assert kl_estimate(lp, lr, "k3").item() == pytest.approx(k3, abs=1e-6)
    assert kl_estimate(lp, lr, "k3+").item() == pytest.approx(k3, abs=1e-6)


def test_default_kind_is_k3():
    lp, lr = t([-1.0]), t([-1.5])
    assert kl_estimate(lp, lr).item() == kl_estimate(lp, lr, "k3").item()


def test_estimators_match_formulas_by_hand_per_token():
    torch.manual_seed(0)
    logp, ref = torch.randn(3, 5, dtype=F64), torch.randn(3, 5, dtype=F64)
    lr = (ref - logp).flatten().tolist()  # log r, r = pi_ref / pi_theta
    by_hand = {
        "k1": [-x for x in lr],
        "k2": [0.5 * x * x for x in lr],
        "k3": [math.exp(x) - 1 - x for x in lr],
    }
    for kind, expected in by_hand.items():
        out = kl_estimate(logp, ref, kind)
        assert out.shape == (3, 5)
        assert_close(out.flatten(), t(expected), rtol=1e-12, atol=1e-14)


def test_k3_is_exact_near_r_equal_1():
    # expm1 keeps k3 = (r - 1) - log r ~ (log r)^2 / 2 accurate for tiny log r.
    d = 1e-6
    out = kl_estimate(t([0.0]), t([d]), "k3").item()
    assert out == pytest.approx(d * d / 2 + d**3 / 6, rel=1e-6)


def test_signs_k1_either_k2_k3_nonnegative():
    torch.manual_seed(1)
    logp, ref = torch.randn(1000, dtype=F64), torch.randn(1000, dtype=F64)
    k1 = kl_estimate(logp, ref, "k1")
    assert (kl_estimate(logp, ref, "k2") >= 0).all()
    assert (kl_estimate(logp, ref, "k3") >= 0).all()
    assert (kl_estimate(logp, ref, "k3+") >= 0).all()
    # k1 = logp - ref: negative exactly where the policy gives the token less mass than the reference.
    assert torch.equal(k1 < 0, logp < ref)
    assert (k1 < 0).any() and (k1 > 0).any()


@pytest.mark.parametrize(
    "mu, true_kl, rel_bias, rel_std",
    [
        # The blog's table as reproduced in ALGORITHMS.md section 8: (bias/KL, std/KL) for k1, k2, k3.
        (1.0, 0.5, (0.0, 0.25, 0.0), (2.0, 1.73, 1.70)),
        (0.1, 0.005, (0.0, 0.002, 0.0), (20.0, 1.42, 1.42)),
    ],
)
def test_gaussian_monte_carlo_table(mu, true_kl, rel_bias, rel_std):
    # q = N(0, 1) (samples), p = N(mu, 1); KL[q, p] = mu^2 / 2.
    torch.manual_seed(2)
    x = torch.randn(400_000, dtype=F64)
    logq, logp_ref = -0.5 * x**2, -0.5 * (x - mu) ** 2  # the normalising constants cancel
    assert true_kl == pytest.approx(mu * mu / 2)
    for kind, bias, std in zip(("k1", "k2", "k3"), rel_bias, rel_std):
        est = kl_estimate(logq, logp_ref, kind)
        # Tolerances cover Monte-Carlo error (std/KL / sqrt(n) <= 0.03 of KL) and the sheet's rounding.
        assert (est.mean().item() - true_kl) / true_kl == pytest.approx(bias, abs=0.15 if kind == "k1" else 0.01)
        assert est.std().item() / true_kl == pytest.approx(std, rel=0.03)


# --------------------------------------------------------------------------------------------
# Gradient check: exact expectation over the three outcomes
# --------------------------------------------------------------------------------------------

THETA = [0.3, -0.2, 0.5]
REF = [0.5, 0.3, 0.2]


def expected_grad(kind):
    theta = t(THETA).requires_grad_()
    logq = torch.log_softmax(theta, dim=0)
    q = logq.exp().detach()
    est = kl_estimate(logq, t(REF).log(), kind)
    (grad,) = torch.autograd.grad((q * est).sum(), theta)
    return grad, (q * est).sum().item()


def categorical_by_hand():
    z = [math.exp(x) for x in THETA]
    q = [v / sum(z) for v in z]
    reverse = sum(qi * math.log(qi / pi) for qi, pi in zip(q, REF))
    forward = sum(pi * math.log(pi / qi) for qi, pi in zip(q, REF))
    return q, reverse, forward


def test_reverse_and_forward_kl_values_match_sheet():
    _, reverse, forward = categorical_by_hand()
    assert reverse == pytest.approx(0.138056, abs=1e-6)
    assert forward == pytest.approx(0.119893, abs=1e-6)


def test_expected_k1_gradient_is_zero():
    grad, _ = expected_grad("k1")
    assert_close(grad, torch.zeros(3, dtype=F64), rtol=0.0, atol=1e-12)


def test_expected_k2_gradient_is_reverse_kl_gradient():
    grad, _ = expected_grad("k2")
    assert_close(grad, t([-0.171311, -0.101583, 0.272894]), rtol=0.0, atol=1e-5)
    # The same thing from the reverse KL written out by hand and differentiated.
    theta = t(THETA).requires_grad_()
    q = torch.softmax(theta, 0)
    (rev_grad,) = torch.autograd.grad((q * (q.log() - t(REF).log())).sum(), theta)
    assert_close(grad, rev_grad, rtol=1e-10, atol=1e-12)


def test_expected_k3_gradient_is_forward_kl_gradient():
    grad, _ = expected_grad("k3")
    assert_close(grad, t([-0.146385, -0.085522, 0.231906]), rtol=0.0, atol=1e-5)
    # Forward KL by hand: sum_x ref(x) * (log ref(x) - log q(x)); its gradient in theta is q - ref.
    q, _, _ = categorical_by_hand()
    assert_close(grad, t([qi - pi for qi, pi in zip(q, REF)]), rtol=1e-10, atol=1e-12)


def test_k3_plus_has_k2_gradient_and_k3_value():
    g_plus, v_plus = expected_grad("k3+")
    g_k2, _ = expected_grad("k2")
    _, v_k3 = expected_grad("k3")
    assert_close(g_plus, g_k2, rtol=1e-12, atol=1e-14)
    assert_close(g_plus, t([-0.171311, -0.101583, 0.272894]), rtol=0.0, atol=1e-5)
    assert v_plus == pytest.approx(v_k3, abs=1e-14)


def test_k1_and_k3_expectations_equal_reverse_kl_value():
    # Both are unbiased for KL(q || ref) under samples from q (sheet section 8).
    _, reverse, _ = categorical_by_hand()
    assert expected_grad("k1")[1] == pytest.approx(reverse, abs=1e-12)
    assert expected_grad("k3")[1] == pytest.approx(reverse, abs=1e-12)


def test_k3_plus_per_sample_value_and_gradient():
    logp = t([-1.0, -2.0, -0.3]).requires_grad_()
    ref = t([-1.5, -1.0, -0.3])
    plus = kl_estimate(logp, ref, "k3+")
    assert_close(plus.detach(), kl_estimate(logp, ref, "k3").detach(), rtol=0.0, atol=0.0)
    (g_plus,) = torch.autograd.grad(plus.sum(), logp)
    # d k2 / d logp = -(ref - logp) = logp - ref
    assert_close(g_plus, t([0.5, -1.0, 0.0]), rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------------------------
# Adaptive KL controller
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kl, expected", [(12.0, 0.150192), (5.4, 0.149904)])
def test_adaptive_kl_matches_sheet(kl, expected):
    assert adaptive_kl_beta(0.15, kl, 6.0, 10000, 64) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("kl", [0.0, 3.0, 6.0, 7.0, 100.0])
def test_adaptive_kl_by_hand_with_clip(kl):
    e = min(max(kl / 6.0 - 1.0, -0.2), 0.2)
    assert adaptive_kl_beta(0.15, kl, 6.0, 10000, 64) == pytest.approx(0.15 * (1 + e * 64 / 10000), abs=1e-15)


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------


class TestBadInput:
    def test_unknown_kind_lists_options(self):
        with pytest.raises(ValueError, match="kind") as info:
            kl_estimate(t([0.0]), t([0.0]), "k4")
        for option in ("k1", "k2", "k3", "k3+"):
            assert repr(option) in str(info.value)

    def test_shape_mismatch(self):
        with pytest.raises(ValueError, match="ref_logp"):
            kl_estimate(torch.zeros(2, 3), torch.zeros(2, 4))

    def test_non_tensor_integer_and_non_finite(self):
        with pytest.raises(ValueError, match=r"\blogp\b"):
            kl_estimate([0.0], t([0.0]))
        with pytest.raises(ValueError, match=r"\blogp\b"):
            kl_estimate(torch.tensor([0]), t([0.0]))
        with pytest.raises(ValueError, match="ref_logp"):
            kl_estimate(t([0.0]), t([float("-inf")]))
        with pytest.raises(ValueError, match=r"\blogp\b"):
            kl_estimate(t([float("nan")]), t([0.0]))

    def test_adaptive_kl_bad_numbers(self):
        with pytest.raises(ValueError, match="target"):
            adaptive_kl_beta(0.15, 5.0, 0.0, 10000, 64)
        with pytest.raises(ValueError, match="horizon"):
            adaptive_kl_beta(0.15, 5.0, 6.0, 0, 64)
        with pytest.raises(ValueError, match="beta"):
            adaptive_kl_beta(-0.15, 5.0, 6.0, 10000, 64)
        with pytest.raises(ValueError, match="n_steps"):
            adaptive_kl_beta(0.15, 5.0, 6.0, 10000, -1)
        with pytest.raises(ValueError, match=r"\bkl\b"):
            adaptive_kl_beta(0.15, float("nan"), 6.0, 10000, 64)
        with pytest.raises(ValueError, match=r"\bkl\b"):
            adaptive_kl_beta(0.15, "5", 6.0, 10000, 64)
