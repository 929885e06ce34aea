"""Sliders that redraw a plot in place: move a knob, watch the effect.

Each function returns an ``ipywidgets`` widget; display it as a cell's last line. The plots come
from ``viz.py``; this file only wires controls to them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import torch

from ..core.advantages import gae, gfpo_advantages, gfpo_keep, group_advantages
from ..core.checks import check_positive_int
from ..core.losses import sequence_log_ratio, token_gradient_weights
from ..core.rewards import soft_overlong_penalty
from . import viz

if TYPE_CHECKING:
    import ipywidgets
    from transformers import PreTrainedTokenizerBase


def explore(draw: Callable[..., object], **controls: ipywidgets.Widget) -> ipywidgets.interactive:
    """``draw(**values)`` redrawn whenever one of ``controls`` (ipywidgets) moves."""
    import ipywidgets as w

    def show(**values):
        draw(**values)
        plt.show()

    box = w.interactive(show, **controls)
    box.layout = w.Layout(border="1px solid #ddd", padding="4px")
    return box


# Every slider redraws when released, not while dragged (each redraw is a whole figure), and shows its
# label whole rather than cut to a fixed width.
_SLIDER_LOOK = {"continuous_update": False, "style": {"description_width": "initial"}}


def _float(
    value: float, lo: float, hi: float, step: float, description: str, fmt: str = ".2f"
) -> ipywidgets.FloatSlider:
    import ipywidgets as w

    return w.FloatSlider(
        value=value, min=lo, max=hi, step=step, description=description, readout_format=fmt, **_SLIDER_LOOK
    )


def _int_slider(value: int, lo: int, hi: int, description: str) -> ipywidgets.IntSlider:
    import ipywidgets as w

    return w.IntSlider(value=value, min=lo, max=hi, step=1, description=description, **_SLIDER_LOOK)


def clip_explorer(
    clip_low: float = 0.2, clip_high: float | None = None, asymmetric: bool = False
) -> ipywidgets.interactive:
    """PPO's clipped objective for A > 0 and A < 0 with a clip slider (``clip_high`` too when ``asymmetric``)."""
    controls = {"clip_low": _float(clip_low, 0.01, 0.6, 0.01, "clip_low")}
    if asymmetric:
        controls["clip_high"] = _float(clip_high if clip_high is not None else clip_low, 0.01, 0.6, 0.01, "clip_high")
    return explore(lambda clip_low, clip_high=None: viz.plot_clipped_objective(clip_low, clip_high), **controls)


def gae_explorer(rewards: list[float], values: list[float], tokens: list[str] | None = None) -> ipywidgets.interactive:
    """GAE advantages of one completion with gamma and lambda sliders."""

    def draw(gamma, lam):
        r = torch.tensor([rewards], dtype=torch.float64)
        v = torch.tensor([values], dtype=torch.float64)
        adv, ret = gae(r, v, torch.ones_like(r), gamma, lam)
        viz.plot_token_values(
            {"reward r_t": rewards, "value V(s_t)": values, "advantage A_t": adv[0].tolist()},
            tokens,
            title=f"GAE with gamma={gamma:.2f}, lambda={lam:.2f}: lambda=0 is one-step TD, lambda=1 the full return",
        )

    return explore(draw, gamma=_float(1.0, 0.5, 1.0, 0.01, "gamma"), lam=_float(0.95, 0.0, 1.0, 0.05, "lambda"))


def group_advantage_explorer(correct_prob: torch.Tensor, seed: int = 0, max_group: int = 16) -> ipywidgets.interactive:
    """Sample binary rewards for a few prompts of given difficulty; G slider, std on/off."""
    import ipywidgets as w

    def draw(G, use_std):
        gen = torch.Generator().manual_seed(seed)
        rewards = torch.bernoulli(correct_prob.repeat_interleave(G), generator=gen)
        adv = group_advantages(rewards, G, scale="group" if use_std else "none")
        n_zero = int(sum(1 for g in rewards.view(-1, G) if g.min() == g.max()))
        viz.plot_group_advantages(
            rewards,
            adv,
            G,
            title=f"G = {G}, {'divided by std' if use_std else 'no std (Dr. GRPO)'}: "
            f"{n_zero} of {len(correct_prob)} groups all-equal, so all-zero advantages",
        )

    G = _int_slider(4, 2, max_group, "G")
    std = w.Checkbox(value=True, description="divide by group std")
    return explore(draw, G=G, use_std=std)


