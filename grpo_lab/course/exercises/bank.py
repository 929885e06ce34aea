"""The exercises, in notebook order: for each, the cases a learner's function is run on, the package's
answer to them, a short reference solution and a hint.

Each exercise is four parts, ``_sol_*`` (shown by ``solution(name)``), ``_cases_*``, ``_ref_*`` (or a
lambda over the package) and its ``_declare`` line. The expected values come from the package, which is
itself tested against the papers' numbers (``tests/``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch

from ...core.advantages import dynamic_sampling_keep, gae, gfpo_advantages, gfpo_keep, group_advantages, rloo_advantages
from ...core.kl import kl_estimate
from ...core.losses import masked_mean, policy_loss, sequence_log_ratio, token_gradient_weights
from ...core.rewards import soft_overlong_penalty
from ...study.stats import mean_and_spread


class Exercise(NamedTuple):
    """One exercise: its cases, the package's answer to them, a reference solution, and a hint."""

    cases: Callable[[], list]
    """() -> [(label, args, kwargs), ...]: the inputs the learner's function is called with."""
    reference: Callable
    """The expected output for a case, from the package (itself tested against the papers)."""
    solution: Callable
    """A short reference solution, in the notebook's own terms (``solution(name)`` shows its source)."""
    hint: str


EXERCISES: dict[str, Exercise] = {}


def _declare(name: str, cases: Callable[[], list], reference: Callable, solution: Callable, hint: str) -> None:
    EXERCISES[name] = Exercise(cases, reference, solution, hint)


# --- notebook 00: the tour ---------------------------------------------------------------------------


def _sol_group_advantages(rewards: torch.Tensor, group_size: int, use_std: bool = True) -> torch.Tensor:
    g = rewards.view(-1, group_size)
    centred = g - g.mean(dim=1, keepdim=True)
    if use_std:
        centred = centred / (g.std(dim=1, keepdim=True) + 1e-4)
    return centred.reshape(-1)


def _cases_group_advantages():
    return [
        ("one group [1, 0, 0, 0]", (torch.tensor([1.0, 0, 0, 0]), 4), {}),
        ("two groups of 3", (torch.tensor([1.0, 0, 1, 0, 0, 1]), 3), {}),
        ("an all-correct group must give zeros, not NaN", (torch.tensor([1.0, 1, 1, 1, 0, 1, 0, 1]), 4), {}),
        ("rewards that are not 0/1", (torch.tensor([0.2, 0.5, 0.9, 0.4]), 2), {}),
        ("without the std (Dr. GRPO)", (torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 1]), 4), {"use_std": False}),
    ]


def _ref_group_advantages(rewards, group_size, use_std=True):
    return group_advantages(rewards, group_size, scale="group" if use_std else "none")


_declare(
    "group_advantages",
    cases=_cases_group_advantages,
    reference=_ref_group_advantages,
    solution=_sol_group_advantages,
    hint=(
        "Centre each group on its mean; divide by its std (+1e-4) only when use_std. Groups are "
        "consecutive rows: rewards.view(-1, group_size)."
    ),
)


def _sol_masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum()


def _cases_masked_mean():
    x = torch.tensor([[1.0, 2.0, 3.0, 99.0], [4.0, 5.0, 99.0, 99.0]])
    m = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    return [
        ("no padding", (torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.ones(2, 2)), {}),
        ("padding (99) must be ignored", (x, m), {}),
        ("a single valid token", (x, torch.tensor([[0.0, 0, 1, 0], [0, 0, 0, 0]])), {}),
    ]


_declare(
    "masked_mean",
    cases=_cases_masked_mean,
    reference=lambda x, m: masked_mean(x, m),
    solution=_sol_masked_mean,
    hint="Multiply by the mask before summing, and divide by the number of valid tokens, not by x.numel().",
)


# --- notebook 01: policy gradients -------------------------------------------------------------------


def _sol_reinforce_loss(seq_logp: torch.Tensor, rewards: torch.Tensor, baseline: float) -> torch.Tensor:
    return -((rewards - baseline) * seq_logp).mean()


