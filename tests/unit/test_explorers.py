"""The sliders of notebooks 00-03 and 08-10: move a control, then read what was drawn (bar heights, line data,
titles) against values worked out by hand here, not by the code that drew them."""

from __future__ import annotations

import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from widget_driver import redraw  # noqa: E402

from grpo_lab.course import viz, widgets  # noqa: E402


def line(ax, label):
    (found,) = [ln for ln in ax.lines if ln.get_label() == label]
    return found


def at(ln, x):
    return float(np.interp(x, ln.get_xdata(), ln.get_ydata()))


def bars(ax, label=None):
    """Heights of the bars of one labelled series (or all of the axes' bars)."""
    if label is None:
        return [p.get_height() for p in ax.patches]
    (found,) = [c for c in ax.containers if c.get_label() == label]
    return [p.get_height() for p in found]


def same_colour(patch, name):
    return patch.get_facecolor() == to_rgba(viz.COLORS[name])


def group_advantage_by_hand(rewards, use_std=True):
    mean = sum(rewards) / len(rewards)
    std = statistics.stdev(rewards)
    return [(r - mean) / (std + 1e-4) if use_std else r - mean for r in rewards]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_clip_explorer_draws_min_of_r_a_and_the_clipped_r_a():
    box = widgets.clip_explorer(0.2, asymmetric=True)
    fig = redraw(box, clip_low=0.2, clip_high=0.28)
    up, down = fig.axes[:2]
    # A = +1: min(1.5, 1.28) = 1.28 and min(0.5, 0.8) = 0.5; A = -1: min(-1.5, -1.28) = -1.5, min(-0.5, -0.8) = -0.8
    assert at(line(up, "clipped objective"), 1.5) == pytest.approx(1.28)
    assert at(line(up, "clipped objective"), 0.5) == pytest.approx(0.5)
    assert at(line(down, "clipped objective"), 1.5) == pytest.approx(-1.5)
    assert at(line(down, "clipped objective"), 0.5) == pytest.approx(-0.8)
    assert up.get_title() == "A = +1: no gain past r = 1.28" and down.get_title() == "A = -1: no gain below r = 0.80"
    fig = redraw(box, clip_low=0.5)
    assert at(line(fig.axes[1], "clipped objective"), 0.4) == pytest.approx(-0.5)  # min(-0.4, -0.5)


def test_gae_explorer_draws_the_advantages_worked_backwards():
    box = widgets.gae_explorer([0.0, 0.0, 1.0], [0.5, 0.6, 0.7], ["a", "b", "c"])
    ax = redraw(box, gamma=1.0, **{"lambda": 0.95}).axes[0]
    # ALGORITHMS.md's vector: delta = [0.1, 0.1, 0.3]; A_2 = 0.3, A_1 = 0.1 + 0.95 * 0.3, A_0 = 0.1 + 0.95 * A_1
    assert bars(ax, "advantage A_t") == pytest.approx([0.46575, 0.385, 0.3])
    assert bars(ax, "reward r_t") == [0.0, 0.0, 1.0] and bars(ax, "value V(s_t)") == [0.5, 0.6, 0.7]
    assert "gamma=1.00, lambda=0.95" in ax.get_title()
    ax = redraw(box, **{"lambda": 0.0}).axes[0]
    assert bars(ax, "advantage A_t") == pytest.approx([0.1, 0.1, 0.3])  # lambda = 0: the one-step TD errors
    ax = redraw(box, gamma=0.5, **{"lambda": 1.0}).axes[0]
    # the discounted return minus the value: 0.25 - 0.5, 0.5 - 0.6, 1 - 0.7
    assert bars(ax, "advantage A_t") == pytest.approx([-0.25, -0.1, 0.3])


@pytest.mark.parametrize("use_std", [True, False])
def test_group_advantage_explorer_draws_each_groups_advantages(use_std):
    box = widgets.group_advantage_explorer(torch.tensor([1.0, 0.0, 0.5]), seed=3)
    for G in (4, 6):
        ax = redraw(box, G=G, **{"divide by group std": use_std}).axes[0]
        (drawn,) = ax.containers  # the bars (the shading behind every other group is a patch too)
        assert len(drawn) == 3 * G
        rewards = [1.0 if same_colour(p, "pos") else 0.0 for p in drawn]
        assert all(same_colour(p, "pos") or same_colour(p, "neg") for p in drawn)
        assert rewards[:G] == [1.0] * G and rewards[G : 2 * G] == [0.0] * G  # p = 1 and p = 0
        expected = [a for g in range(3) for a in group_advantage_by_hand(rewards[g * G : (g + 1) * G], use_std)]
        assert [p.get_height() for p in drawn] == pytest.approx(expected, abs=1e-6)
        all_equal = sum(len(set(rewards[g * G : (g + 1) * G])) == 1 for g in range(3))
        assert f"G = {G}, " in ax.get_title() and f"{all_equal} of 3 groups all-equal" in ax.get_title()


def _first_digit_low(completion: str, answer: int, finished: bool) -> float:
    return 1.0 if completion[:1] in ("0", "1", "2", "3") else 0.0