def temperature_explorer(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    answer: int,
    reward_fn: Callable[[str, int, bool], float],
    group_size: int = 8,
    seed: int = 0,
) -> ipywidgets.interactive:
    """Sample one group at the slider's temperature: lower T, less spread, fewer useful groups."""

    from ..lab.rollout import encode_prompts, sample_group
    from ..lab.tasks import score_completions

    def draw(temperature):
        ids, mask = encode_prompts(tokenizer, [prompt])
        gen = torch.Generator().manual_seed(seed)
        ro = sample_group(model, tokenizer, ids, mask, group_size, 32, temperature, gen)
        rewards = torch.tensor(score_completions(reward_fn, ro.texts, [answer] * group_size, ro.finished.tolist()))
        adv = group_advantages(rewards, group_size)
        ent = float((ro.entropy * ro.completion_mask).sum() / ro.completion_mask.sum())
        viz.plot_group(
            ro.texts,
            rewards,
            adv,
            title=f"T = {temperature:.2f}: {int(rewards.sum())}/{group_size} right, entropy {ent:.2f} nats/token",
        )

    return explore(draw, temperature=_float(1.0, 0.1, 2.0, 0.1, "temperature"))


def gspo_ratio_explorer(log_ratios: dict, mask: torch.Tensor, advantages: torch.Tensor) -> ipywidgets.interactive:
    """GSPO's ratios after n off-policy mini-batch steps, with the clip range on a log slider.

    ``log_ratios`` maps a label (e.g. the learning rate) to a list of ``[B, T]`` token log-ratios
    ``log pi_theta - log pi_old``, one per mini-batch step taken; ``advantages`` is ``[B]``.
    """
    import ipywidgets as w

    labels = list(log_ratios)
    if not labels or any(len(v) == 0 for v in log_ratios.values()):
        raise ValueError(
            f"log_ratios must map at least one label to a non-empty list of [B, T] tensors, got {len(labels)} label(s)"
        )
    n_steps = len(log_ratios[labels[0]])

    def draw(label, steps, clip):
        lr = log_ratios[label][steps - 1]
        seq = sequence_log_ratio(lr, mask)
        valid = torch.as_tensor(mask).bool()
        share_seq = viz.clip_share(seq, advantages, clip)
        share_tok = viz.clip_share(lr[valid], torch.as_tensor(advantages).unsqueeze(1).expand_as(lr)[valid], clip)
        fig, axes = plt.subplots(1, 2, figsize=(12, 3.4), gridspec_kw={"width_ratios": [1.4, 1]})
        viz.plot_gspo_ratios(
            lr,
            mask,
            clip,
            ax=axes[0],
            title=f"{label}, after {steps} mini-batch step(s): "
            f"1 ± {clip:.1e} clips {share_seq:.0%} of sequences, {share_tok:.0%} of tokens",
        )
        viz.plot_clip_share_vs_eps(lr, mask, advantages, clip, ax=axes[1])
        fig.tight_layout()

    label = w.Dropdown(options=labels, value=labels[-1], description="run")
    steps = _int_slider(1, 1, n_steps, "mini-batch steps")
    clip = w.FloatLogSlider(
        value=4e-4,
        base=10,
        min=-6,
        max=0,
        step=0.25,
        description="clip range",
        readout_format=".1e",
        continuous_update=False,
    )
    return explore(draw, label=label, steps=steps, clip=clip)