def _cases_reinforce():
    lp = torch.tensor([-1.0, -2.0, -0.5, -3.0])
    r = torch.tensor([1.0, 0.0, 1.0, 0.0])
    return [
        ("no baseline", (lp, r, 0.0), {}),
        ("baseline 0.5", (lp, r, 0.5), {}),
        ("all rewards equal to the baseline give 0", (lp, torch.ones(4), 1.0), {}),
    ]


def _ref_reinforce(seq_logp, rewards, baseline):
    # The definition (Williams 1992): the surrogate whose gradient is -E[(R - b) grad log pi(y|x)].
    return torch.stack([-(r - baseline) * lp for r, lp in zip(rewards, seq_logp)]).mean()


_declare(
    "reinforce_loss",
    cases=_cases_reinforce,
    reference=_ref_reinforce,
    solution=_sol_reinforce_loss,
    hint="The loss is minus the mean of (R - b) * log pi(y|x): minimising it raises log pi where R > b.",
)


def _sol_rloo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    g = rewards.view(-1, group_size)
    others_mean = (g.sum(dim=1, keepdim=True) - g) / (group_size - 1)
    return (g - others_mean).reshape(-1)


def _cases_rloo():
    return [
        ("[1, 0, 0, 1]", (torch.tensor([1.0, 0, 0, 1]), 4), {}),
        ("[0.2, 0.5, 0.9]", (torch.tensor([0.2, 0.5, 0.9]), 3), {}),
        ("two groups of 2", (torch.tensor([1.0, 0, 1, 1]), 2), {}),
    ]


_declare(
    "rloo_advantages",
    cases=_cases_rloo,
    reference=lambda r, g: rloo_advantages(r, g),
    solution=_sol_rloo_advantages,
    hint="The baseline for sample i is the mean of the *other* G-1 rewards of its group.",
)


# --- notebook 02: PPO's clip and GAE -----------------------------------------------------------------


def _sol_clipped_token_loss(ratio: torch.Tensor, advantage: torch.Tensor, eps: float) -> torch.Tensor:
    return -torch.minimum(ratio * advantage, ratio.clamp(1 - eps, 1 + eps) * advantage)


def _cases_clipped():
    r = torch.tensor([0.5, 0.9, 1.0, 1.1, 1.5])
    return [
        ("A = +1 across the clip range", (r, torch.ones(5), 0.2), {}),
        ("A = -1 across the clip range", (r, -torch.ones(5), 0.2), {}),
        ("mixed advantages, eps 0.1", (r, torch.tensor([2.0, -1.0, 0.5, -0.5, 1.0]), 0.1), {}),
    ]


def _ref_clipped(ratio, advantage, eps):
    # The package's policy_loss on one token at a time is exactly that token's clipped loss.
    out = []
    for r, a in zip(ratio.tolist(), advantage.tolist()):
        loss, _ = policy_loss(
            torch.tensor([[math.log(r)]]),
            torch.zeros(1, 1),
            torch.tensor([a]),
            torch.ones(1, 1),
            clip_low=eps,
            aggregation="token_mean",
        )
        out.append(float(loss))
    return torch.tensor(out)


_declare(
    "clipped_token_loss",
    cases=_cases_clipped,
    reference=_ref_clipped,
    solution=_sol_clipped_token_loss,
    hint="loss = -min(r*A, clip(r, 1-eps, 1+eps)*A): the min, then the minus sign.",
)


