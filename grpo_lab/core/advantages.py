"""Advantage estimators: who gets pushed up, who gets pushed down, and by how much.

Shapes: per-sequence values are ``[B]``, per-token values ``[B, T]`` with a completion mask.
Groups are consecutive rows: ``B = n_prompts * group_size`` and rows ``g*G .. g*G+G-1`` share a
prompt. Formulas and test vectors: ``docs/ALGORITHMS.md`` sections 1-4 and 7.
"""

from __future__ import annotations

import torch

from .checks import (
    check_choice,
    check_float,
    check_group_size,
    check_mask,
    check_number,
    check_positive_int,
    check_rewards,
    check_same_shape,
    check_tensor,
)

SCALES = ("group", "batch", "none")
GFPO_METRICS = ("length", "token_efficiency")


def _grouped(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    return rewards.view(-1, group_size)


def group_advantages(
    rewards: torch.Tensor,
    group_size: int,
    scale: str = "group",
    eps: float = 1e-4,
    unbiased: bool = True,
) -> torch.Tensor:
    """GRPO's group-relative advantage (DeepSeekMath, outcome supervision): ``[B] -> [B]``.

    ``A_i = (R_i - mean(R_group)) / (std + eps)``.

    - ``scale="group"``: std over the group (GRPO; TRL ``scale_rewards="group"``).
    - ``scale="batch"``: mean per group, std over the whole batch (TRL ``scale_rewards="batch"``).
    - ``scale="none"``: no division at all (Dr. GRPO, Liu et al. 2025): ``A_i = R_i - mean``.

    ``unbiased=True`` uses the N-1 std (``torch.std``'s and TRL's default); ``eps=1e-4`` is TRL's
    constant. A group whose rewards are all equal gets advantages of exactly 0, never NaN.
    """
    rewards = check_rewards("rewards", rewards, ndim=1)
    G = check_group_size(rewards, group_size, minimum=2 if scale != "none" else 1)
    check_choice("scale", scale, SCALES)
    eps = check_number("eps", eps, low=0.0)
    groups = _grouped(rewards, G)
    # An all-equal group has nothing to learn from: its advantages are exactly 0. Test equality
    # directly, since the float mean of equal values can miss them by an ulp (0.1 * 7 / 7).
    constant = (groups == groups[:, :1]).all(dim=1, keepdim=True).expand_as(groups).reshape(-1)
    centred = (groups - groups.mean(dim=1, keepdim=True)).reshape(-1).masked_fill(constant, 0.0)
    if scale == "none":
        return centred
    if scale == "group":
        std = groups.std(dim=1, unbiased=unbiased, keepdim=True).expand_as(groups).reshape(-1)
    else:
        if rewards.numel() < 2:
            raise ValueError(f"rewards must hold at least 2 values for scale='batch', got {rewards.numel()}")
        std = rewards.std(unbiased=unbiased).expand_as(rewards)
    # centred is 0 wherever std is 0, so the clamp only keeps eps=0 from computing 0/0.
    return centred / (std + eps).clamp_min(torch.finfo(std.dtype).tiny)


def rloo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """REINFORCE leave-one-out (Ahmadian et al. 2024): ``A_i = R_i - mean_{j != i} R_j``, ``[B] -> [B]``.

    Equal to ``G/(G-1) * (R_i - mean(R))``; undefined for ``group_size = 1``.
    """
    rewards = check_rewards("rewards", rewards, ndim=1)
    G = check_group_size(rewards, group_size, minimum=2)
    groups = _grouped(rewards, G)
    loo_mean = (groups.sum(dim=1, keepdim=True) - groups) / (G - 1)
    return (groups - loo_mean).reshape(-1)


def process_advantages(
    step_rewards: list[list[float]], step_ends: list[list[int]], lengths: list[int], eps: float = 0.0
) -> list[torch.Tensor]:
    """GRPO with process supervision (DeepSeekMath section 4.1.3), for one group of responses.

    ``step_rewards[i][j]`` is the PRM reward of step j of response i, and ``step_ends[i][j]`` the
    0-based index of the token that ends it. All steps of all responses are normalised together
    with the sample std; a token's advantage is the sum of the normalised rewards of the steps
    that end at or after it. Returns one ``[lengths[i]]`` tensor per response.
    """
    if not (len(step_rewards) == len(step_ends) == len(lengths)) or len(lengths) == 0:
        raise ValueError(
            "step_rewards, step_ends and lengths must have one entry per response, got "
            f"{len(step_rewards)}, {len(step_ends)} and {len(lengths)}"
        )
    flat = []
    for i, (rs, ends, n) in enumerate(zip(step_rewards, step_ends, lengths)):
        if len(rs) != len(ends):
            raise ValueError(
                f"step_rewards[{i}] and step_ends[{i}] must have the same length, got {len(rs)} and {len(ends)}"
            )
        if any(not 0 <= e < n for e in ends):
            raise ValueError(f"step_ends[{i}] must lie in [0, {n}), got {ends}")
        flat.extend(rs)
    all_r = check_float("step_rewards", torch.tensor(flat, dtype=torch.float64), ndim=1)
    if all_r.numel() < 2:
        raise ValueError(f"step_rewards must hold at least 2 steps in all, got {all_r.numel()}")
    if (all_r == all_r[0]).all():
        normed = torch.zeros_like(all_r)  # equal step rewards: nothing to prefer
    else:
        normed = (all_r - all_r.mean()) / (all_r.std() + eps)
    out, k = [], 0
    for ends, n in zip(step_ends, lengths):
        adv = torch.zeros(n, dtype=torch.float64)
        for e in ends:
            norm = normed[k]
            adv[: e + 1] += norm  # every token at or before the step's end sees this step
            k += 1
        out.append(adv)
    return out


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 0.95
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016), per token: ``[B, T] -> ([B, T], [B, T])``.

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` with ``V = 0`` after the last valid token, and
    ``A_t = delta_t + gamma * lam * A_{t+1}``. Returns ``(advantages, returns)`` with
    ``returns = advantages + values`` (computed before any whitening), both zero on padding.
    ``mask`` must be a prefix of ones per row (a completion, then padding).
    """
    rewards = check_float("rewards", rewards, ndim=2)
    values = check_float("values", values, ndim=2)
    check_same_shape("values", values, "rewards", rewards)
    mask = check_mask("mask", mask, "rewards", rewards)
    gamma = check_number("gamma", gamma, low=0.0, high=1.0)
    lam = check_number("lam", lam, low=0.0, high=1.0)
    if (mask[:, 1:] > mask[:, :-1]).any():
        raise ValueError("mask must be ones then zeros in every row (no gaps), got a row with a 0 before a 1")
    B, T = rewards.shape
    adv = torch.zeros_like(rewards)
    next_adv = torch.zeros(B, dtype=rewards.dtype)
    next_value = torch.zeros(B, dtype=rewards.dtype)
    for t in reversed(range(T)):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        a = (delta + gamma * lam * next_adv) * m
        adv[:, t] = a
        # Padding carries nothing back: the value after the final token is 0 (terminal state).
        next_adv = a
        next_value = values[:, t] * m
    returns = (adv + values) * mask
    return adv, returns


def whiten(
    x: torch.Tensor, mask: torch.Tensor | None = None, shift_mean: bool = True, unbiased: bool = False
) -> torch.Tensor:
    """``(x - mean) / sqrt(var + 1e-8)`` over the valid entries (lm-human-preferences' whitening).

    Population variance by default, as TF's ``tf.nn.moments`` in the original RLHF code.
    ``shift_mean=False`` adds the mean back (used for rewards). Padding comes back as 0.
    """
    x = check_float("x", x)
    if mask is None:
        m = torch.ones_like(x)
    else:
        m = check_mask("mask", mask, "x", x)
    n = m.sum()
    if n < (2 if unbiased else 1):
        raise ValueError(f"mask must select at least {2 if unbiased else 1} value(s) to whiten, got {int(n)}")
    mean = (x * m).sum() / n
    var = (((x - mean) * m) ** 2).sum() / (n - 1 if unbiased else n)
    out = (x - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        out = out + mean
    return out * m


def dynamic_sampling_keep(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """DAPO's dynamic-sampling filter (Yu et al. 2025, eq. 11 constraint): ``[B] -> [B // G]`` bool.

    True where a group's rewards are not all equal (``0 < #correct < G`` for binary rewards):
    only those groups carry a non-zero advantage. The filter looks at nothing but that.
    """
    rewards = check_rewards("rewards", rewards, ndim=1)
    G = check_group_size(rewards, group_size, minimum=2)
    groups = _grouped(rewards, G)
    return (groups != groups[:, :1]).any(dim=1)


def gfpo_keep(
    rewards: torch.Tensor, lengths: torch.Tensor, group_size: int, k: int | torch.Tensor, metric: str = "length"
) -> torch.Tensor:
    """GFPO's filter (Shrivastava et al. 2025): keep the best ``k`` of each group, ``[B] -> [B]`` bool.

    - ``metric="length"``: the k shortest responses.
    - ``metric="token_efficiency"``: the k highest ``R_i / |o_i|``.

    ``k`` is an int (same for every group) or a ``[B // G]`` tensor of per-group ks (adaptive
    difficulty). Ties go to the lower index, so the choice is deterministic.
    """
    rewards = check_rewards("rewards", rewards, ndim=1)
    lengths = _check_lengths(lengths, rewards)
    G = check_group_size(rewards, group_size)
    check_choice("metric", metric, GFPO_METRICS)
    n_groups = rewards.shape[0] // G
    if isinstance(k, torch.Tensor):
        if k.shape != (n_groups,):
            raise ValueError(
                f"k must be an int or a tensor of shape ({n_groups},) (one per group), got {tuple(k.shape)}"
            )
        if k.is_floating_point() and not (k == k.round()).all():
            raise ValueError(f"k must hold whole numbers, got {k.tolist()}")
        ks = k.to(torch.long)
    else:
        ks = torch.full((n_groups,), check_positive_int("k", k, maximum=G), dtype=torch.long)
    if (ks < 1).any() or (ks > G).any():
        raise ValueError(
            f"k must satisfy 1 <= k <= group_size={G}, got {ks.tolist() if ks.numel() > 1 else int(ks[0])}"
        )
    if metric == "length":
        score = -lengths.to(torch.float64)  # higher is better: shorter
    else:
        score = rewards.to(torch.float64) / lengths.to(torch.float64)
    score = score.view(n_groups, G)
    # Stable descending sort: equal scores keep index order, so ties go to the lower index.
    order = torch.sort(score, dim=1, descending=True, stable=True).indices
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(G).expand(n_groups, G).contiguous())
    return (rank < ks.unsqueeze(1)).reshape(-1)


def _check_lengths(lengths, rewards: torch.Tensor) -> torch.Tensor:
    lengths = check_tensor("lengths", lengths, ndim=1)
    check_same_shape("lengths", lengths, "rewards", rewards)
    if lengths.is_floating_point() and not torch.isfinite(lengths).all():
        raise ValueError("lengths must be finite, got NaN or infinity")
    if (lengths <= 0).any():
        raise ValueError(f"lengths must all be positive, got min {lengths.min().item()}")
    return lengths


def gfpo_advantages(rewards: torch.Tensor, keep: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """GFPO advantages: mean and (population) std over the *retained* responses only; 0 for the rest.

    ``A_i = m_i * (R_i - mu_S) / (sigma_S + eps)``, ``[B] -> [B]`` (GFPO paper, eq. 3). With binary
    rewards a retained set of all-correct answers has ``sigma_S = 0`` and every advantage is 0.
    """
    rewards = check_rewards("rewards", rewards, ndim=1)
    G = check_group_size(rewards, group_size)
    keep = check_mask("keep", keep, "rewards", rewards)
    eps = check_number("eps", eps, low=0.0)
    groups, m = _grouped(rewards, G), _grouped(keep, G)
    n = m.sum(dim=1, keepdim=True)
    if (n == 0).any():
        raise ValueError("keep must retain at least one response in every group, got a group with none")
    mu = (groups * m).sum(dim=1, keepdim=True) / n
    sigma = torch.sqrt((((groups - mu) * m) ** 2).sum(dim=1, keepdim=True) / n)
    # A retained set of equal rewards (e.g. only correct answers) carries no signal: exactly 0.
    kept_max = groups.masked_fill(m == 0, float("-inf")).amax(dim=1, keepdim=True)
    kept_min = groups.masked_fill(m == 0, float("inf")).amin(dim=1, keepdim=True)
    centred = ((groups - mu) * m).masked_fill((kept_max == kept_min).expand_as(groups), 0.0)
    adv = centred / (sigma + eps).clamp_min(torch.finfo(sigma.dtype).tiny)
    return adv.reshape(-1)


def reward_quartiles(mean_rewards_seen: torch.Tensor) -> tuple[float, float, float]:
    """The 25th, 50th and 75th percentiles of the per-prompt mean rewards seen so far.

    GFPO's Algorithm 2 keeps them in a t-digest; at the lab's scale the exact quantiles of the
    full history are cheap, so we use those.
    """
    x = check_float("mean_rewards_seen", mean_rewards_seen, ndim=1)
    if x.numel() == 0:
        raise ValueError("mean_rewards_seen must hold at least one value, got an empty tensor")
    q = torch.quantile(x.to(torch.float64), torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    return float(q[0]), float(q[1]), float(q[2])


def adaptive_k(
    mean_rewards: torch.Tensor,
    quartiles: tuple[float, float, float],
    k_by_bucket: tuple[int, int, int, int] = (8, 8, 6, 4),
) -> torch.Tensor:
    """Adaptive-difficulty GFPO (Algorithm 2): the number of responses to keep per prompt.

    A prompt's difficulty is its group's mean reward. Buckets by the running quartiles
    ``(q25, q50, q75)``: very hard (< q25), hard (< q50), medium (< q75), easy (>= q75), keeping
    ``k_by_bucket`` responses respectively (the paper's 8, 8, 6, 4 out of G = 16): easy prompts
    keep fewest, so the length pressure is strongest where the answer is already right.
    """
    mean_rewards = check_float("mean_rewards", mean_rewards, ndim=1)
    if len(quartiles) != 3 or not (quartiles[0] <= quartiles[1] <= quartiles[2]):
        raise ValueError(f"quartiles must be three non-decreasing numbers (q25, q50, q75), got {quartiles}")
    if len(k_by_bucket) != 4:
        raise ValueError(f"k_by_bucket must be four positive ints, got {k_by_bucket}")
    for i, k in enumerate(k_by_bucket):
        check_positive_int(f"k_by_bucket[{i}]", k)
    bounds = torch.tensor(quartiles, dtype=mean_rewards.dtype)
    bucket = torch.bucketize(mean_rewards, bounds, right=True)  # 0: < q25, 1: [q25, q50), 2: [q50, q75), 3: >= q75
    return torch.tensor(k_by_bucket, dtype=torch.long)[bucket]