def gfpo_explorer(
    texts: list[list[str]], correct: torch.Tensor, lengths: torch.Tensor | None
) -> ipywidgets.interactive:
    """GFPO's filter on real samples: sliders for G (how many sampled) and k (how many kept), and the metric.

    ``texts[p]`` are the completions sampled for prompt p; ``correct`` and ``lengths`` are
    ``[P, G_max]``. The first G samples of each prompt are the group.
    """
    import ipywidgets as w

    correct = torch.as_tensor(correct, dtype=torch.float32)
    lengths = torch.as_tensor(lengths)
    if correct.dim() != 2 or lengths.shape != correct.shape or len(texts) != correct.shape[0]:
        raise ValueError(
            f"correct and lengths must both be [P, G_max] with P = len(texts) = {len(texts)}, "
            f"got {tuple(correct.shape)} and {tuple(lengths.shape)}"
        )
    P, G_max = correct.shape

    def draw(G, k, metric):
        k = min(k, G)
        r, L = correct[:, :G].reshape(-1), lengths[:, :G].reshape(-1)
        keep = gfpo_keep(r, L, G, k, metric=metric)
        adv = gfpo_advantages(r, keep, G)
        fig, axes = plt.subplots(1, P, figsize=(5.2 * P, 0.3 * G + 1.6))
        axes = [axes] if P == 1 else list(axes)
        for p, ax in enumerate(axes):
            sl = slice(p * G, (p + 1) * G)
            kept_r = r[sl][keep[sl]]
            verdict = (
                "ALL ZERO (kept set all equal)"
                if kept_r.min() == kept_r.max()
                else f"{int(kept_r.sum())} right, {int((1 - kept_r).sum())} wrong kept"
            )
            viz.plot_gfpo_group(
                texts[p][:G],
                r[sl],
                keep[sl],
                adv[sl],
                lengths=L[sl],
                ax=ax,
                title=f"prompt {p}: {int(r[sl].sum())}/{G} right; kept {k}: {verdict}",
            )
        fig.suptitle(
            f"GFPO: sample G = {G}, keep the {k} {'shortest' if metric == 'length' else 'most token-efficient'}",
            fontsize=10,
        )
        fig.tight_layout()

    G = _int_slider(min(16, G_max), 2, G_max, "G sampled")
    k = _int_slider(min(8, G_max), 1, G_max, "k kept")
    metric = w.ToggleButtons(options=["length", "token_efficiency"], value="length", description="metric")
    return explore(draw, G=G, k=k, metric=metric)


def _token_weights(lengths, advantages, aggregation: str, max_len: int) -> torch.Tensor:
    """``losses.token_gradient_weights`` with NaN on padding, so a plot leaves those cells blank."""
    weights = token_gradient_weights(lengths, advantages, aggregation, max_len)
    padding = torch.arange(max_len).unsqueeze(0) >= torch.as_tensor(lengths).unsqueeze(1)
    return weights.masked_fill(padding, float("nan"))


