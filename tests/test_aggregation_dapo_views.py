"""The views of notebooks 04 and 05: per-token gradient weights (against ALGORITHMS.md's loss-aggregation
vector), the seed bands, and the two sliders (they build and redraw)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from grpo_lab.course import viz, widgets  # noqa: E402


@pytest.mark.parametrize(
    "aggregation,weights",
    [  # ALGORITHMS.md section 10, "Loss aggregation": A = [+1, -1], lengths [2, 4], L_MAX = 8
        ("seq_mean_token_mean", (0.25, 0.125)),
        ("token_mean", (1 / 6, 1 / 6)),
        ("seq_mean_token_sum_norm", (1 / 16, 1 / 16)),
    ],
)
def test_token_weights_match_the_reference_vector(aggregation, weights):
    w = widgets._token_weights([2, 4], [1.0, -1.0], aggregation, 8)
    assert w.shape == (2, 8)
    assert torch.allclose(w[0, :2], torch.full((2,), weights[0], dtype=torch.float64))
    assert torch.allclose(w[1, :4], torch.full((4,), -weights[1], dtype=torch.float64))  # A < 0: pushed down
    assert torch.isnan(w[0, 2:]).all() and torch.isnan(w[1, 4:]).all()  # padding


def test_seed_band_is_mean_min_max_of_the_smoothed_runs():
    a = [{"step": i + 1, "x": v} for i, v in enumerate([1.0, 3.0, 5.0])]
    b = [{"step": i + 1, "x": v} for i, v in enumerate([3.0, None, 1.0, 7.0])]  # longer, with a gap
    steps, mean, lo, hi = viz.seed_band([a, b], "x", smooth=2)
    assert steps == [1, 2, 3]
    # a smoothed: [1, 2, 4]; b smoothed (None skipped): [3, 3, 1]
    assert mean.tolist() == [2.0, 2.5, 2.5]
    assert lo.tolist() == [1.0, 2.0, 1.0] and hi.tolist() == [3.0, 3.0, 4.0]


def test_overlong_plot_reports_the_share_penalised():
    fig = viz.plot_overlong_penalty(32, 8, torch.tensor([10, 24, 25, 30, 33]))  # 24 is free; 25, 30, 33 pay
    assert "60%" in fig.axes[0].get_title()
    plt.close("all")


def test_sliders_build_and_redraw():
    box = widgets.aggregation_explorer(short=3, long=12, max_len=16)
    for agg in ("token_mean", "seq_mean_token_sum_norm"):
        box.children[2].value = agg
    box.children[0].value = 7
    box2 = widgets.overlong_penalty_explorer(torch.tensor([5, 20, 30]), max_len=32, cache_len=8)
    box2.children[1].value = 40  # L_cache larger than L_max is clamped, not an error
    box2.children[0].value = 16
    plt.close("all")


def test_bad_inputs_are_value_errors_naming_the_argument():
    with pytest.raises(ValueError, match="short must be an int"):
        widgets.aggregation_explorer(short=0, long=4, max_len=8)
    with pytest.raises(ValueError, match="long must be an int"):
        widgets.aggregation_explorer(short=2, long=9, max_len=8)
    with pytest.raises(ValueError, match="cache_len"):
        widgets.overlong_penalty_explorer(None, max_len=8, cache_len=9)
    with pytest.raises(ValueError, match="lengths"):
        widgets.overlong_penalty_explorer(torch.tensor([-1, 3]))
    with pytest.raises(ValueError, match="histories must be"):
        viz.seed_band([], "x")
    with pytest.raises(ValueError, match="smooth must be"):
        viz.seed_band([[{"step": 1, "x": 1.0}]], "x", smooth=0)
    with pytest.raises(ValueError, match="weights must map"):
        viz.plot_token_weights({"a": torch.zeros(3, 4)}, ["only", "two"])