def _sol_gae(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    adv, next_adv, next_value = [0.0] * len(rewards), 0.0, 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_value - values[t]
        next_adv = delta + gamma * lam * next_adv
        adv[t], next_value = next_adv, values[t]
    return adv


def _cases_gae():
    return [
        ("ALGORITHMS.md vector, gamma 1, lambda 0.95", ([0.0, 0.0, 1.0], [0.5, 0.6, 0.7], 1.0, 0.95), {}),
        ("lambda = 0 is the one-step TD error", ([0.0, 0.0, 1.0], [0.5, 0.6, 0.7], 1.0, 0.0), {}),
        ("gamma 0.9, lambda 1", ([0.5, -0.2, 1.0, 0.0], [0.1, 0.2, 0.3, 0.4], 0.9, 1.0), {}),
    ]


def _ref_gae(rewards, values, gamma, lam):
    r, v = torch.tensor([rewards], dtype=torch.float64), torch.tensor([values], dtype=torch.float64)
    adv, _ = gae(r, v, torch.ones_like(r), gamma, lam)
    return adv[0].tolist()


_declare(
    "gae",
    cases=_cases_gae,
    reference=_ref_gae,
    solution=_sol_gae,
    hint=(
        "Go backwards: delta_t = r_t + gamma*V_{t+1} - V_t with V after the last token = 0; A_t = delta_t"
        " + gamma*lam*A_{t+1}."
    ),
)


# --- notebook 03: GRPO's KL estimator ----------------------------------------------------------------


def _sol_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    log_r = ref_logp - logp
    return torch.exp(log_r) - 1 - log_r


def _cases_k3():
    return [
        ("ALGORITHMS.md: logp -1, ref -1.5", (torch.tensor([-1.0]), torch.tensor([-1.5])), {}),
        ("ALGORITHMS.md: logp -2, ref -1", (torch.tensor([-2.0]), torch.tensor([-1.0])), {}),
        ("equal log-probs give 0", (torch.tensor([-0.7, -3.0]), torch.tensor([-0.7, -3.0])), {}),
    ]


_declare(
    "k3",
    cases=_cases_k3,
    reference=lambda lp, ref: kl_estimate(lp, ref, "k3"),
    solution=_sol_k3,
    hint="With log r = ref_logp - logp: k3 = (r - 1) - log r, which is >= 0 for every token.",
)


# --- notebook 04: where each token's gradient goes; Dr. GRPO's loss ----------------------------------


def _sol_token_weights(lengths: list[int], advantages: list[float], aggregation: str, max_len: int) -> torch.Tensor:
    L = torch.tensor(lengths, dtype=torch.float64)
    A = torch.tensor(advantages, dtype=torch.float64)
    B = len(lengths)
    mask = (torch.arange(max_len).unsqueeze(0) < L.unsqueeze(1)).double()
    if aggregation == "seq_mean_token_mean":  # GRPO: 1/|o_i| inside, 1/B outside
        per_row = 1.0 / (B * L)
    elif aggregation == "token_mean":  # DAPO: one normaliser, every valid token of the batch
        per_row = torch.full((B,), 1.0 / float(L.sum()), dtype=torch.float64)
    else:  # Dr. GRPO: a constant, B * L_max
        per_row = torch.full((B,), 1.0 / (B * max_len), dtype=torch.float64)
    return (A * per_row).unsqueeze(1) * mask


def _cases_token_weights():
    return [
        (
            "GRPO (seq_mean_token_mean): two right answers of 2 and 4 tokens",
            ([2, 4], [1.0, 1.0], "seq_mean_token_mean", 6),
            {},
        ),
        (
            "token_mean: A = [+1, -1], lengths [2, 4] (the ALGORITHMS.md setup)",
            ([2, 4], [1.0, -1.0], "token_mean", 4),
            {},
        ),
        (
            "Dr. GRPO (seq_mean_token_sum_norm): L_max = 8, more than the longest",
            ([2, 4], [1.0, -1.0], "seq_mean_token_sum_norm", 8),
            {},
        ),
        ("GRPO: three sequences, mixed advantages", ([1, 3, 5], [0.5, -1.0, 1.5], "seq_mean_token_mean", 5), {}),
        ("token_mean: three sequences, mixed advantages", ([1, 3, 5], [0.5, -1.0, 1.5], "token_mean", 5), {}),
    ]


def _ref_token_weights(lengths, advantages, aggregation, max_len):
    # By autograd through the package's policy_loss, on-policy; positive: the token's log-prob is pushed up.
    return token_gradient_weights(lengths, advantages, aggregation, max_len)


_declare(
    "token_weights",
    cases=_cases_token_weights,
    reference=_ref_token_weights,
    solution=_sol_token_weights,
    hint=(
        "Weight = A_i times the aggregation's normaliser, on valid tokens only (0 on padding): "
        "seq_mean_token_mean 1/(B*|o_i|), token_mean 1/(sum of all lengths), seq_mean_token_sum_norm "
        "1/(B*max_len)."
    ),
)


def _sol_dr_grpo_loss(logp, old_logp, rewards, mask, group_size: int, max_len: int, eps: float = 0.2) -> torch.Tensor:
    g = rewards.view(-1, group_size)
    A = (g - g.mean(dim=1, keepdim=True)).reshape(-1, 1)  # no division by the std
    ratio = torch.exp(logp - old_logp)
    per_token = -torch.minimum(ratio * A, ratio.clamp(1 - eps, 1 + eps) * A)
    return (per_token * mask).sum() / (logp.shape[0] * max_len)  # a constant normaliser


def _cases_dr_grpo_loss():
    gen = torch.Generator().manual_seed(4)
    logp = -torch.rand(8, 6, generator=gen, dtype=torch.float64) * 3
    mask = (torch.arange(6).unsqueeze(0) < torch.tensor([2, 6, 3, 5, 1, 4, 6, 2]).unsqueeze(1)).double()
    drift = torch.randn(8, 6, generator=gen, dtype=torch.float64) * 0.3
    r = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 1])
    return [
        ("on-policy (old = new), one group of 8", (logp, logp.clone(), r, mask, 8, 8), {}),
        ("two groups of 4, the second 3 of 4 right; L_max 8", (logp, logp.clone(), r, mask, 4, 8), {}),
        ("off-policy: some ratios leave [0.8, 1.2] and are clipped", (logp + drift, logp, r, mask, 4, 10), {}),
        (
            "an all-right group adds nothing",
            (logp + drift, logp, torch.tensor([1.0, 1, 1, 1, 1, 0, 0, 0]), mask, 4, 6),
            {},
        ),
    ]


