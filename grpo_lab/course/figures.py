"""The lessons' figures: each draws one idea of one notebook (a group's advantages, the clipped
objective, the KL estimators, GSPO's ratios, GFPO's filter, the token weights of each aggregation, DAPO's
overlong penalty, TRL's loss types), labels its axes, titles it with what to notice, and returns the
figure. They take numbers (tensors, lists) and never reach back into training.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

from ..core.kl import kl_estimate
from ..core.losses import clip_masks, sequence_log_ratio
from .plotstyle import ALGO_COLORS, COLORS, Values, ax_or_new


def plot_group(
    texts: list[str], rewards: Values, advantages: Values, title: str | None = None, ax: plt.Axes | None = None
) -> plt.Figure:
    """One sampled group: each completion's advantage as a bar, coloured by its reward."""
    rewards, advantages = (
        torch.as_tensor(rewards, dtype=torch.float64),
        torch.as_tensor(advantages, dtype=torch.float64),
    )
    fig, ax = ax_or_new(ax, (7, 0.45 * len(texts) + 1.2))
    colors = [COLORS["pos"] if r > 0.5 else COLORS["neg"] for r in rewards.tolist()]
    y = range(len(texts))
    ax.barh(y, advantages.tolist(), color=colors)
    ax.set_yticks(list(y), [t if len(t) < 28 else t[:25] + "..." for t in texts], fontfamily="monospace", fontsize=8)
    ax.axvline(0, color="black", lw=0.8)
    ax.invert_yaxis()
    ax.set_xlabel("advantage A_i")
    ax.set_title(title or "One group: right answers (green) pushed up, wrong (red) pushed down")
    fig.tight_layout()
    return fig


def plot_clipped_objective(
    clip_low: float = 0.2, clip_high: float | None = None, axes: Sequence[plt.Axes] | None = None
) -> plt.Figure:
    """PPO's clipped surrogate ``min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)`` against the ratio r,
    for A = +1 and A = -1 (``clip_high=None``: symmetric).

    Shaded: where the clipped branch is active, so that token's gradient is zero.
    """
    clip_high = clip_low if clip_high is None else clip_high
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=False)
    else:
        fig = axes[0].figure
    r = torch.linspace(0.0, 2.0, 401)
    lo, hi = 1 - clip_low, 1 + clip_high
    for ax, A in zip(axes, (1.0, -1.0)):
        obj = torch.minimum(r * A, r.clamp(lo, hi) * A)
        ax.plot(r, r * A, ls="--", color=COLORS["neutral"], label="unclipped r·A")
        ax.plot(r, obj, color=COLORS["pos"] if A > 0 else COLORS["neg"], lw=2.2, label="clipped objective")
        if A > 0:
            ax.axvspan(hi, 2.0, color=COLORS["clip"], alpha=0.35, label="zero gradient")
        else:
            ax.axvspan(0.0, lo, color=COLORS["clip"], alpha=0.35, label="zero gradient")
        ax.axvline(1.0, color="black", lw=0.6)
        ax.set_xlabel("ratio r = pi_theta / pi_old")
        ax.set_ylabel("objective J (maximised)")
        ax.set_title(
            f"A = {A:+.0f}: " + (f"no gain past r = {hi:.2f}" if A > 0 else f"no gain below r = {lo:.2f}"), fontsize=10
        )
        ax.legend(fontsize=7, loc="upper left" if A > 0 else "lower left")
    fig.tight_layout()
    return fig


