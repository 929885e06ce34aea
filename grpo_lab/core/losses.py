"""Policy, value and entropy terms: what the optimiser actually minimises.

Shapes: ``[B, T]`` per token with a 0/1 completion ``mask``; ``[B]`` per sequence. Losses are
``-J`` (objectives are maximised). Formulas and test vectors: ``docs/ALGORITHMS.md``.

How the options map onto TRL's ``GRPOTrainer`` (one process, one optimiser step per batch):

=========================  ===============================  ===================================
TRL ``loss_type``          ``aggregation=``                 normaliser
=========================  ===============================  ===================================
``grpo``                   ``"seq_mean_token_mean"``        mean over rows of (token sum / row length)
``bnpo``, ``dapo``         ``"token_mean"``                 all valid tokens in the batch
``dr_grpo``                ``"seq_mean_token_sum_norm"``    ``B * max_len`` (``max_completion_length``)
=========================  ===============================  ===================================

and TRL's ``importance_sampling_level="sequence"`` is ``ratio_level="sequence"``.
"""

from __future__ import annotations

import math

import torch

from .checks import (
    check_choice,
    check_float,
    check_mask,
    check_number,
    check_positive_int,
    check_same_shape,
    check_tensor,
)

RATIO_LEVELS = ("token", "sequence", "sequence_token")
ROLLOUT_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
"""How the sampler/trainer mismatch is corrected: TRL 1.16's ``vllm_importance_sampling_mode`` values."""
AGGREGATIONS = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")
CLIP_STATS = (
    "clip_frac_low", "clip_frac_high", "clip_frac", "dual_clip_frac", "ratio_mean", "ratio_min", "ratio_max",
)  # fmt: skip
"""The stats ``clip_stats`` returns."""
POLICY_LOSS_STATS = CLIP_STATS + ("approx_kl",)
"""The stats ``policy_loss`` always returns (``kl_mean`` is added when ``kl`` is given)."""


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` where ``mask`` is 1, over ``dim`` (all of it when None)."""
    x = check_tensor("x", x)
    mask = check_mask("mask", mask, "x", x)
    kept = torch.where(mask.bool(), x, 0)  # not x * mask: -inf * 0 is NaN, and padding may hold -inf
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` where ``mask`` is 1, over ``dim`` (all of it when None).

    Raises ``ValueError`` when the mask selects nothing at all. Along ``dim``, a slice with nothing
    selected (a padded-out row, say) gets NaN, as torch's own reductions over nothing do
    (``torch.tensor([]).mean()``): the other slices' means are still defined and are returned.
    """
    x = check_tensor("x", x)
    mask = check_mask("mask", mask, "x", x)
    if mask.sum() == 0:
        raise ValueError("mask must select at least one value for a mean, but the mask is empty")
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(x, mask, dim) / count  # 0 / 0 = NaN on an empty slice


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` over the last dimension: ``[..., V] -> [...]`` (nats).

    Computed as ``logsumexp(z) - sum(p * z)``, which stays finite for large logits; a logit of
    ``-inf`` (a token masked out of the vocabulary) has ``p = 0`` and adds nothing, to the value or its gradient.
    """
    logits = check_tensor("logits", logits)
    if not logits.is_floating_point() or logits.dim() < 1 or logits.shape[-1] < 1:
        raise ValueError(
            "logits must be a floating-point tensor with a last (vocabulary) dimension, "
            f"got {tuple(logits.shape)} {logits.dtype}"
        )
    p = torch.softmax(logits, dim=-1)
    # 0 where p = 0 before the product, not after it: the product's gradient there would be 0 * -inf = NaN
    finite = torch.where(p > 0, logits, 0)
    return torch.logsumexp(logits, dim=-1) - (p * finite).sum(dim=-1)


def sequence_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's sequence log-ratio ``log s_i = mean_t (log pi_theta - log pi_old)`` over valid tokens:
    ``[B, T] -> [B]``. ``exp`` of it is the geometric mean of the token ratios (GSPO eq. 7).
    A row with no valid token gets NaN (a mean over nothing)."""
    log_ratio = check_tensor("log_ratio", log_ratio, ndim=2)
    mask = check_mask("mask", mask, "log_ratio", log_ratio)
    return torch.where(mask.bool(), log_ratio, 0).sum(dim=1) / mask.sum(dim=1)


def clip_masks(
    ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the clipped objective's clip acts (its gradient is zero): ``(low, high)`` bool tensors.

    ``low``: ``w < 1 - clip_low`` with ``A < 0``; ``high``: ``w > 1 + clip_high`` with ``A > 0``
    (``clip_high=None``: symmetric). ``advantages`` broadcasts against ``ratio``.
    """
    clip_low = check_number("clip_low", clip_low, low=0.0)
    clip_high = clip_low if clip_high is None else check_number("clip_high", clip_high, low=0.0)
    return (ratio < 1.0 - clip_low) & (advantages < 0), (ratio > 1.0 + clip_high) & (advantages > 0)


