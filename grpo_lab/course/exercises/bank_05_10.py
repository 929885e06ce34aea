"""The exercises of notebooks 05 to 10: DAPO's overlong penalty, GSPO, GFPO, pass@k and the standard
error, a robust reward, zero-std groups, and TRL's loss types and reward scaling (see ``bank.py``).
"""

from __future__ import annotations

import math

import torch

from ...core.advantages import dynamic_sampling_keep, gfpo_advantages, gfpo_keep, group_advantages
from ...core.losses import policy_loss, sequence_log_ratio
from ...core.rewards import soft_overlong_penalty
from ...study.stats import mean_and_spread
from .bank import declare

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


declare(
    "soft_overlong_penalty",
    _cases_soft_overlong,
    lambda n, L, c: soft_overlong_penalty(n, L, c),
    _sol_soft_overlong_penalty,
    "0 up to max_len - cache_len; then ((max_len - cache_len) - n) / cache_len, reaching -1 at max_len; -1 beyond "
    "max_len.",
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


declare(
    "sequence_ratio",
    _cases_sequence_ratio,
    _ref_sequence_ratio,
    _sol_sequence_ratio,
    "s_i = exp(mean over the valid tokens of (logp - old_logp)): the geometric mean of the token ratios. Sum with "
    "the mask, divide by mask.sum(1).",
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


declare(
    "gspo_loss",
    _cases_gspo_loss,
    _ref_gspo_loss,
    _sol_gspo_loss,
    "One ratio per sequence (the sequence_ratio), clipped to [1 - clip_low, 1 + clip_high]; loss = -mean over "
    "sequences of min(s*A, clip(s)*A).",
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


declare(
    "gfpo_keep",
    _cases_gfpo_keep,
    lambda r, L, g, k: gfpo_keep(r, L, g, k, metric="length"),
    _sol_gfpo_keep,
    "Per group of group_size consecutive rows, keep the k shortest; a stable sort breaks ties by the lower index.",
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


declare(
    "gfpo_advantages",
    _cases_gfpo_advantages,
    lambda r, keep, g: gfpo_advantages(r, keep, g),
    _sol_gfpo_advantages,
    "Mean and population std over each group's *kept* rewards only; dropped rows get 0, and an all-equal kept set "
    "gives 0 (not NaN).",
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


declare(
    "pass_at_k",
    _cases_pass_at_k,
    _ref_pass_at_k,
    _sol_pass_at_k,
    "Unbiased (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), the chance that k drawn without replacement are all "
    "wrong, subtracted from 1; it is 1 when n - c < k.",
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


declare(
    "standard_error",
    _cases_standard_error,
    _ref_standard_error,
    _sol_standard_error,
    "The sample standard deviation (divide by n - 1) divided by sqrt(n).",
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


declare(
    "sum3_reward_fixed",
    _cases_sum3_reward_fixed,
    _ref_sum3_reward_fixed,
    _sol_sum3_reward_fixed,
    "0 if not finished; 0 if the stripped text is empty or does not end with a digit; else compare the last "
    "number, as an int, with the answer.",
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


declare(
    "zero_std_share",
    _cases_zero_std_share,
    _ref_zero_std_share,
    _sol_zero_std_share,
    "Groups are consecutive rows (rewards.view(-1, group_size)); a group counts when all its rewards are equal, "
    "all right OR all wrong; return the share of groups, not of samples.",
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


declare(
    "trl_loss",
    _cases_trl_loss,
    _ref_trl_loss,
    _sol_trl_loss,
    "Mask first. grpo: per-sequence token sums / lengths, then the mean; bnpo and dapo: the masked sum over "
    "mask.sum(); dr_grpo: the masked sum over B * max_completion_length (not over the tokens).",
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


declare(
    "trl_advantages",
    _cases_trl_advantages,
    lambda r, g, s: group_advantages(r, g, scale=s),
    _sol_trl_advantages,
    "Always centre on the *group* mean; then divide by std + 1e-4: the group's std for 'group', the std of all "
    "rewards for 'batch', nothing for 'none'. torch.std is the unbiased one, as in TRL.",
)