def _ref_dr_grpo_loss(logp, old_logp, rewards, mask, group_size, max_len, eps=0.2):
    adv = group_advantages(rewards.to(logp.dtype), group_size, scale="none")
    loss, _ = policy_loss(
        logp, old_logp, adv, mask, clip_low=eps, aggregation="seq_mean_token_sum_norm", max_len=max_len
    )
    return loss


_declare(
    "dr_grpo_loss",
    cases=_cases_dr_grpo_loss,
    reference=_ref_dr_grpo_loss,
    solution=_sol_dr_grpo_loss,
    hint=(
        "A = R - group mean (no std); per token -min(r*A, clip(r, 1-eps, 1+eps)*A); sum the valid tokens "
        "and divide by B * max_len, not by the lengths or the token count."
    ),
)


# --- notebook 05: DAPO's soft overlong penalty -------------------------------------------------------


def _sol_soft_overlong_penalty(lengths, max_len: int, cache_len: int) -> torch.Tensor:
    n = lengths.double()
    start = max_len - cache_len  # the expected maximum: free up to here
    ramp = (start - n) / cache_len  # 0 at start, -1 at max_len
    return torch.where(n <= start, torch.zeros_like(n), torch.where(n <= max_len, ramp, -torch.ones_like(n)))


def _cases_soft_overlong():
    return [
        ("L_max 20, L_cache 4: free, ramp, -1 beyond", (torch.tensor([10, 16, 17, 18, 20, 21, 30]), 20, 4), {}),
        ("the lab's setting: L_max 32, L_cache 8", (torch.tensor([0, 14, 24, 25, 28, 31, 32, 33]), 32, 8), {}),
        (
            "DAPO's paper: L_max 20480, L_cache 4096",
            (torch.tensor([8000, 16384, 18432, 20480, 20481]), 20480, 4096),
            {},
        ),
        ("L_cache = L_max: the ramp starts at 0 tokens", (torch.tensor([0, 2, 5, 8, 9]), 8, 8), {}),
    ]


_declare(
    "soft_overlong_penalty",
    cases=_cases_soft_overlong,
    reference=lambda n, L, c: soft_overlong_penalty(n, L, c),
    solution=_sol_soft_overlong_penalty,
    hint=(
        "0 up to max_len - cache_len; then ((max_len - cache_len) - n) / cache_len, reaching -1 at "
        "max_len; -1 beyond max_len."
    ),
)


# --- notebook 06: GSPO -------------------------------------------------------------------------------


def _seq_cases_tensors():
    logp = torch.tensor([[-1.0, -0.5, -2.0, 0.0], [-0.3, -1.2, 0.0, 0.0], [-0.7, -0.7, -0.7, -0.7]])
    old = torch.tensor([[-1.1, -0.4, -2.3, -9.0], [-0.3, -1.0, -5.0, -5.0], [-0.7, -0.6, -0.8, -0.7]])
    mask = torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    return logp, old, mask