def aggregation_explorer(short: int = 4, long: int = 16, max_len: int = 32) -> ipywidgets.interactive:
    """Per-token gradient weights of a short and a long completion, right (A = +1) and wrong
    (A = -1), under the aggregation chosen; sliders for the two lengths."""
    import ipywidgets as w

    check_positive_int("max_len", max_len)
    check_positive_int("short", short, maximum=max_len)
    check_positive_int("long", long, maximum=max_len)
    names = {
        "seq_mean_token_mean": "GRPO: seq-mean-token-mean (1/|o_i| per sequence)",
        "token_mean": "DAPO / TRL default: token-mean (1/sum|o|)",
        "seq_mean_token_sum_norm": f"Dr. GRPO: constant normaliser (1/(B*L_max), L_max={max_len})",
    }

    def draw(short_len, long_len, aggregation):
        lengths = [short_len, long_len, short_len, long_len]
        weights = _token_weights(lengths, [1.0, 1.0, -1.0, -1.0], aggregation, max_len)
        labels = [
            f"right, {short_len} tok",
            f"right, {long_len} tok",
            f"wrong, {short_len} tok",
            f"wrong, {long_len} tok",
        ]
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 2.8), gridspec_kw={"width_ratios": [3, 1]})
        viz.plot_token_weights({names[aggregation]: weights}, labels, axes=[ax])
        total = torch.nan_to_num(weights).sum(dim=1)
        bx.barh(range(4), total.tolist(), color=[viz.COLORS["pos"]] * 2 + [viz.COLORS["neg"]] * 2)
        bx.set_yticks(range(4), labels, fontsize=8)
        bx.invert_yaxis()
        bx.axvline(0, color="black", lw=0.6)
        bx.set_xlabel("push summed over the sequence", fontsize=8)
        per_tok = weights[:, 0].abs()
        bx.set_title(f"per token: short {per_tok[0]:.4f}, long {per_tok[1]:.4f}", fontsize=9)
        fig.tight_layout()

    s = _int_slider(short, 1, max_len, "short length")
    long_slider = _int_slider(long, 1, max_len, "long length")
    agg = w.Dropdown(options=list(names), value="seq_mean_token_mean", description="aggregation")
    return explore(draw, short_len=s, long_len=long_slider, aggregation=agg)