def plot_token_values(
    values_by_name: dict[str, list[float]],
    tokens: list[str] | None = None,
    title: str = "",
    ax: plt.Axes | None = None,
    ylabel: str = "value",
) -> plt.Figure:
    """Per-token quantities (e.g. rewards, values, GAE advantages) as grouped bars along the completion."""
    fig, ax = ax_or_new(ax, (8, 3.2))
    n = max(len(v) for v in values_by_name.values())
    width = 0.8 / len(values_by_name)
    for j, (name, vals) in enumerate(values_by_name.items()):
        ax.bar([i + j * width for i in range(len(vals))], vals, width=width, label=name)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(n)], tokens or [str(i) for i in range(n)], fontfamily="monospace")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xlabel("completion token")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_group_advantages(
    rewards: Values, advantages: Values, group_size: int, title: str = "", ax: plt.Axes | None = None
) -> plt.Figure:
    """Advantages of a batch as bars, groups separated and shaded, bars coloured by reward."""
    rewards = torch.as_tensor(rewards, dtype=torch.float64)
    advantages = torch.as_tensor(advantages, dtype=torch.float64)
    fig, ax = ax_or_new(ax, (9, 3.2))
    x = list(range(len(rewards)))
    colors = [COLORS["pos"] if r > 0.5 else COLORS["neg"] for r in rewards.tolist()]
    ax.bar(x, advantages.tolist(), color=colors)
    for g in range(0, len(x), group_size):
        if (g // group_size) % 2:
            ax.axvspan(g - 0.5, g + group_size - 0.5, color="#eeeeee", zorder=0)
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xlabel(f"completion (groups of G = {group_size}, alternately shaded)")
    ax.set_ylabel("advantage")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_kl_estimators(log_r_range: float = 2.0, ax: plt.Axes | None = None) -> plt.Figure:
    """k1, k2 and k3 as functions of log r = log(pi_ref / pi_theta) for one token."""
    fig, ax = ax_or_new(ax, (6, 3.5))
    log_r = torch.linspace(-log_r_range, log_r_range, 401, dtype=torch.float64)
    logp = torch.zeros_like(log_r)
    for kind, style in (("k1", "-"), ("k2", "--"), ("k3", "-")):
        ax.plot(log_r, kl_estimate(logp, log_r, kind), ls=style, lw=2, label=kind)
    ax.axhline(0, color="black", lw=0.6)
    ax.axvline(0, color="black", lw=0.6)
    ax.set_xlabel("log r = log pi_ref - log pi_theta (one sampled token)")
    ax.set_ylabel("estimate")
    ax.set_title("k1 goes negative; k2 and k3 never do", fontsize=10)
    ax.legend()
    fig.tight_layout()
    return fig


def _symlog_bins(lo_exp: int = -7, hi_exp: int = 0, per_decade: int = 4):
    """Bin edges symmetric around 0 and even on a log scale (for log-ratios spanning decades)."""
    pos = torch.logspace(lo_exp, hi_exp, (hi_exp - lo_exp) * per_decade + 1, dtype=torch.float64)
    return torch.cat([-pos.flip(0), torch.zeros(1, dtype=torch.float64), pos]).tolist()


def plot_gspo_ratios(
    log_ratio: Values,
    mask: Values,
    clip_low: float = 3e-4,
    clip_high: float | None = None,
    title: str = "",
    ax: plt.Axes | None = None,
) -> plt.Figure:
    """Token log-ratios ``log r_t`` against GSPO's sequence log-ratios ``log s_i = mean_t log r_t``.

    One histogram each on a symmetric log axis, with the clip band ``[1 - clip_low, 1 + clip_high]``
    shaded (``clip_high=None``: symmetric).
    """
    log_ratio = torch.as_tensor(log_ratio, dtype=torch.float64)
    mask = torch.as_tensor(mask, dtype=torch.float64)
    clip_high = clip_low if clip_high is None else clip_high
    fig, ax = ax_or_new(ax, (7, 3.2))
    tok = log_ratio[mask.bool()]
    seq = sequence_log_ratio(log_ratio, mask)
    bins = _symlog_bins()
    lim = 1e-7
    ax.hist(
        tok.clamp(-1, 1).tolist(),
        bins=bins,
        density=False,
        weights=[1 / len(tok)] * len(tok),
        alpha=0.55,
        color=COLORS["neutral"],
        label=f"token log r (n={len(tok)})",
    )
    ax.hist(
        seq.clamp(-1, 1).tolist(),
        bins=bins,
        weights=[1 / len(seq)] * len(seq),
        histtype="step",
        lw=2,
        color=ALGO_COLORS["gspo"],
        label=f"sequence log s (n={len(seq)})",
    )
    band = f"1 ± {clip_low:.0e}" if clip_high == clip_low else f"[1 - {clip_low:.0e}, 1 + {clip_high:.0e}]"
    ax.axvspan(
        math.log(1 - clip_low), math.log(1 + clip_high), color=COLORS["clip"], alpha=0.35, label=f"inside {band}"
    )
    ax.set_xscale("symlog", linthresh=lim)
    ax.set_xlim(-1, 1)
    ax.set_xlabel("log ratio (symmetric log axis; 0 = unchanged)")
    ax.set_ylabel("share")
    ax.set_title(title or "Token ratios vs the length-normalised sequence ratio", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    return fig


def clip_share(log_w: Values, advantages: Values, clip_low: float, clip_high: float | None = None) -> float:
    """Share of ratios ``w = exp(log_w)`` the clipped objective clips (``losses.clip_masks``):
    ``w > 1 + clip_high`` with A > 0 or ``w < 1 - clip_low`` with A < 0."""
    log_w = torch.as_tensor(log_w, dtype=torch.float64)
    a = torch.as_tensor(advantages, dtype=torch.float64)
    if a.shape != log_w.shape and not (a.dim() == 0):
        raise ValueError(
            f"advantages must have the shape of log_w {tuple(log_w.shape)} (or be a scalar), got {tuple(a.shape)}"
        )
    low, high = clip_masks(log_w.exp(), a.expand_as(log_w), clip_low, clip_high)
    return float((low | high).double().mean())


def plot_clip_share_vs_eps(
    log_ratio: Values, mask: Values, advantages: Values, clip_low: float | None = None, ax: plt.Axes | None = None
) -> plt.Figure:
    """Share clipped against a symmetric clip range, for token ratios (PPO/GRPO) and sequence ratios
    (GSPO); ``clip_low`` marks one range on the axis."""
    log_ratio = torch.as_tensor(log_ratio, dtype=torch.float64)
    mask = torch.as_tensor(mask, dtype=torch.float64)
    adv = torch.as_tensor(advantages, dtype=torch.float64)
    fig, ax = ax_or_new(ax, (5.5, 3.2))
    valid = mask.bool()
    tok, tok_a = log_ratio[valid], adv.unsqueeze(1).expand_as(log_ratio)[valid]
    seq = sequence_log_ratio(log_ratio, mask)
    grid = torch.logspace(-6, 0, 61, dtype=torch.float64).tolist()
    ax.plot(grid, [clip_share(tok, tok_a, e) for e in grid], color=COLORS["neutral"], lw=2, label="tokens (GRPO)")
    ax.plot(grid, [clip_share(seq, adv, e) for e in grid], color=ALGO_COLORS["gspo"], lw=2, label="sequences (GSPO)")
    ax.axvspan(3e-4, 4e-4, color=ALGO_COLORS["gspo"], alpha=0.25, label="GSPO paper 3e-4 / 4e-4")
    ax.axvline(0.2, color=COLORS["accent"], ls=":", label="PPO/GRPO 0.2")
    if clip_low is not None:
        ax.axvline(clip_low, color=COLORS["clip"], lw=2, label=f"clip range {clip_low:.1e}")
    ax.set_xscale("log")
    ax.set_ylim(0, 1)
    ax.set_xlabel("clip range (1 ± x)")
    ax.set_ylabel("share clipped")
    ax.set_title("How much the clip range clips", fontsize=10)
    ax.legend(fontsize=7)
    return fig


def plot_gfpo_group(
    texts: list[str],
    rewards: Values,
    keep: Values,
    advantages: Values,
    lengths: Values | None = None,
    title: str = "",
    ax: plt.Axes | None = None,
) -> plt.Figure:
    """One GFPO group: every sampled completion with its length, reward and advantage.

    Kept completions get a bar; filtered-out ones a faded cross at ``A = 0``. ``lengths`` (tokens)
    are shown beside each text when given.
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float64)
    keep = torch.as_tensor(keep).bool()
    advantages = torch.as_tensor(advantages, dtype=torch.float64)
    lengths = None if lengths is None else [int(n) for n in torch.as_tensor(lengths).tolist()]
    fig, ax = ax_or_new(ax, (7, 0.32 * len(texts) + 1.2))
    y = list(range(len(texts)))[::-1]
    for yi, r, k, a in zip(y, rewards.tolist(), keep.tolist(), advantages.tolist()):
        color = COLORS["pos"] if r > 0.5 else COLORS["neg"]
        if k:
            ax.barh(yi, a, color=color)
        else:
            ax.plot([0], [yi], "x", color=color, alpha=0.5)
            ax.text(0.05, yi, "dropped: A = 0", va="center", fontsize=7, color="#888")
    ax.set_yticks(
        y,
        [f"{t or '(empty)'} ({n})" for t, n in zip(texts, lengths)]
        if lengths is not None
        else [t or "(empty)" for t in texts],
        family="monospace",
        fontsize=7,
    )
    for lab, k in zip(ax.get_yticklabels(), keep.tolist()):
        lab.set_color("black" if k else "#aaa")
    ax.axvline(0, color="black", lw=0.8)
    lim = max(1.0, float(advantages.abs().max()) * 1.1)
    ax.set_xlim(-lim, lim)
    ax.set_xlabel("advantage (green: right, red: wrong; faded: not kept)")
    ax.set_title(title, fontsize=9)
    return fig


def plot_token_weights(
    weights: dict, row_labels: list[str], title: str = "", axes: Sequence[plt.Axes] | None = None
) -> plt.Figure:
    """Per-token gradient weights (``-d loss / d log pi`` of each token), one heatmap per
    aggregation. ``weights`` maps a name to a ``[B, T]`` tensor with NaN on padding (drawn grey).
    One shared, symmetric colour scale: green pushes a token up, red pushes it down."""
    import matplotlib as mpl

    mats = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in weights.items()}
    if not mats or any(m.dim() != 2 or m.shape[0] != len(row_labels) for m in mats.values()):
        raise ValueError(
            f"weights must map at least one name to a [B, T] tensor with B = len(row_labels) = {len(row_labels)}, "
            f"got shapes {[tuple(m.shape) for m in mats.values()]}"
        )
    vmax = max(float(m[torch.isfinite(m)].abs().max()) for m in mats.values()) or 1.0
    if axes is None:
        n = len(mats)
        T = max(m.shape[1] for m in mats.values())
        fig, axes = plt.subplots(
            n, 1, figsize=(min(12, 3 + 0.3 * T), 0.42 * len(row_labels) * n + 1.0 * n), squeeze=False
        )
        axes = axes[:, 0]
    else:
        fig = axes[0].figure
    cmap = mpl.colormaps["PiYG"].copy()
    cmap.set_bad("#dddddd")
    for ax, (name, m) in zip(axes, mats.items()):
        im = ax.imshow(m.numpy(), cmap=cmap, vmin=-vmax, vmax=vmax, aspect="auto", interpolation="nearest")
        ax.set_yticks(range(len(row_labels)), row_labels, fontsize=8)
        ax.set_xlabel("token position in the completion (grey: padding)", fontsize=8)
        ax.set_title(name, fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01, label="push on log p")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_overlong_penalty(
    max_len: int, cache_len: int, lengths: Values | None = None, ax: plt.Axes | None = None
) -> plt.Figure:
    """DAPO's soft overlong penalty against completion length, the ramp shaded; optionally a
    histogram of sampled ``lengths`` underneath, to see who pays."""
    from ..core.rewards import soft_overlong_penalty

    fig, ax = ax_or_new(ax, (7, 3.3))
    top = int(max_len * 1.25) + 1
    n = torch.arange(0, top + 1)
    pen = soft_overlong_penalty(n, max_len, cache_len)
    if lengths is not None:
        lengths = torch.as_tensor(lengths)
        ax2 = ax.twinx()
        ax2.hist(lengths.tolist(), bins=range(0, top + 2), color=COLORS["neutral"], alpha=0.35)
        ax2.set_ylabel("completions (histogram)", color=COLORS["neutral"])
        paying = float((soft_overlong_penalty(lengths, max_len, cache_len) < 0).float().mean())
        ax.set_title(
            f"L_max = {max_len}, L_cache = {cache_len}: {paying:.0%} of these completions are penalised", fontsize=10
        )
    else:
        ax.set_title(
            f"L_max = {max_len}, L_cache = {cache_len}: free up to {max_len - cache_len} tokens, then a ramp to -1",
            fontsize=10,
        )
    ax.axvspan(max_len - cache_len, max_len, color=COLORS["clip"], alpha=0.3, label="the ramp (L_cache)")
    ax.plot(n.tolist(), pen.tolist(), color=COLORS["neg"], lw=2.2, label="penalty added to the reward")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_ylim(-1.15, 0.15)
    ax.set_xlabel("completion length |y| (tokens)")
    ax.set_ylabel("R_length")
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


def plot_trl_loss_weights(
    weights: dict, lengths: tuple[int, int], max_completion_length: int, title: str | None = None
) -> plt.Figure:
    """Per-token and per-answer gradient weights of a right (A = +1) and a wrong (A = -1) answer under each
    TRL ``loss_type``. ``weights[loss_type] = (w_right, w_wrong)``: |d loss / d logp| of one token of each."""
    names = list(weights)
    x = torch.arange(len(names), dtype=torch.float64)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.3))
    for ax, per_answer in zip(axes, (False, True)):
        right = [weights[n][0] * (lengths[0] if per_answer else 1) for n in names]
        wrong = [weights[n][1] * (lengths[1] if per_answer else 1) for n in names]
        ax.bar(x - 0.2, right, 0.4, color=COLORS["pos"], label=f"right answer, A = +1, {lengths[0]} tokens")
        ax.bar(x + 0.2, wrong, 0.4, color=COLORS["neg"], label=f"wrong answer, A = -1, {lengths[1]} tokens")
        ax.set_xticks(x.tolist(), names)
        ax.set_ylabel("|d loss / d log p| summed over the answer" if per_answer else "|d loss / d log p| of one token")
        ax.set_title("whole answer: how hard it is pushed" if per_answer else "one token")
    axes[0].legend(fontsize=7)
    fig.suptitle(
        title or f"TRL's loss_type on two answers (max_completion_length = {max_completion_length})", fontsize=10
    )
    fig.tight_layout()
    return fig
