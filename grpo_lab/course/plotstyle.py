"""What every course plot shares: the colours, the numbers a plot accepts, and where it draws."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

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


def ax_or_new(ax: plt.Axes | None, figsize: tuple[float, float] = (6, 3.5)) -> tuple[plt.Figure, plt.Axes]:
    """``ax``'s figure and ``ax``, or a new figure of ``figsize`` and its one axis when ``ax`` is None."""
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize)
        return fig, ax
    return ax.figure, ax
