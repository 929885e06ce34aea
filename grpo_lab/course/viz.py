"""Plots for the notebooks. Each function draws one idea, labels its axes, titles it with what
to notice, and returns the figure. Plotting never reaches back into training: these functions
take numbers (tensors, lists, histories) and draw them.

The run plots (the health dashboard, bands across seeds, the bake-off) are here; the lessons' figures are
in ``figures.py`` and the colours in ``plotstyle.py``, all importable from here as ``viz.NAME``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

from ..core.checks import check_positive_int
from .figures import (  # noqa: F401  (the notebooks call them as viz.NAME)
    clip_share,
    plot_clip_share_vs_eps,
    plot_clipped_objective,
    plot_gfpo_group,
    plot_group,
    plot_group_advantages,
    plot_gspo_ratios,
    plot_kl_estimators,
    plot_overlong_penalty,
    plot_token_values,
    plot_token_weights,
    plot_trl_loss_weights,
)
from .plotstyle import ALGO_COLORS, COLORS, Values, ax_or_new  # noqa: F401

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
    "off_policy": (
        "clipped share (low, high); approx-KL",
        "0 by construction with one update per rollout. With several: a clipped share or an approx-KL that climbs "
        "step after step says the updates are leaving the policy that sampled (lr too high, too many updates); the "
        "healthy level depends on the algorithm (GSPO's tight clip cuts a large share). Each step shows the mean over "
        "its updates, each measured before its own step, so the first is always 0",
    ),
}
OFF_POLICY = {"clip_frac_low": ("clipped, low (A < 0)", "--"), "clip_frac_high": ("clipped, high (A > 0)", "-")}
"""The ``off_policy`` panel: each side's clipped share of tokens (left axis), with ``approx_kl`` (right axis)."""


def _smoothed(vals: list[float], smooth: int) -> list[float]:
    """Moving average over the last ``smooth`` values; NaN (a step that did not record the metric) is skipped."""
    out = []
    for i in range(len(vals)):
        win = [v for v in vals[max(0, i - smooth + 1) : i + 1] if v == v]
        out.append(sum(win) / len(win) if win else math.nan)
    return out


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
        if key == "off_policy":
            _plot_off_policy(ax, steps, history, label, color)
            continue
        ax.plot(steps, _values(history, key), label=label, color=color, lw=1.4)
        name = METRIC_NOTES.get(key, (key, ""))[0]
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    if label:
        axes[-1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def _values(history: list[dict], key: str) -> list[float]:
    return [math.nan if h.get(key) is None else h[key] for h in history]


def _plot_off_policy(ax: plt.Axes, steps: list, history: list[dict], label: str | None, color: str | None) -> None:
    """Both sides' clipped shares on ``ax`` and approx-KL on a right-hand axis (one twin per panel, reused when
    runs are overlaid)."""
    for key, (name, style) in OFF_POLICY.items():
        ax.plot(steps, _values(history, key), style, color=color, lw=1.2, label=f"{label}: {name}" if label else name)
    twin = getattr(ax, "approx_kl_axis", None)
    if twin is None:
        twin = ax.approx_kl_axis = ax.twinx()
        twin.set_ylabel("approx-KL (dotted)", fontsize=7)
        twin.tick_params(labelsize=7)
    twin.plot(steps, _values(history, "approx_kl"), ":", color=color or COLORS["accent"], lw=1.4)
    ax.set_title(METRIC_NOTES["off_policy"][0], fontsize=9)
    ax.set_xlabel("step", fontsize=8)
    ax.set_ylabel("share of tokens", fontsize=7)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6, loc="upper left")


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
    fig, ax = ax_or_new(ax, (6, 3.4))
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
    fig, ax = ax_or_new(ax, (6, 3.2))
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
    fig, ax = ax_or_new(ax, (6, 3.4))
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