def overlong_penalty_explorer(
    lengths: torch.Tensor | None = None, max_len: int = 32, cache_len: int = 8
) -> ipywidgets.interactive:
    """DAPO's soft overlong penalty with L_max and L_cache sliders (and, if given, a histogram of
    sampled lengths with the share that would be penalised)."""

    soft_overlong_penalty(
        torch.as_tensor(lengths) if lengths is not None else torch.zeros(1), max_len, cache_len
    )  # ValueError on bad input

    def draw(L_max, L_cache):
        viz.plot_overlong_penalty(L_max, min(L_cache, L_max), lengths)

    L_max = _int_slider(max_len, 4, max(64, max_len), "L_max")  # a real model's budget is longer than the lab's 32
    L_cache = _int_slider(cache_len, 1, max(32, max_len // 2), "L_cache")
    return explore(draw, L_max=L_max, L_cache=L_cache)


def trl_loss_type_explorer(max_completion_length: int = 32) -> ipywidgets.interactive:
    """Two answers to one prompt, right (A = +1) and wrong (A = -1): slide their lengths and see, from TRL's own
    ``GRPOTrainer._compute_loss``, how hard each ``loss_type`` pushes each token and each whole answer."""

    from ..scale.trl_bridge import trl_policy_loss

    def draw(len_right, len_wrong):
        T = max(len_right, len_wrong)
        mask = torch.zeros(2, T)
        mask[0, :len_right] = 1
        mask[1, :len_wrong] = 1
        adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
        weights = {}
        for loss_type in ("grpo", "bnpo", "dapo", "dr_grpo"):
            logp = torch.full((2, T), -1.0, dtype=torch.float64, requires_grad=True)
            loss, _ = trl_policy_loss(
                logp, None, adv, mask, loss_type=loss_type, max_completion_length=max_completion_length
            )
            (grad,) = torch.autograd.grad(loss, logp)
            weights[loss_type] = (float(grad[0, 0].abs()), float(grad[1, 0].abs()))
        ratio = weights["grpo"][1] * len_wrong / (weights["grpo"][0] * len_right)
        viz.plot_trl_loss_weights(
            weights,
            (len_right, len_wrong),
            max_completion_length,
            title=f"grpo pushes each token of the {len_wrong}-token wrong answer "
            f"{weights['grpo'][1] / weights['grpo'][0]:.2f}x as hard as the right one's "
            f"(whole answer {ratio:.2f}x); the others weigh every token alike",
        )

    right = _int_slider(8, 1, max_completion_length, "right length")
    wrong = _int_slider(24, 1, max_completion_length, "wrong length")
    return explore(draw, len_right=right, len_wrong=wrong)


def zero_std_explorer(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    answers: list[int],
    reward_fn: Callable[[str, int, bool], float],
    group_size: int = 8,
    seed: int = 0,
) -> ipywidgets.interactive:
    """Sample G completions for each prompt at the slider's temperature and show how many groups
    are all-right or all-wrong (zero std, so zero advantage): cold sampling starves GRPO of signal."""

    from ..lab.rollout import encode_prompts, sample_group
    from ..lab.tasks import score_completions

    device = next(model.parameters()).device
    ids, mask = encode_prompts(tokenizer, prompts, device=device)
    G = group_size

    def draw(temperature):
        gen = torch.Generator(device=device).manual_seed(seed)
        ro = sample_group(model, tokenizer, ids, mask, G, 32, temperature, gen)
        r = torch.tensor(
            score_completions(reward_fn, ro.texts, [a for a in answers for _ in range(G)], ro.finished.tolist())
        )
        right = r.view(-1, G).sum(dim=1)
        colors = [
            viz.COLORS["pos"] if c == G else viz.COLORS["neg"] if c == 0 else viz.COLORS["neutral"]
            for c in right.tolist()
        ]
        zero = sum(1 for c in right.tolist() if c in (0, G))
        ent = float((ro.entropy * ro.completion_mask).sum() / ro.completion_mask.sum())
        fig, ax = plt.subplots(figsize=(8, 3))
        ax.bar(range(len(prompts)), right.tolist(), color=colors)
        ax.set_ylim(0, G + 0.5)
        ax.set_xlabel("prompt (green: all right, red: all wrong, grey: mixed)")
        ax.set_ylabel(f"right answers of G = {G}")
        ax.set_title(
            f"T = {temperature:.2f}: {zero} of {len(prompts)} groups have zero std (no gradient); "
            f"entropy {ent:.2f} nats/token",
            fontsize=10,
        )
        fig.tight_layout()

    return explore(draw, temperature=_float(1.0, 0.05, 2.0, 0.05, "temperature"))


def seed_spread_explorer(
    results: dict, metrics: Sequence[str] | None = None, baseline: str | None = None
) -> ipywidgets.interactive:
    """The bake-off table, one metric at a time: dots per seed, and each algorithm's gap to ``baseline``
    with the first n seeds (slider), marked * where the paired t-test over seeds, Holm-corrected, calls it a
    difference."""
    import ipywidgets as w

    from ..study.histories import RUN_METRICS, paired_against_baseline, run_metrics

    per_run = {a: [run_metrics(s) for s in runs] for a, runs in results.items()}
    metrics = list(metrics or [m for m in RUN_METRICS if any(r[m] is not None for rs in per_run.values() for r in rs)])
    baseline = baseline or next(iter(results))
    max_seeds = min(len(v) for v in results.values())

    def draw(metric, seeds):
        values = {a: [r[metric] for r in rs[:seeds]] for a, rs in per_run.items()}
        if seeds < 2:
            note = "one seed: no way to tell noise"
        elif any(None in v for v in values.values()):
            note = "some runs did not record this metric: no test"
        else:
            try:
                rows = paired_against_baseline({a: rs[:seeds] for a, rs in results.items()}, baseline, metric)
                gaps = ", ".join(f"{r['algo']} {r['diff']:+.3g}{'*' if r['different'] else ''}" for r in rows)
                note = f"vs {baseline} (* = paired over seeds, Holm-corrected p < 0.05): {gaps}"
            except ValueError:  # no spread in the differences (e.g. a step cap every run reached): nothing to test
                note = "the per-seed differences have no spread: no test"
        viz.plot_seed_dots(values, RUN_METRICS[metric][0], title=f"{seeds} seed(s). {note}")

    metric = w.Dropdown(options=metrics, value=metrics[0], description="metric")
    seeds = _int_slider(max_seeds, 1, max_seeds, "seeds")
    return explore(draw, metric=metric, seeds=seeds)
