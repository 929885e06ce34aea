"""KL estimators (Schulman, "Approximating KL Divergence", 2020), per token, and the adaptive beta.

With samples from the policy, set ``log r = ref_logp - logp`` (r = pi_ref / pi_theta). Then

- ``k1 = -log r``: unbiased, high variance, negative for about half of the tokens;
- ``k2 = (log r)^2 / 2``: biased, low variance, always >= 0;
- ``k3 = (r - 1) - log r``: unbiased, low variance, always >= 0 (GRPO's eq. 4);
- ``k3+``: k3's value with k2's gradient (verl's straight-through option).

All target the reverse KL(pi_theta || pi_ref) in value. Used as a loss (pathwise gradient),
k2's expected gradient is the reverse KL's, k3's is the *forward* KL's and k1's is 0
(docs/ALGORITHMS.md section 8).
"""

from __future__ import annotations

import torch

from .checks import check_choice, check_float, check_number, check_same_shape

KL_KINDS = ("k1", "k2", "k3", "k3+")


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token KL estimate of the sampling policy to the reference: same shape as ``logp``."""
    logp = check_float("logp", logp)
    ref_logp = check_float("ref_logp", ref_logp)
    check_same_shape("ref_logp", ref_logp, "logp", logp)
    check_choice("kind", kind, KL_KINDS)
    log_r = ref_logp - logp
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * log_r**2
    k3 = torch.expm1(log_r) - log_r  # expm1 keeps k3 exact near r = 1
    if kind == "k3":
        return k3
    k2 = 0.5 * log_r**2
    return k3.detach() + (k2 - k2.detach())


def adaptive_kl_beta(beta: float, kl: float, target: float, horizon: int, n_steps: int) -> float:
    """The adaptive KL controller of lm-human-preferences (Ziegler et al. 2019).

    ``e = clip(kl / target - 1, -0.2, 0.2)``; ``beta <- beta * (1 + e * n_steps / horizon)``.
    """
    beta = check_number("beta", beta, low=0.0)
    kl = check_number("kl", kl)
    target = check_number("target", target, low=0.0, low_open=True)
    horizon = check_number("horizon", horizon, low=0.0, low_open=True)
    n_steps = check_number("n_steps", n_steps, low=0.0)
    e = min(max(kl / target - 1.0, -0.2), 0.2)
    return beta * (1.0 + e * n_steps / horizon)