def _sol_sequence_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mean_log_ratio = ((logp - old_logp) * mask).sum(dim=1) / mask.sum(dim=1)
    return torch.exp(mean_log_ratio)


def _cases_sequence_ratio():
    logp, old, mask = _seq_cases_tensors()
    lr = torch.log(torch.tensor([[1.10, 0.95, 1.30, 0.90]]))
    return [
        (
            "ALGORITHMS.md: token ratios [1.10, 0.95, 1.30, 0.90] give s = 1.051539",
            (lr, torch.zeros(1, 4), torch.ones(1, 4)),
            {},
        ),
        ("on-policy (logp == old_logp) gives s = 1", (logp, logp.clone(), mask), {}),
        ("padding (the 0s of the mask) must not count, and lengths differ", (logp, old, mask), {}),
    ]


def _ref_sequence_ratio(logp, old_logp, mask):
    return sequence_log_ratio(logp - old_logp, mask).exp()


_declare(
    "sequence_ratio",
    cases=_cases_sequence_ratio,
    reference=_ref_sequence_ratio,
    solution=_sol_sequence_ratio,
    hint=(
        "s_i = exp(mean over the valid tokens of (logp - old_logp)): the geometric mean of the token "
        "ratios. Sum with the mask, divide by mask.sum(1)."
    ),
)


def _sol_gspo_loss(logp, old_logp, advantages, mask, clip_low, clip_high):
    s = torch.exp(((logp - old_logp) * mask).sum(dim=1) / mask.sum(dim=1))
    return -torch.minimum(s * advantages, s.clamp(1 - clip_low, 1 + clip_high) * advantages).mean()


def _cases_gspo_loss():
    logp, old, mask = _seq_cases_tensors()
    lr = torch.log(torch.tensor([[1.10, 0.95, 1.30, 0.90]]))
    return [
        (
            "ALGORITHMS.md: s = 1.0515, A = +1, clip (3e-4, 4e-4): clipped to -1.0004",
            (lr, torch.zeros(1, 4), torch.tensor([1.0]), torch.ones(1, 4), 3e-4, 4e-4),
            {},
        ),
        (
            "ALGORITHMS.md: s = 1.0515, A = -1: not clipped, +1.0515",
            (lr, torch.zeros(1, 4), torch.tensor([-1.0]), torch.ones(1, 4), 3e-4, 4e-4),
            {},
        ),
        (
            "three sequences with padding and mixed advantages",
            (logp, old, torch.tensor([1.0, -0.5, 2.0]), mask, 3e-4, 4e-4),
            {},
        ),
        ("a wide clip range (0.2) clips nothing here", (logp, old, torch.tensor([1.0, -0.5, 2.0]), mask, 0.2, 0.2), {}),
    ]


def _ref_gspo_loss(logp, old_logp, advantages, mask, clip_low, clip_high):
    loss, _ = policy_loss(
        logp,
        old_logp,
        advantages,
        mask,
        clip_low=clip_low,
        clip_high=clip_high,
        ratio_level="sequence",
        aggregation="seq_mean_token_mean",
    )
    return loss


_declare(
    "gspo_loss",
    cases=_cases_gspo_loss,
    reference=_ref_gspo_loss,
    solution=_sol_gspo_loss,
    hint=(
        "One ratio per sequence (the sequence_ratio), clipped to [1 - clip_low, 1 + clip_high]; loss = "
        "-mean over sequences of min(s*A, clip(s)*A)."
    ),
)


# --- notebook 07: GFPO -------------------------------------------------------------------------------


def _sol_gfpo_keep(rewards: torch.Tensor, lengths: torch.Tensor, group_size: int, k: int) -> torch.Tensor:
    keep = torch.zeros(len(rewards), dtype=torch.bool)
    for start in range(0, len(rewards), group_size):
        order = torch.sort(lengths[start : start + group_size], stable=True).indices  # shortest first, ties by index
        keep[start + order[:k]] = True
    return keep