def _finite_where(name: str, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """A floating-point ``x`` that is finite where ``valid``, returned with 0 elsewhere: padding may
    hold anything (-inf log-probs are common) and must reach neither a sum nor a gradient."""
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    bad = valid & ~torch.isfinite(x)
    if bad.any():
        raise ValueError(f"{name} must be finite where mask is 1, got {int(bad.sum())} NaN or infinite value(s)")
    return torch.where(valid, x, 0)


def _check_advantages(advantages: object, logp: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[B]`` or ``[B, T]`` advantages, returned as ``[B, 1]`` or ``[B, T]`` to broadcast against ``logp``."""
    advantages = check_tensor("advantages", advantages, ndim=(1, 2))
    if advantages.dim() == 1:
        advantages = check_float("advantages", advantages)
        if advantages.shape[0] != logp.shape[0]:
            raise ValueError(
                f"advantages must have shape ({logp.shape[0]},) or {tuple(logp.shape)}, got {tuple(advantages.shape)}"
            )
        return advantages.unsqueeze(1)
    check_same_shape("advantages", advantages, "logp", logp)
    return _finite_where("advantages", advantages, valid)


def _check_nonempty(mask: torch.Tensor) -> None:
    if mask.sum() == 0:
        raise ValueError("mask must select at least one token, got an all-zero mask")


def _check_full_rows(mask: torch.Tensor, what: str, fix: str) -> None:
    empty = mask.sum(dim=1) == 0
    if empty.any():
        raise ValueError(
            f"mask has {int(empty.sum())} empty row(s): {what} takes a mean over each row's tokens, "
            f"undefined there; {fix}"
        )


def per_token_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float | None,
    ratio_level: str,
    dual_clip: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The clipped surrogate loss per token, before any aggregation (the arguments as in ``policy_loss``,
    which declares their defaults):

    ``l_t = -min(w_t * A_t, clip(w_t, 1 - clip_low, 1 + clip_high) * A_t)``, capped at ``-dual_clip * A_t``
    where ``A_t < 0``.

    Returns ``(per_token, ratio, dual_clipped)``, each ``[B, T]``: the loss, the importance weight
    ``w`` and where the dual clip acted. What ``logp`` and ``old_logp`` hold under ``mask = 0`` does
    not matter; the values there are finite and meaningless (``aggregate`` leaves them out).
    """
    logp = check_tensor("logp", logp, ndim=2)
    old_logp = check_tensor("old_logp", old_logp, ndim=2)
    check_same_shape("old_logp", old_logp, "logp", logp)
    mask = check_mask("mask", mask, "logp", logp)
    valid = mask.bool()
    logp = _finite_where("logp", logp, valid)
    old_logp = _finite_where("old_logp", old_logp, valid)
    adv = _check_advantages(advantages, logp, valid)
    clip_low = check_number("clip_low", clip_low, low=0.0)
    clip_high = clip_low if clip_high is None else check_number("clip_high", clip_high, low=0.0)
    check_choice("ratio_level", ratio_level, RATIO_LEVELS)
    if dual_clip is not None:
        dual_clip = check_number("dual_clip", dual_clip, low=1.0, low_open=True)
    _check_nonempty(mask)
    if ratio_level != "token":
        _check_full_rows(mask, f"ratio_level={ratio_level!r}", "drop those rows")

    log_ratio = logp - old_logp
    if ratio_level == "token":
        log_w = log_ratio
    else:
        # GSPO: the geometric mean of the token ratios, i.e. the mean log-ratio over valid tokens.
        seq_log_ratio = sequence_log_ratio(log_ratio, mask).unsqueeze(1)
        if ratio_level == "sequence":
            log_w = seq_log_ratio.expand_as(logp)
        else:
            log_w = logp - logp.detach() + seq_log_ratio.detach()
    ratio = torch.exp(log_w)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    dual_clipped = torch.zeros_like(mask, dtype=torch.bool)
    if dual_clip is not None:
        cap = -dual_clip * adv
        dual_clipped = (adv < 0) & (per_token > cap)
        per_token = torch.where(adv < 0, torch.minimum(per_token, cap), per_token)
    return per_token, ratio, dual_clipped


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: str, max_len: int | None = None) -> torch.Tensor:
    """Per-token losses ``[B, T]`` -> one scalar, over the tokens where ``mask`` is 1 (the shape of
    verl's ``agg_loss(loss_mat, loss_mask, loss_agg_mode)``; the modes as in the module docstring):

    - ``"seq_mean_token_mean"``: the mean over rows of each row's token mean (GRPO, GSPO);
    - ``"token_mean"``: the sum over all valid tokens / their number (DAPO, GFPO);
    - ``"seq_mean_token_sum_norm"``: the sum over all valid tokens / ``(B * max_len)`` (Dr. GRPO).

    Non-finite losses under the mask are kept (the caller's guard must see them); what padding
    holds is ignored.
    """
    per_token = check_tensor("per_token", per_token, ndim=2)
    if not per_token.is_floating_point():
        raise ValueError(f"per_token must be a floating-point tensor, got dtype {per_token.dtype}")
    mask = check_mask("mask", mask, "per_token", per_token)
    check_choice("aggregation", mode, AGGREGATIONS)
    _check_nonempty(mask)
    lengths = mask.sum(dim=1)
    if mode == "seq_mean_token_mean":
        _check_full_rows(mask, "aggregation='seq_mean_token_mean'", "drop those rows or use aggregation='token_mean'")
    if mode == "seq_mean_token_sum_norm":
        if max_len is None:
            raise ValueError(
                "max_len must be given for aggregation='seq_mean_token_sum_norm' (Dr. GRPO's constant normaliser)"
            )
        check_positive_int("max_len", max_len)
        if lengths.max() > max_len:
            raise ValueError(f"max_len must be >= the longest completion ({int(lengths.max())} tokens), got {max_len}")
    kept = torch.where(mask.bool(), per_token, 0)
    if mode == "seq_mean_token_mean":
        return (kept.sum(dim=1) / lengths).mean()
    if mode == "token_mean":
        return kept.sum() / mask.sum()
    return kept.sum() / (per_token.shape[0] * max_len)


@torch.no_grad()
def clip_stats(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    dual_clipped: torch.Tensor | None = None,
) -> dict[str, float]:
    """How much the clip acted, over the tokens where ``mask`` is 1: the floats of ``CLIP_STATS``.

    ``clip_frac_low``: ``w < 1 - clip_low`` with ``A < 0``; ``clip_frac_high``: ``w > 1 + clip_high``
    with ``A > 0``; ``clip_frac``: either; ``dual_clip_frac``: where ``dual_clipped`` (from
    ``per_token_surrogate``) is True; ``ratio_mean``/``ratio_min``/``ratio_max`` of ``w``.
    """
    ratio = check_tensor("ratio", ratio, ndim=2).detach()
    mask = check_mask("mask", mask, "ratio", ratio)
    valid = mask.bool()
    _check_nonempty(mask)
    adv = _check_advantages(advantages, ratio, valid).expand_as(ratio)
    if dual_clipped is None:
        dual_clipped = torch.zeros_like(valid)
    else:
        dual_clipped = check_tensor("dual_clipped", dual_clipped)
        check_same_shape("dual_clipped", dual_clipped, "ratio", ratio)
    low, high = clip_masks(ratio, adv, clip_low, clip_high)
    low, high = low & valid, high & valid
    n = valid.sum()
    return {
        "clip_frac_low": float(low.sum() / n),
        "clip_frac_high": float(high.sum() / n),
        "clip_frac": float((low | high).sum() / n),
        "dual_clip_frac": float((dual_clipped.bool() & valid).sum() / n),
        "ratio_mean": float(ratio[valid].mean()),
        "ratio_min": float(ratio[valid].min()),
        "ratio_max": float(ratio[valid].max()),
    }


def approx_kl(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> float:
    """How far the policy being trained has moved from the one that sampled: the mean over the tokens where
    ``mask`` is 1 of ``(w - 1) - log w``, ``w = exp(logp - old_logp)`` per token (Schulman's k3 estimator of
    KL(pi_old || pi_theta) on tokens pi_old sampled; CleanRL's ``approx_kl``). Measured before this update's
    step, it is how far the earlier updates on this rollout have moved the policy, on this mini-batch: 0 on a
    rollout's first update, and usually larger with each further one. verl logs the k1 estimator of the same
    KL, ``mean(old_logp - logp)``, as ``actor/ppo_kl``: the same expectation, noisier, and it can be negative.
    """
    valid = check_mask("mask", mask, "logp", logp).bool()
    log_w = (logp.detach() - old_logp.detach())[valid].double()
    return float((torch.expm1(log_w) - log_w).mean())


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    ratio_level: str = "token",
    aggregation: str = "seq_mean_token_mean",
    max_len: int | None = None,
    kl: torch.Tensor | None = None,
    beta: float = 0.0,
    dual_clip: float | None = None,
    is_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped policy-gradient loss of PPO, GRPO, Dr. GRPO, DAPO, GSPO and GFPO:
    ``per_token_surrogate`` (+ ``beta * kl``), then ``aggregate``, with ``clip_stats``.

    Per token (PPO eq. 7 with DAPO's asymmetric clip):
    ``l_t = -min(w_t * A_t, clip(w_t, 1 - clip_low, 1 + clip_high) * A_t) + beta * kl_t``

    Args:
        logp: ``[B, T]`` log-probs of the sampled tokens under the policy being trained.
        old_logp: ``[B, T]`` log-probs under the policy that sampled them (no gradient).
        advantages: ``[B]`` per sequence or ``[B, T]`` per token.
        mask: ``[B, T]`` 1 on completion tokens, 0 on padding (what padding holds does not matter).
        clip_low, clip_high: the clip range ``[1 - clip_low, 1 + clip_high]``; ``clip_high=None``
            means symmetric (PPO/GRPO 0.2; DAPO clip-higher 0.2/0.28; GSPO 3e-4/4e-4). A
            ``clip_low`` of 1 or more switches the lower clip off (a ratio is never below 0), as
            TRL's ``epsilon=10`` does.
        ratio_level: the importance weight ``w``:
            ``"token"``: ``w_t = exp(logp_t - old_logp_t)`` (PPO, GRPO, DAPO).
            ``"sequence"``: GSPO's ``s_i = exp(mean_t(logp - old_logp))``, one per sequence;
            a clipped sequence contributes no gradient at all.
            ``"sequence_token"``: GSPO-token, ``sg[s_i] * exp(logp_t - sg[logp_t])``: equal to
            ``s_i`` in value, per-token gradient paths for per-token advantages.
        aggregation: how per-token losses become one number (see the module docstring):
            ``"seq_mean_token_mean"`` (GRPO, GSPO), ``"token_mean"`` (DAPO, GFPO, TRL's default),
            ``"seq_mean_token_sum_norm"`` (Dr. GRPO: token sums over ``B * max_len``).
        max_len: the constant normaliser of ``"seq_mean_token_sum_norm"`` (the generation budget).
        kl: optional ``[B, T]`` per-token KL to the reference, added *before* aggregation.
        beta: the KL coefficient (needs ``kl`` when > 0).
        dual_clip: verl's dual-clip constant ``c > 1``: for ``A < 0`` the loss is capped at ``-c*A``.
        is_weight: optional ``[B, T]`` or ``[B, 1]`` weights of the sampler/trainer correction
            (``rollout_is_weight``, no gradient), multiplying each token's surrogate before the KL
            term is added, as TRL's ``GRPOTrainer`` applies its ``importance_sampling_ratio``.

    Returns:
        ``(loss, stats)``: a scalar tensor, and ``clip_stats``'s floats (a sequence-level ratio
        counts once per token of its sequence), ``approx_kl`` (how far the earlier updates
        on this rollout have moved the policy, measured before this step), plus ``kl_mean`` when ``kl`` is given.
    """
    per_token, ratio, dual_clipped = per_token_surrogate(
        logp, old_logp, advantages, mask, clip_low, clip_high, ratio_level, dual_clip
    )
    valid = check_mask("mask", mask, "logp", logp).bool()
    if is_weight is not None:
        is_weight = check_float("is_weight", is_weight, ndim=2)
        if is_weight.shape[0] != logp.shape[0] or is_weight.shape[1] not in (1, logp.shape[1]):
            raise ValueError(
                f"is_weight must be [B, T] or [B, 1] for logp {tuple(logp.shape)}, got {tuple(is_weight.shape)}"
            )
        per_token = per_token * is_weight.detach()
    beta = check_number("beta", beta, low=0.0)
    if kl is not None:
        kl = check_tensor("kl", kl, ndim=2)
        check_same_shape("kl", kl, "logp", logp)
        kl = _finite_where("kl", kl, valid)
    elif beta > 0:
        raise ValueError(f"kl must be given when beta > 0, got kl=None with beta={beta}")
    if kl is not None and beta > 0:
        per_token = per_token + beta * kl
    loss = aggregate(per_token, mask, aggregation, max_len)
    stats = clip_stats(ratio, advantages, mask, clip_low, clip_high, dual_clipped)
    stats["approx_kl"] = approx_kl(logp, old_logp, mask)
    if kl is not None:
        stats["kl_mean"] = float(kl.detach()[valid].mean())
    return loss, stats


def rollout_is_weight(
    train_logp: torch.Tensor,
    sample_logp: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    clip_max: float | None = 3.0,
    clip_min: float | None = None,
) -> torch.Tensor:
    """The weight that corrects for a sampler that is not the trainer's policy (vLLM in bf16 against
    the trainer in fp32, say), as TRL 1.16's ``GRPOTrainer`` computes it (``vllm_importance_sampling_*``).

    ``r = exp(train_logp - sample_logp)`` per token, or ``exp(sum_t(train_logp - sample_logp))`` per
    sequence (``mode`` ``sequence_*``: ``[B, 1]``; ``token_*``: ``[B, T]``); ``*_truncate`` clamps it
    to ``[clip_min, clip_max]`` (truncated IS), ``*_mask`` sets it to 0 outside them (masked IS).
    Padding counts as no difference. No gradient flows through it.
    """
    check_choice("mode", mode, ROLLOUT_IS_MODES)
    train_logp = check_float("train_logp", train_logp, ndim=2)
    sample_logp = check_float("sample_logp", sample_logp, ndim=2)
    check_same_shape("sample_logp", sample_logp, "train_logp", train_logp)
    valid = check_mask("mask", mask, "train_logp", train_logp).bool()
    for name, v in (("clip_max", clip_max), ("clip_min", clip_min)):
        if v is not None:
            check_number(name, v, low=0.0)
    if clip_max is not None and clip_min is not None and clip_min > clip_max:
        raise ValueError(f"clip_min must be <= clip_max, got clip_min={clip_min} > clip_max={clip_max}")
    diff = torch.where(valid, train_logp.detach() - sample_logp.detach(), 0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        return ratio if clip_min is None and clip_max is None else torch.clamp(ratio, min=clip_min, max=clip_max)
    low = clip_min if clip_min is not None else -math.inf
    high = clip_max if clip_max is not None else math.inf
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, clip: float | None = None
) -> torch.Tensor:
    """The critic's loss, PPO style (openai/baselines ppo2): a masked token mean of

    ``0.5 * max((V - R)^2, (V_old + clip(V - V_old, -clip, clip) - R)^2)``,

    or plain ``0.5 * (V - R)^2`` when ``clip`` is None. ``clip`` is absolute, in reward units.
    """
    values = check_float("values", values, ndim=2)
    old_values = check_float("old_values", old_values, ndim=2)
    returns = check_float("returns", returns, ndim=2)
    check_same_shape("old_values", old_values, "values", values)
    check_same_shape("returns", returns, "values", values)
    mask = check_mask("mask", mask, "values", values)
    loss = (values - returns) ** 2
    if clip is not None:
        clip = check_number("clip", clip, low=0.0, low_open=True)
        v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        loss = torch.max(loss, (v_clipped - returns) ** 2)
    return 0.5 * masked_mean(loss, mask)


def token_gradient_weights(
    lengths: list[int] | torch.Tensor, advantages: list[float] | torch.Tensor, aggregation: str, max_len: int
) -> torch.Tensor:
    """How hard ``policy_loss`` pushes each token's log-prob, on-policy: ``-d loss / d logp_t``,
    ``[B, max_len]``, 0 on padding. By autograd through ``policy_loss`` itself, so it is the
    aggregation's weight as the trainer applies it: ``A_i / (B |o_i|)`` (``seq_mean_token_mean``),
    ``A_i / sum|o|`` (``token_mean``), ``A_i / (B max_len)`` (``seq_mean_token_sum_norm``)."""
    max_len = check_positive_int("max_len", max_len)
    lengths = torch.as_tensor(lengths)
    mask = (torch.arange(max_len).unsqueeze(0) < lengths.unsqueeze(1)).double()
    logp = torch.zeros(len(lengths), max_len, dtype=torch.float64, requires_grad=True)
    adv = torch.as_tensor(advantages, dtype=torch.float64)
    loss, _ = policy_loss(logp, logp.detach(), adv, mask, aggregation=aggregation, max_len=max_len)
    (grad,) = torch.autograd.grad(loss, logp)
    return -grad
