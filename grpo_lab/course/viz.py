"""Plots for the notebooks. Each function draws one idea, labels its axes, titles it with what
to notice, and returns the figure. Plotting never reaches back into training: these functions
take numbers (tensors, lists, histories) and draw them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

from ..core.checks import check_positive_int
from ..core.kl import kl_estimate
from ..core.losses import clip_masks, sequence_log_ratio

Values = torch.Tensor | Sequence[float]
"""Numbers a plot accepts: a tensor or a plain list."""

COLORS = {"pos": "#2a9d8f", "neg": "#e76f51", "neutral": "#8d99ae", "clip": "#e9c46a", "accent": "#264653"}
ALGO_COLORS = {
    "ppo": "#6a4c93",
    "grpo": "#1982c4",
    "dr_grpo": "#8ac926",
    "dapo": "#ff924c",
    "gspo": "#ff595e",
    "gfpo": "#52a675",
}

# Health metrics: what each says when training goes wrong.
METRIC_NOTES = {
    "reward_mean": ("reward (train batch)", "flat from the start: a reward bug or a task out of reach"),
    "reward_std_within_group": (
        "within-group reward std",
        "near 0: every group all-right or all-wrong, so no gradient",
    ),
    "kl": (
        "KL to reference (k3, per token)",
        "climbing fast: the policy is running away (beta too small, lr too high)",
    ),
    "length_mean": ("mean completion length", "runaway growth or collapse: a length-biased loss or reward"),
    "entropy": ("entropy per token (nats)", "falling to ~0: the policy stopped exploring (entropy collapse)"),
}


def _ax(ax, figsize=(6, 3.5)):
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize)
        return fig, ax
    return ax.figure, ax


def _smoothed(vals: list[float], smooth: int) -> list[float]:
    """Moving average over the last ``smooth`` values; NaN (a step that did not record the metric) is skipped."""
    out = []
    for i in range(len(vals)):
        win = [v for v in vals[max(0, i - smooth + 1) : i + 1] if v == v]
        out.append(sum(win) / len(win) if win else math.nan)
    return out


def plot_group(
    texts: list[str], rewards: Values, advantages: Values, title: str | None = None, ax: plt.Axes | None = None
) -> plt.Figure:
    """One sampled group: each completion's advantage as a bar, coloured by its reward."""
    rewards, advantages = (
        torch.as_tensor(rewards, dtype=torch.float64),
        torch.as_tensor(advantages, dtype=torch.float64),
    )
    fig, ax = _ax(ax, (7, 0.45 * len(texts) + 1.2))
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


def plot_dashboard(
    history: list[dict],
    keys: Sequence[str] = tuple(METRIC_NOTES),
    label: str | None = None,
    axes: Sequence[plt.Axes] | None = None,
    color: str | None = None,
) -> plt.Figure:
    """The health metrics over training steps, one small panel each (pass ``axes`` to overlay runs)."""
    if axes is None:
        fig, axes = plt.subplots(1, len(keys), figsize=(3.1 * len(keys), 2.8))
    else:
        fig = axes[0].figure
    steps = [h["step"] for h in history]
    for ax, key in zip(axes, keys):
        vals = [h.get(key) for h in history]
        vals = [math.nan if v is None else v for v in vals]
        ax.plot(steps, vals, label=label, color=color, lw=1.4)
        name = METRIC_NOTES.get(key, (key, ""))[0]
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    if label:
        axes[-1].legend(fontsize=7)
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
    fig, ax = _ax(ax, (8, 3.2))
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
    fig, ax = _ax(ax, (9, 3.2))
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
    fig, ax = _ax(ax, (6, 3.5))
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
    fig, ax = _ax(ax, (7, 3.2))
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
    fig, ax = _ax(ax, (5.5, 3.2))
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
    fig, ax = _ax(ax, (7, 0.32 * len(texts) + 1.2))
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


