"""Sliders that redraw a plot in place: move a knob, watch the effect.

Each function returns an ``ipywidgets`` widget; display it as a cell's last line. The plots come
from ``viz.py``; this file only wires controls to them.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch

from . import viz
from .advantages import gae, group_advantages


def explore(draw, **controls):
    """``draw(**values)`` redrawn whenever one of ``controls`` (ipywidgets) moves."""
    import ipywidgets as w

    def show(**values):
        draw(**values)
        plt.show()

    box = w.interactive(show, **controls)
    box.layout = w.Layout(border="1px solid #ddd", padding="4px")
    return box


def _float(value, lo, hi, step, description, fmt=".2f"):
    import ipywidgets as w

    return w.FloatSlider(value=value, min=lo, max=hi, step=step, description=description, readout_format=fmt,
                         continuous_update=False, style={"description_width": "initial"})


def clip_explorer(eps_low: float = 0.2, eps_high: float | None = None, asymmetric: bool = False):
    """PPO's clipped objective for A > 0 and A < 0 with eps sliders (eps_high too when ``asymmetric``)."""
    controls = {"eps_low": _float(eps_low, 0.01, 0.6, 0.01, "eps (low)")}
    if asymmetric:
        controls["eps_high"] = _float(eps_high if eps_high is not None else eps_low, 0.01, 0.6, 0.01, "eps_high")
    return explore(lambda eps_low, eps_high=None: viz.plot_clipped_objective(eps_low, eps_high), **controls)


def gae_explorer(rewards: list[float], values: list[float], tokens: list[str] | None = None):
    """GAE advantages of one completion with gamma and lambda sliders."""

    def draw(gamma, lam):
        r = torch.tensor([rewards], dtype=torch.float64)
        v = torch.tensor([values], dtype=torch.float64)
        adv, ret = gae(r, v, torch.ones_like(r), gamma, lam)
        viz.plot_token_values(
            {"reward r_t": rewards, "value V(s_t)": values, "advantage A_t": adv[0].tolist()}, tokens,
            title=f"GAE with gamma={gamma:.2f}, lambda={lam:.2f}: lambda=0 is one-step TD, lambda=1 the full return",
        )

    return explore(draw, gamma=_float(1.0, 0.5, 1.0, 0.01, "gamma"), lam=_float(0.95, 0.0, 1.0, 0.05, "lambda"))


def group_advantage_explorer(correct_prob: torch.Tensor, seed: int = 0, max_group: int = 16):
    """Sample binary rewards for a few prompts of given difficulty; G slider, std on/off."""
    import ipywidgets as w

    def draw(G, use_std):
        gen = torch.Generator().manual_seed(seed)
        rewards = torch.bernoulli(correct_prob.repeat_interleave(G), generator=gen)
        adv = group_advantages(rewards, G, scale="group" if use_std else "none")
        n_zero = int(sum(1 for g in rewards.view(-1, G) if g.min() == g.max()))
        viz.plot_group_advantages(rewards, adv, G, title=f"G = {G}, {'divided by std' if use_std else 'no std (Dr. GRPO)'}: "
                                  f"{n_zero} of {len(correct_prob)} groups all-equal, so all-zero advantages")

    G = w.IntSlider(value=4, min=2, max=max_group, step=1, description="G", continuous_update=False)
    std = w.Checkbox(value=True, description="divide by group std")
    return explore(draw, G=G, use_std=std)


def temperature_explorer(model, tokenizer, prompt: str, answer: int, reward_fn, group_size: int = 8, seed: int = 0):
    """Sample one group at the slider's temperature: lower T, less spread, fewer useful groups."""
    import ipywidgets as w

    from .rollout import encode_prompts, sample_group
    from .tasks import score_completions

    def draw(temperature):
        ids, mask = encode_prompts(tokenizer, [prompt])
        gen = torch.Generator().manual_seed(seed)
        ro = sample_group(model, tokenizer, ids, mask, group_size, 32, temperature, gen)
        rewards = torch.tensor(score_completions(reward_fn, ro.texts, [answer] * group_size, ro.finished.tolist()))
        adv = group_advantages(rewards, group_size)
        ent = float((ro.entropy * ro.completion_mask).sum() / ro.completion_mask.sum())
        viz.plot_group(ro.texts, rewards, adv, title=f"T = {temperature:.2f}: {int(rewards.sum())}/{group_size} right, "
                       f"entropy {ent:.2f} nats/token")

    T = w.FloatSlider(value=1.0, min=0.1, max=2.0, step=0.1, description="temperature", continuous_update=False,
                      style={"description_width": "initial"})
    return explore(draw, temperature=T)