def _cases_gfpo_keep():
    R = torch.tensor([1.0, -1, -1, 1, -1, 1, -1, -1])
    L = torch.tensor([100, 400, 150, 200, 600, 120, 90, 300])
    return [
        ("ALGORITHMS.md: G = 8, k = 4 keeps {0, 2, 5, 6}", (R, L, 8, 4), {}),
        (
            "two groups of 4, keep 2 each (per group, not over the batch)",
            (torch.tensor([1.0, 0, 1, 0, 0, 0, 1, 1]), torch.tensor([5, 9, 7, 3, 20, 21, 22, 23]), 4, 2),
            {},
        ),
        ("ties go to the lower index", (torch.tensor([1.0, 0, 1, 0]), torch.tensor([4, 4, 4, 2]), 4, 2), {}),
        ("k = G keeps everything", (torch.tensor([1.0, 0, 1]), torch.tensor([3, 2, 1]), 3, 3), {}),
    ]


_declare(
    "gfpo_keep",
    cases=_cases_gfpo_keep,
    reference=lambda r, L, g, k: gfpo_keep(r, L, g, k, metric="length"),
    solution=_sol_gfpo_keep,
    hint=(
        "Per group of group_size consecutive rows, keep the k shortest; a stable sort breaks ties by the lower index."
    ),
)


def _sol_gfpo_advantages(rewards: torch.Tensor, keep: torch.Tensor, group_size: int) -> torch.Tensor:
    adv = torch.zeros_like(rewards)
    for start in range(0, len(rewards), group_size):
        r, m = rewards[start : start + group_size], keep[start : start + group_size].bool()
        kept = r[m]
        if kept.max() > kept.min():  # an all-equal kept set carries no signal: leave it at 0
            adv[start : start + group_size][m] = (kept - kept.mean()) / kept.std(unbiased=False)
    return adv


def _cases_gfpo_advantages():
    R = torch.tensor([1.0, -1, -1, 1, -1, 1, -1, -1])
    return [
        (
            "ALGORITHMS.md: kept {0, 2, 5, 6} gives [1, 0, -1, 0, 0, 1, -1, 0]",
            (R, torch.tensor([1, 0, 1, 0, 0, 1, 1, 0]).bool(), 8),
            {},
        ),
        (
            "ALGORITHMS.md: kept {0, 3, 4, 5} gives [0.577, 0, 0, 0.577, -1.732, 0.577, 0, 0]",
            (R, torch.tensor([1, 0, 0, 1, 1, 1, 0, 0]).bool(), 8),
            {},
        ),
        (
            "binary rewards, an all-correct kept set: every advantage 0, not NaN",
            (torch.tensor([1.0, 1, 0, 1, 0, 1, 0, 0]), torch.tensor([1, 1, 0, 1, 0, 1, 0, 0]).bool(), 8),
            {},
        ),
        (
            "two groups of 4, statistics over each group's kept ones only",
            (torch.tensor([1.0, 0, 0, 1, 0.5, 0.2, 0.9, 0.0]), torch.tensor([1, 1, 1, 0, 0, 1, 1, 1]).bool(), 4),
            {},
        ),
    ]


_declare(
    "gfpo_advantages",
    cases=_cases_gfpo_advantages,
    reference=lambda r, keep, g: gfpo_advantages(r, keep, g),
    solution=_sol_gfpo_advantages,
    hint=(
        "Mean and population std over each group's *kept* rewards only; dropped rows get 0, and an "
        "all-equal kept set gives 0 (not NaN)."
    ),
)


# --- notebook 08: pass@k and the spread across seeds -------------------------------------------------


def _sol_pass_at_k(n: int, c: int, k: int) -> float:
    if n - c < k:  # every way of choosing k of the n samples includes a right one
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _cases_pass_at_k():
    return [
        ("k = 1 is the share right: n 10, c 3", (10, 3, 1), {}),
        ("n 10, c 3, k 5", (10, 3, 5), {}),
        ("none right: n 8, c 0, k 4", (8, 0, 4), {}),
        ("fewer wrong than k: n 5, c 3, k 3", (5, 3, 3), {}),
        ("n 16, c 2, k 8 (not 1 - (1 - c/n)^k)", (16, 2, 8), {}),
    ]


def _ref_pass_at_k(n, c, k):
    from ...lab.metrics import pass_at_k  # lazily: the lab loads datasets and transformers

    return pass_at_k(n, c, k)


_declare(
    "pass_at_k",
    cases=_cases_pass_at_k,
    reference=_ref_pass_at_k,
    solution=_sol_pass_at_k,
    hint=(
        "Unbiased (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), the chance that k drawn without "
        "replacement are all wrong, subtracted from 1; it is 1 when n - c < k."
    ),
)


