"""Plots for the notebooks. Each function draws one idea, labels its axes, titles it with what
to notice, and returns the figure. Plotting never reaches back into training: these functions
take numbers (tensors, lists, histories) and draw them.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import torch

from .kl import kl_estimate

COLORS = {"pos": "#2a9d8f", "neg": "#e76f51", "neutral": "#8d99ae", "clip": "#e9c46a", "accent": "#264653"}
ALGO_COLORS = {"ppo": "#6a4c93", "grpo": "#1982c4", "dr_grpo": "#8ac926", "dapo": "#ff924c", "gspo": "#ff595e", "gfpo": "#52a675"}

# Health metrics: what each says when training goes wrong.
METRIC_NOTES = {
    "reward_mean": ("reward (train batch)", "flat from the start: a reward bug or a task out of reach"),
    "reward_std_within_group": ("within-group reward std", "near 0: every group all-right or all-wrong, so no gradient"),
    "kl": ("KL to reference (k3, per token)", "climbing fast: the policy is running away (beta too small, lr too high)"),
    "length_mean": ("mean completion length", "runaway growth or collapse: a length-biased loss or reward"),
    "entropy": ("entropy per token (nats)", "falling to ~0: the policy stopped exploring (entropy collapse)"),
}


def _ax(ax, figsize=(6, 3.5)):
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize)
        return fig, ax
    return ax.figure, ax


def plot_group(texts: list[str], rewards, advantages, title: str | None = None, ax=None):
    """One sampled group: each completion's advantage as a bar, coloured by its reward."""
    rewards, advantages = torch.as_tensor(rewards, dtype=torch.float64), torch.as_tensor(advantages, dtype=torch.float64)
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


def plot_dashboard(history: list[dict], keys=tuple(METRIC_NOTES), label: str | None = None, axes=None, color=None):
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


def plot_clipped_objective(eps_low: float = 0.2, eps_high: float | None = None, axes=None):
    """PPO's clipped surrogate ``min(r A, clip(r) A)`` against the ratio r, for A = +1 and A = -1.

    Shaded: where the clipped branch is active, so that token's gradient is zero.
    """
    eps_high = eps_low if eps_high is None else eps_high
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=False)
    else:
        fig = axes[0].figure
    r = torch.linspace(0.0, 2.0, 401)
    lo, hi = 1 - eps_low, 1 + eps_high
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
        ax.set_title(f"A = {A:+.0f}: " + (f"no gain past r = {hi:.2f}" if A > 0 else f"no gain below r = {lo:.2f}"), fontsize=10)
        ax.legend(fontsize=7, loc="upper left" if A > 0 else "lower left")
    fig.tight_layout()
    return fig


def plot_token_values(values_by_name: dict[str, list[float]], tokens: list[str] | None = None, title: str = "", ax=None, ylabel="value"):
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


def plot_group_advantages(rewards, advantages, group_size: int, title: str = "", ax=None):
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


def plot_kl_estimators(log_r_range: float = 2.0, ax=None):
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


def plot_runs(histories: dict[str, list[dict]], keys=("accuracy", "length_mean", "entropy", "kl"), x: str = "step", smooth: int = 5):
    """Several runs' metrics side by side (moving average over ``smooth`` steps)."""
    fig, axes = plt.subplots(1, len(keys), figsize=(3.3 * len(keys), 2.9))
    for name, hist in histories.items():
        xs = [h[x] for h in hist]
        for ax, key in zip(axes, keys):
            vals = [math.nan if h.get(key) is None else h[key] for h in hist]
            sm = [sum(v for v in vals[max(0, i - smooth + 1) : i + 1]) / len(vals[max(0, i - smooth + 1) : i + 1]) for i in range(len(vals))]
            ax.plot(xs, sm, label=name, color=ALGO_COLORS.get(name), lw=1.5)
            ax.set_title(METRIC_NOTES.get(key, (key,))[0] if key in METRIC_NOTES else key, fontsize=9)
            ax.set_xlabel("training seconds" if x == "wall_seconds" else x, fontsize=8)
            ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig
