"""The exercises of notebooks 00 to 04: group advantages, the masked mean, REINFORCE and RLOO, PPO's
clip and GAE, the k3 KL estimator, token weights and Dr. GRPO's loss (see ``bank.py`` for the parts of one).
"""

from __future__ import annotations

import math

import torch

from ...core.advantages import gae, group_advantages, rloo_advantages
from ...core.kl import kl_estimate
from ...core.losses import masked_mean, policy_loss, token_gradient_weights
from .bank import declare

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


declare(
    "group_advantages",
    _cases_group_advantages,
    _ref_group_advantages,
    _sol_group_advantages,
    "Centre each group on its mean; divide by its std (+1e-4) only when use_std. Groups are consecutive rows: "
    "rewards.view(-1, group_size).",
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


declare(
    "masked_mean",
    _cases_masked_mean,
    lambda x, m: masked_mean(x, m),
    _sol_masked_mean,
    "Multiply by the mask before summing, and divide by the number of valid tokens, not by x.numel().",
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


declare(
    "reinforce_loss",
    _cases_reinforce,
    _ref_reinforce,
    _sol_reinforce_loss,
    "The loss is minus the mean of (R - b) * log pi(y|x): minimising it raises log pi where R > b.",
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


declare(
    "rloo_advantages",
    _cases_rloo,
    lambda r, g: rloo_advantages(r, g),
    _sol_rloo_advantages,
    "The baseline for sample i is the mean of the *other* G-1 rewards of its group.",
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


declare(
    "clipped_token_loss",
    _cases_clipped,
    _ref_clipped,
    _sol_clipped_token_loss,
    "loss = -min(r*A, clip(r, 1-eps, 1+eps)*A): the min, then the minus sign.",
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


declare(
    "gae",
    _cases_gae,
    _ref_gae,
    _sol_gae,
    "Go backwards: delta_t = r_t + gamma*V_{t+1} - V_t with V after the last token = 0; A_t = delta_t + "
    "gamma*lam*A_{t+1}.",
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


declare(
    "k3",
    _cases_k3,
    lambda lp, ref: kl_estimate(lp, ref, "k3"),
    _sol_k3,
    "With log r = ref_logp - logp: k3 = (r - 1) - log r, which is >= 0 for every token.",
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


declare(
    "token_weights",
    _cases_token_weights,
    _ref_token_weights,
    _sol_token_weights,
    "Weight = A_i times the aggregation's normaliser, on valid tokens only (0 on padding): seq_mean_token_mean "
    "1/(B*|o_i|), token_mean 1/(sum of all lengths), seq_mean_token_sum_norm 1/(B*max_len).",
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


declare(
    "dr_grpo_loss",
    _cases_dr_grpo_loss,
    _ref_dr_grpo_loss,
    _sol_dr_grpo_loss,
    "A = R - group mean (no std); per token -min(r*A, clip(r, 1-eps, 1+eps)*A); sum the valid tokens and divide "
    "by B * max_len, not by the lengths or the token count.",
)