def _sol_standard_error(values: list[float]) -> float:
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))  # the sample std (n - 1)
    return std / math.sqrt(n)


def _cases_standard_error():
    return [
        ("three seeds' accuracies", ([0.75, 0.70, 0.80],), {}),
        ("[1, 2, 3, 4]", ([1.0, 2.0, 3.0, 4.0],), {}),
        ("two seeds", ([0.5, 0.6],), {}),
    ]


def _ref_standard_error(values):
    return mean_and_spread(values)["se"]


_declare(
    "standard_error",
    cases=_cases_standard_error,
    reference=_ref_standard_error,
    solution=_sol_standard_error,
    hint="The sample standard deviation (divide by n - 1) divided by sqrt(n).",
)


# --- notebook 09: a reward function that survives malformed text; zero-std groups --------------------


def _sol_sum3_reward_fixed(completion: str, answer: int, finished: bool) -> float:
    if not finished:  # truncated: the answer was never finished
        return 0.0
    text = completion.strip()
    if not text or not text[-1].isdigit():  # empty, or something after the answer
        return 0.0
    numbers = "".join(ch if ch.isdigit() else " " for ch in text).split()
    return 1.0 if int(numbers[-1]) == answer else 0.0


def _cases_sum3_reward_fixed():
    return [
        ("direct '121'", ("121", 121, True), {}),
        ("verbose '07+85=92,92+29=121'", ("07+85=92,92+29=121", 121, True), {}),
        ("short with filler '...92,121'", ("...92,121", 121, True), {}),
        ("wrong answer '92,120'", ("92,120", 121, True), {}),
        ("an int answer, not a string: '121' vs 121 must score 1", ("121", 121, True), {}),
        ("truncated (no EOS) '121' scores 0", ("121", 121, False), {}),
        ("empty completion scores 0", ("", 121, True), {}),
        ("no number at all '+=,.' scores 0", ("+=,.", 121, True), {}),
        ("stray symbol after the answer '121+' scores 0", ("121+", 121, True), {}),
        ("the answer inside a longer number '1210' scores 0", ("1210", 121, True), {}),
        ("the answer not last '121,5' scores 0", ("121,5", 121, True), {}),
    ]


def _ref_sum3_reward_fixed(completion, answer, finished):
    from ...lab.tasks import sum3_reward  # lazily: the lab loads datasets and transformers

    return sum3_reward(completion, answer, finished)


_declare(
    "sum3_reward_fixed",
    cases=_cases_sum3_reward_fixed,
    reference=_ref_sum3_reward_fixed,
    solution=_sol_sum3_reward_fixed,
    hint=(
        "0 if not finished; 0 if the stripped text is empty or does not end with a digit; else compare "
        "the last number, as an int, with the answer."
    ),
)


def _sol_zero_std_share(rewards: torch.Tensor, group_size: int) -> float:
    g = rewards.view(-1, group_size)
    all_equal = (g == g[:, :1]).all(dim=1)
    return all_equal.float().mean().item()


def _cases_zero_std_share():
    return [
        (
            "one all-right, one all-wrong, one mixed group",
            (torch.tensor([1.0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]), 4),
            {},
        ),
        ("every group mixed", (torch.tensor([1.0, 0, 0, 1, 0, 1]), 2), {}),
        ("rewards that are not 0/1", (torch.tensor([0.5, 0.5, 0.2, 0.7]), 2), {}),
        ("one group of 8, all wrong", (torch.zeros(8), 8), {}),
    ]


def _ref_zero_std_share(rewards, group_size):

    return 1.0 - dynamic_sampling_keep(rewards, group_size).float().mean().item()


_declare(
    "zero_std_share",
    cases=_cases_zero_std_share,
    reference=_ref_zero_std_share,
    solution=_sol_zero_std_share,
    hint=(
        "Groups are consecutive rows (rewards.view(-1, group_size)); a group counts when all its rewards "
        "are equal, all right OR all wrong; return the share of groups, not of samples."
    ),
)


# --- notebook 10: TRL's loss_type normalisers and scale_rewards --------------------------------------