def seed_band(
    histories: list[list[dict]], key: str, smooth: int = 1
) -> tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor]:
    """Steps, mean and (min, max) across seeds of ``key``, each run first smoothed over ``smooth``
    steps; runs are cut to the shortest. Missing values (None/NaN) are skipped in the smoothing."""
    if not histories or any(not h for h in histories):
        raise ValueError(
            "histories must be a non-empty list of non-empty histories, "
            f"got {len(histories)} with lengths {[len(h) for h in histories]}"
        )
    check_positive_int("smooth", smooth)
    n = min(len(h) for h in histories)
    runs = []
    for h in histories:
        runs.append(_smoothed([math.nan if h[i].get(key) is None else float(h[i][key]) for i in range(n)], smooth))
    t = torch.tensor(runs, dtype=torch.float64)
    steps = [histories[0][i]["step"] for i in range(n)]
    return steps, t.nanmean(dim=0), t.min(dim=0).values, t.max(dim=0).values


def plot_seed_bands(
    runs: dict,
    key: str,
    smooth: int = 10,
    ax: plt.Axes | None = None,
    colors: dict | None = None,
    ylabel: str | None = None,
) -> plt.Figure:
    """Mean across seeds (line) and the range from the lowest to the highest seed (band) of one
    metric, for several settings: ``runs`` maps a label to a list of per-seed histories."""
    fig, ax = _ax(ax, (6, 3.4))
    for label, hists in runs.items():
        steps, mean, lo, hi = seed_band(hists, key, smooth)
        c = (colors or {}).get(label) or ALGO_COLORS.get(label)
        (line,) = ax.plot(
            steps, mean.tolist(), lw=1.8, color=c, label=f"{label} ({len(hists)} seed{'s' if len(hists) > 1 else ''})"
        )
        if len(hists) > 1:
            ax.fill_between(steps, lo.tolist(), hi.tolist(), color=line.get_color(), alpha=0.2, lw=0)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel or METRIC_NOTES.get(key, (key,))[0])
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_overlong_penalty(
    max_len: int, cache_len: int, lengths: Values | None = None, ax: plt.Axes | None = None
) -> plt.Figure:
    """DAPO's soft overlong penalty against completion length, the ramp shaded; optionally a
    histogram of sampled ``lengths`` underneath, to see who pays."""
    from ..core.rewards import soft_overlong_penalty

    fig, ax = _ax(ax, (7, 3.3))
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


BAKEOFF_KEYS = ("accuracy", "length_correct", "length_wrong", "entropy", "kl", "clip_frac")
_BAKEOFF_TITLES = {
    "accuracy": "accuracy (training batch)",
    "length_correct": "length of right answers",
    "length_wrong": "length of wrong answers",
    "clip_frac": "share of tokens clipped",
}