def test_temperature_explorer_draws_the_group_it_sampled(tiny_policy):
    model, tokenizer = tiny_policy
    box = widgets.temperature_explorer(model, tokenizer, "07+85+29=", 121, _first_digit_low, group_size=8)
    entropy = {}
    for T in (0.1, 1.5):
        ax = redraw(box, temperature=T).axes[0]
        texts = [t.get_text() for t in ax.get_yticklabels()]  # the first characters survive the shortening
        rewards = [_first_digit_low(t, 121, True) for t in texts]
        widths = [p.get_width() for p in ax.patches]  # horizontal bars: the width is the advantage
        assert len(texts) == 8 and [same_colour(p, "pos") for p in ax.patches] == [r == 1.0 for r in rewards]
        expected = [0.0] * 8 if len(set(rewards)) == 1 else group_advantage_by_hand(rewards)
        assert widths == pytest.approx(expected, abs=1e-5)
        title = ax.get_title()
        assert title.startswith(f"T = {T:.2f}: {int(sum(rewards))}/8 right, entropy ")
        entropy[T] = float(title.split("entropy ")[1].split()[0])
    assert entropy[0.1] < entropy[1.5]  # colder sampling, a narrower distribution


def test_trl_loss_type_explorer_draws_each_normaliser():
    box = widgets.trl_loss_type_explorer(max_completion_length=32)
    fig = redraw(box, **{"right length": 8, "wrong length": 24})
    per_token, per_answer = fig.axes[:2]
    right = "right answer, A = +1, 8 tokens"
    wrong = "wrong answer, A = -1, 24 tokens"
    # B = 2 answers, one process. grpo: 1 / (B |o_i|); bnpo and dapo: 1 / (all valid tokens, 8 + 24);
    # dr_grpo: 1 / (B * max_completion_length)
    assert bars(per_token, right) == pytest.approx([1 / 16, 1 / 32, 1 / 32, 1 / 64])
    assert bars(per_token, wrong) == pytest.approx([1 / 48, 1 / 32, 1 / 32, 1 / 64])
    assert bars(per_answer, right) == pytest.approx([8 / 16, 8 / 32, 8 / 32, 8 / 64])
    assert bars(per_answer, wrong) == pytest.approx([24 / 48, 24 / 32, 24 / 32, 24 / 64])
    assert [t.get_text() for t in per_token.get_xticklabels()] == ["grpo", "bnpo", "dapo", "dr_grpo"]
    assert "0.33x as hard" in fig._suptitle.get_text() and "(whole answer 1.00x)" in fig._suptitle.get_text()
    fig = redraw(box, **{"right length": 4, "wrong length": 4})
    assert bars(fig.axes[0], "right answer, A = +1, 4 tokens") == pytest.approx([1 / 8, 1 / 8, 1 / 8, 1 / 64])


def test_zero_std_explorer_counts_the_groups_that_all_agree(tiny_policy):
    model, tokenizer = tiny_policy
    prompts, answers = ["07+85+29=", "10+20+30=", "11+22+33=", "01+02+04="], [121, 60, 66, 7]

    def pays_even_answers(completion: str, answer: int, finished: bool) -> float:
        return float(answer % 2 == 0)  # whatever was written: a group is all-right or all-wrong

    box = widgets.zero_std_explorer(model, tokenizer, prompts, answers, pays_even_answers, group_size=4)
    for T in (0.3, 1.2):
        ax = redraw(box, temperature=T).axes[0]
        assert bars(ax) == [0.0, 4.0, 4.0, 0.0]
        assert [same_colour(p, "pos") for p in ax.patches] == [False, True, True, False]
        assert ax.get_title().startswith(f"T = {T:.2f}: 4 of 4 groups have zero std")


def _summary(steps: int, accuracy: float, seed: int) -> dict:
    return {
        "seed": seed,
        "before": {"accuracy": 0.3},
        "after": {"accuracy": accuracy},
        "steps": steps,
        "train_seconds": 90.0,
        "peak_memory_mb": 100.0,
        "history": [{"step": steps, "samples_generated": 128 * steps}],
    }


def test_seed_spread_explorer_draws_the_seeds_it_is_given():
    results = {
        "grpo": [_summary(10, 0.5, 0), _summary(12, 0.6, 1), _summary(14, 0.7, 2)],
        "dapo": [_summary(20, 0.5, 0), _summary(23, 0.62, 1), _summary(24, 0.7, 2)],
    }
    box = widgets.seed_spread_explorer(results, metrics=["steps", "final"], baseline="grpo")
    ax = redraw(box, metric="steps", seeds=3).axes[0]
    assert bars(ax) == pytest.approx([12.0, 67 / 3])  # the means
    dots = [c.get_offsets()[:, 1].tolist() for c in ax.collections if isinstance(c, PathCollection)]
    assert dots == [[10.0, 12.0, 14.0], [20.0, 23.0, 24.0]]
    # Paired by hand: differences 10, 11, 10, t = (31/3) / (sqrt(1/3) / sqrt(3)) = 31 on 2 df,
    # p = 1 - 31 / sqrt(31^2 + 2) = 0.001 < 0.05
    assert "3 seed(s)" in ax.get_title() and "dapo +10.3*" in ax.get_title()
    ax = redraw(box, seeds=1).axes[0]
    assert bars(ax) == pytest.approx([10.0, 20.0]) and "one seed: no way to tell noise" in ax.get_title()
    ax = redraw(box, metric="final", seeds=3).axes[0]
    assert bars(ax) == pytest.approx([0.6, 1.82 / 3]) and ax.get_title().endswith("dapo +0.00667")  # t = 1: no star
