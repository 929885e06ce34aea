"""The views of notebooks 06 and 07: the sign-aware clip share (against ALGORITHMS.md's GSPO vector and
hand counts), the GSPO and GFPO plots, and the two sliders (what they draw, read back from the figure)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from widget_driver import redraw as _redraw  # noqa: E402

from grpo_lab.course import viz, widgets  # noqa: E402


def test_clip_share_against_the_gspo_vector():
    # ALGORITHMS.md: token ratios [1.10, 0.95, 1.30, 0.90] give s = 1.051539; with (3e-4, 4e-4) and A = +1 the
    # sequence is clipped, with A = -1 it is not; under a token eps of 0.2 only the 1.30 token is clipped.
    log_s = torch.tensor([math.log(1.051539)])
    assert viz.clip_share(log_s, torch.tensor([1.0]), 3e-4, 4e-4) == 1.0
    assert viz.clip_share(log_s, torch.tensor([-1.0]), 3e-4, 4e-4) == 0.0
    log_r = torch.log(torch.tensor([1.10, 0.95, 1.30, 0.90]))
    assert viz.clip_share(log_r, torch.ones(4), 0.2) == 0.25
    assert viz.clip_share(log_r, -torch.ones(4), 0.2) == 0.0  # 0.90 and 0.95 are inside 1 - 0.2
    # ALGORITHMS.md: log-ratios [2e-4, 4e-4] give s = 1.0003, unclipped at (3e-4, 4e-4).
    assert viz.clip_share(torch.tensor([3e-4]), torch.tensor([1.0]), 3e-4, 4e-4) == 0.0


def test_clip_share_counts_by_the_sign_of_the_advantage():
    log_w = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5, 1.0]))
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 0.0])
    assert viz.clip_share(log_w, adv, 0.2) == 2 / 5  # 1.5 with A > 0 and 0.5 with A < 0


def _log_ratios(seed=0, B=8, T=10):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, T)
    mask[:, 7:] = 0
    return [torch.randn(B, T, generator=gen) * 0.01 * (i + 1) for i in range(3)], mask


def test_gspo_ratio_explorer_builds_and_redraws():
    log_ratios, mask = _log_ratios()
    box = widgets.gspo_ratio_explorer({"lr 1e-04": log_ratios}, mask, torch.linspace(-1, 1, 8))
    run, steps, eps = box.children[:3]
    steps.value = 3
    eps.value = 1e-2
    assert steps.max == 3 and run.value == "lr 1e-04"
    plt.close("all")


def test_gspo_plots_draw_on_given_axes():
    log_ratios, mask = _log_ratios()
    fig, axes = plt.subplots(1, 2)
    viz.plot_gspo_ratios(log_ratios[0], mask, 4e-4, ax=axes[0])
    viz.plot_clip_share_vs_eps(log_ratios[0], mask, torch.ones(8), 1e-3, ax=axes[1])
    assert axes[0].get_xscale() == "symlog" and axes[1].get_xscale() == "log"
    plt.close("all")


def test_gfpo_explorer_draws_what_each_filter_keeps():
    texts = [["121", "92,121", "07+85=92,92+29=121", "..121"], ["45", "9,45", "01+08=9,9+36=45", "...45"]]
    correct = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    lengths = torch.tensor([[4, 7, 19, 6], [3, 5, 16, 6]])
    box = widgets.gfpo_explorer(texts, correct, lengths)
    fig = _redraw(box, **{"G sampled": 4, "k kept": 2, "metric": "length"})
    # the 2 shortest: prompt 0 keeps 4 (right) and 6 (wrong); prompt 1 keeps 3 and 5, both wrong
    assert [ax.get_title() for ax in fig.axes] == [
        "prompt 0: 2/4 right; kept 2: 1 right, 1 wrong kept",
        "prompt 1: 2/4 right; kept 2: ALL ZERO (kept set all equal)",
    ]
    assert fig._suptitle.get_text() == "GFPO: sample G = 4, keep the 2 shortest"
    dropped = [[t.get_text() for t in ax.texts].count("dropped: A = 0") for ax in fig.axes]
    assert dropped == [2, 2]
    # prompt 0's kept pair is centred on its own mean, 0.5, and divided by its population std (GFPO's eq. 3), 0.5
    widths = sorted(p.get_width() for p in fig.axes[0].patches)
    assert widths == pytest.approx([-1.0, 1.0], abs=1e-5)  # (eps = 1e-6 under the std)
    fig = _redraw(box, metric="token_efficiency")  # reward / length: the right answers, shortest first
    assert [ax.get_title() for ax in fig.axes] == [
        "prompt 0: 2/4 right; kept 2: ALL ZERO (kept set all equal)",
        "prompt 1: 2/4 right; kept 2: ALL ZERO (kept set all equal)",
    ]
    assert fig._suptitle.get_text() == "GFPO: sample G = 4, keep the 2 most token-efficient"
    fig = _redraw(box, **{"k kept": 4, "metric": "length"})  # k = G keeps everyone
    assert [[t.get_text() for t in ax.texts].count("dropped: A = 0") for ax in fig.axes] == [0, 0]
    plt.close("all")


def test_gfpo_group_plot_marks_the_dropped():
    fig = viz.plot_gfpo_group(
        ["121", "92,121", "07+85=92,92+29=121"],
        [1.0, 0.0, 1.0],
        [True, True, False],
        [1.0, -1.0, 0.0],
        lengths=[4, 7, 19],
    )
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["121 (4)", "92,121 (7)", "07+85=92,92+29=121 (19)"]  # the first completion is the top row
    assert ax.get_yticks().tolist() == [2, 1, 0]
    assert [t.get_text() for t in ax.texts] == ["dropped: A = 0"]  # only the third was not kept
    plt.close("all")


def test_bad_inputs_raise_value_errors_naming_the_argument():
    with pytest.raises(ValueError, match="advantages"):
        viz.clip_share(torch.zeros(4), torch.zeros(3), 0.2)
    with pytest.raises(ValueError, match="clip_low"):
        viz.clip_share(torch.zeros(4), torch.zeros(4), -0.1)
    with pytest.raises(ValueError, match="log_ratios"):
        widgets.gspo_ratio_explorer({}, torch.ones(2, 2), torch.zeros(2))
    with pytest.raises(ValueError, match="lengths"):
        widgets.gfpo_explorer([["1", "2"]], torch.ones(1, 2), torch.ones(1, 3))