def plot_bakeoff(
    results: dict,
    keys: Sequence[str] = BAKEOFF_KEYS,
    x: str = "samples_generated",
    smooth: int = 5,
    n_grid: int = 60,
    axes: Sequence[plt.Axes] | None = None,
) -> plt.Figure:
    """Several algorithms x seeds on one axis of cost: each metric's mean across seeds (line) and the
    range from the lowest to the highest seed (band). ``results`` maps an algorithm to a list of run
    summaries (or histories). Runs are smoothed over ``smooth`` steps, then interpolated onto a common
    grid of ``x`` (samples drawn, by default) up to where the shortest run of that algorithm ends."""
    import numpy as np

    if not results:
        raise ValueError("results must map at least one algorithm to its runs, got an empty dict")
    ncols = 3 if len(keys) > 4 else len(keys)
    nrows = math.ceil(len(keys) / ncols)
    if axes is None:
        fig, axes = plt.subplots(nrows, ncols, figsize=(4.0 * ncols, 2.9 * nrows), squeeze=False)
        axes = list(axes.flatten())
    else:
        fig = axes[0].figure
    for name, runs in results.items():
        hists = [r["history"] if isinstance(r, dict) else r for r in runs]
        end = min(h[-1][x] for h in hists)
        grid = np.linspace(min(h[0][x] for h in hists), end, n_grid)
        for ax, key in zip(axes, keys):
            ys = []
            for h in hists:
                xs = np.array([s[x] for s in h], dtype=float)
                v = np.array(_smoothed([math.nan if s.get(key) is None else float(s[key]) for s in h], smooth))
                ok = ~np.isnan(v)
                ys.append(np.interp(grid, xs[ok], v[ok]) if ok.any() else np.full_like(grid, np.nan))
            ys = np.array(ys)
            c = ALGO_COLORS.get(name)
            (line,) = ax.plot(grid, np.nanmean(ys, axis=0), color=c, lw=1.6, label=f"{name} ({len(hists)})")
            if len(hists) > 1:
                ax.fill_between(
                    grid, np.nanmin(ys, axis=0), np.nanmax(ys, axis=0), color=line.get_color(), alpha=0.15, lw=0
                )
    for ax, key in zip(axes, keys):
        ax.set_title(_BAKEOFF_TITLES.get(key) or METRIC_NOTES.get(key, (key,))[0], fontsize=9)
        ax.set_xlabel(
            {"samples_generated": "completions sampled", "wall_seconds": "training seconds"}.get(x, x), fontsize=8
        )
        ax.tick_params(labelsize=7)
    for ax in axes[len(keys) :]:
        ax.axis("off")
    axes[0].legend(fontsize=7, title="algo (seeds)", title_fontsize=7)
    fig.tight_layout()
    return fig


def plot_seed_dots(values: dict, ylabel: str, title: str = "", ax: plt.Axes | None = None) -> plt.Figure:
    """One value per seed as dots, the mean as a bar with +- one standard deviation: is the gap
    between two algorithms bigger than the scatter of one algorithm across seeds?"""
    fig, ax = _ax(ax, (6, 3.2))
    for i, (name, vals) in enumerate(values.items()):
        vals = [float(v) for v in vals if v is not None]
        if not vals:
            continue
        mean = sum(vals) / len(vals)
        std = (sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else 0.0
        c = ALGO_COLORS.get(name, COLORS["neutral"])
        ax.bar(i, mean, color=c, alpha=0.35, yerr=std, capsize=4)
        ax.scatter([i + d for d in torch.linspace(-0.15, 0.15, len(vals)).tolist()], vals, color=c, zorder=3, s=18)
    ax.set_xticks(range(len(values)), list(values), fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title or "each dot a seed; bar = mean, whisker = 1 std", fontsize=9)
    fig.tight_layout()
    return fig


def plot_pass_at_k(curves: dict, ax: plt.Axes | None = None, title: str = "") -> plt.Figure:
    """pass@k against k (log scale): ``curves`` maps a label to one ``{k: pass@k}`` dict or a list
    of them (one per seed: the mean is drawn, the band spans the seeds)."""
    fig, ax = _ax(ax, (6, 3.4))
    for name, c in curves.items():
        runs = c if isinstance(c, list) else [c]
        ks = sorted(int(k) for k in runs[0])
        vals = torch.tensor([[float(r[k] if k in r else r[str(k)]) for k in ks] for r in runs], dtype=torch.float64)
        known = name in ALGO_COLORS  # anything else (e.g. the shipped model): a dashed black reference line
        (line,) = ax.plot(
            ks,
            vals.mean(dim=0).tolist(),
            "o-" if known else "s--",
            ms=3,
            lw=1.6,
            color=ALGO_COLORS[name] if known else "black",
            label=name,
        )
        if len(runs) > 1:
            ax.fill_between(
                ks,
                vals.min(dim=0).values.tolist(),
                vals.max(dim=0).values.tolist(),
                color=line.get_color(),
                alpha=0.15,
                lw=0,
            )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (samples per problem)")
    ax.set_ylabel("pass@k (held-out)")
    ax.set_title(title or "pass@k: the chance that at least one of k samples is right", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