def _sol_trl_loss(
    per_token_loss: torch.Tensor, mask: torch.Tensor, loss_type: str, max_completion_length: int
) -> torch.Tensor:
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(dim=1) / mask.sum(dim=1)).mean()
    if loss_type in ("bnpo", "dapo"):
        return (per_token_loss * mask).sum() / mask.sum()
    return (per_token_loss * mask).sum() / (per_token_loss.shape[0] * max_completion_length)  # dr_grpo


def _cases_trl_loss():
    losses = torch.tensor([[0.5, -1.0, 2.0, 99.0, 99.0], [1.5, 99.0, 99.0, 99.0, 99.0], [-0.5, 0.25, 1.0, 3.0, -2.0]])
    mask = torch.tensor([[1.0, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    return [
        ("grpo: the mean over sequences of each sequence's token mean", (losses, mask, "grpo", 8), {}),
        ("bnpo: one mean over every valid token of the batch", (losses, mask, "bnpo", 8), {}),
        ("dapo: on one process, the same normaliser as bnpo", (losses, mask, "dapo", 8), {}),
        (
            "dr_grpo: a constant, B * max_completion_length (8 here, more than the 5 columns)",
            (losses, mask, "dr_grpo", 8),
            {},
        ),
        ("dr_grpo with max_completion_length 20", (losses, mask, "dr_grpo", 20), {}),
    ]


_LAB_AGGREGATION = {
    "grpo": "seq_mean_token_mean",
    "bnpo": "token_mean",
    "dapo": "token_mean",
    "dr_grpo": "seq_mean_token_sum_norm",
}


def _ref_trl_loss(per_token_loss, mask, loss_type, max_completion_length):
    # On-policy (ratio 1) with per-token advantages -loss, the lab's policy_loss *is* the aggregation of
    # those per-token losses; tests/integration/test_trl_parity.py shows it equals TRL's _compute_loss for
    # each loss_type.
    zeros = torch.zeros_like(per_token_loss)
    loss, _ = policy_loss(
        zeros,
        zeros,
        -per_token_loss,
        mask,
        aggregation=_LAB_AGGREGATION[loss_type],
        max_len=max_completion_length if loss_type == "dr_grpo" else None,
    )
    return loss


_declare(
    "trl_loss",
    cases=_cases_trl_loss,
    reference=_ref_trl_loss,
    solution=_sol_trl_loss,
    hint=(
        "Mask first. grpo: per-sequence token sums / lengths, then the mean; bnpo and dapo: the masked "
        "sum over mask.sum(); dr_grpo: the masked sum over B * max_completion_length (not over the "
        "tokens)."
    ),
)


def _sol_trl_advantages(rewards: torch.Tensor, num_generations: int, scale_rewards: str) -> torch.Tensor:
    g = rewards.view(-1, num_generations)
    centred = (g - g.mean(dim=1, keepdim=True)).reshape(-1)
    if scale_rewards == "group":
        return centred / (g.std(dim=1, keepdim=True).expand_as(g).reshape(-1) + 1e-4)
    if scale_rewards == "batch":
        return centred / (rewards.std() + 1e-4)
    return centred  # "none" (Dr. GRPO)


def _cases_trl_advantages():
    r = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 0, 0.5, 0.9, 0.1, 0.3])
    return [
        ("scale_rewards='group' (GRPO)", (r, 4, "group"), {}),
        ("scale_rewards='batch': centre per group, divide by the std of the whole batch", (r, 4, "batch"), {}),
        ("scale_rewards='none' (Dr. GRPO)", (r, 4, "none"), {}),
        ("an all-correct group gets zeros under 'group'", (torch.tensor([1.0, 1, 1, 1, 1, 0, 0, 1]), 4, "group"), {}),
        ("groups of 2 under 'batch'", (torch.tensor([1.0, 0, 0.5, 0.5, 0.2, 0.8]), 2, "batch"), {}),
    ]


_declare(
    "trl_advantages",
    cases=_cases_trl_advantages,
    reference=lambda r, g, s: group_advantages(r, g, scale=s),
    solution=_sol_trl_advantages,
    hint=(
        "Always centre on the *group* mean; then divide by std + 1e-4: the group's std for 'group', the "
        "std of all rewards for 'batch', nothing for 'none'. torch.std is the unbiased one, as in TRL."
    ),
)

