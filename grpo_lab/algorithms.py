"""The algorithms as named presets: each one is GRPO with a few visible fields changed.

Read ``PRESETS`` top to bottom and the family tree is there::

    PPO (critic, GAE, KL in the reward)
     └─ GRPO (no critic: group-relative advantages; k3 KL in the loss)
         ├─ Dr. GRPO  no std division, constant normaliser            (Liu et al. 2025)
         ├─ DAPO      clip-higher, dynamic sampling, token mean, overlong shaping (Yu et al. 2025)
         ├─ GSPO      sequence-level ratio with a tiny clip range       (Zheng et al. 2025)
         └─ GFPO      sample more, train on the k shortest              (Shrivastava et al. 2025)

Hyper-parameters are the papers' where they carry over to a 1M-parameter model, and say so
where they do not (e.g. learning rates, and G and k scaled down with the batch).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from .core.advantages import GFPO_METRICS, SCALES
from .core.checks import check_choice
from .core.kl import KL_KINDS
from .core.losses import AGGREGATIONS, RATIO_LEVELS


@dataclass(frozen=True)
class Algorithm:
    """Everything that distinguishes one algorithm from another. Defaults are GRPO's."""

    name: str = "grpo"
    # --- advantages ---
    advantage: str = "group"
    """'group' (GRPO family: (R - mean) / std per group), 'gae' (PPO: a critic and GAE), or 'gfpo'
    (group statistics over the retained responses only)."""
    scale: str = "group"
    """std used by 'group' advantages: 'group', 'batch', or 'none' (Dr. GRPO: no division)."""
    # --- the policy loss ---
    ratio_level: str = "token"
    """'token' (PPO/GRPO), 'sequence' (GSPO) or 'sequence_token' (GSPO-token)."""
    aggregation: str = "seq_mean_token_mean"
    """'seq_mean_token_mean' (GRPO), 'token_mean' (DAPO, GFPO), 'seq_mean_token_sum_norm' (Dr. GRPO)."""
    clip_low: float = 0.2
    clip_high: float | None = None
    """None: symmetric. DAPO's clip-higher uses 0.28; GSPO 4e-4 (with clip_low 3e-4)."""
    dual_clip: float | None = None
    # --- KL to the reference ---
    beta: float = 0.0
    """KL coefficient. GRPO's paper used 0.04; the lab defaults to 0, as DAPO, Dr. GRPO, GSPO and
    TRL's default do, and still *measures* KL every step."""
    kl_kind: str = "k3"
    kl_in_reward: bool = False
    """PPO/RLHF: fold -beta * k1 into the per-token reward instead of adding KL to the loss."""
    entropy_coef: float = 0.0
    # --- sampling and filters ---
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal and sample more until the batch is full."""
    max_gen_batches: int = 4
    """DAPO: give up refilling after this many generation rounds (train on what was kept)."""
    overlong_filter: bool = False
    """DAPO: mask the loss of truncated completions (off in DAPO's best runs; soft penalty instead)."""
    overlong_penalty: bool = False
    """DAPO eq. 13: add the soft overlong punishment to the reward."""
    overlong_cache: int = 8
    """L_cache: the penalty ramps from max_new_tokens - overlong_cache to max_new_tokens."""
    gfpo_group_size: int | None = None
    """GFPO: how many to sample per prompt (G); the lab's group_size is then k, the number kept."""
    gfpo_metric: str = "length"
    gfpo_adaptive: bool = False
    """GFPO Algorithm 2: k from the prompt's difficulty bucket instead of a fixed k."""
    # --- optimisation ---
    minibatches: int = 1
    """Optimiser steps per rollout (the batch is split); > 1 makes later updates off-policy."""
    epochs: int = 1
    # --- critic (PPO only) ---
    gamma: float = 1.0
    lam: float = 0.95
    vf_coef: float = 0.1
    value_clip: float | None = 0.2
    critic_lr: float = 1e-3
    critic_warmup_steps: int = 0
    """PPO: rollouts on which only the critic learns, so the first policy updates see sane values."""

    def __post_init__(self):
        for f in fields(self):  # types first, so a bad value gets a clear message, not a TypeError
            _check_type(f.name, getattr(self, f.name), f.type)
        check_choice("advantage", self.advantage, ("group", "gae", "gfpo"))
        check_choice("scale", self.scale, SCALES)
        check_choice("ratio_level", self.ratio_level, RATIO_LEVELS)
        check_choice("aggregation", self.aggregation, AGGREGATIONS)
        check_choice("kl_kind", self.kl_kind, KL_KINDS)
        check_choice("gfpo_metric", self.gfpo_metric, GFPO_METRICS)
        if self.clip_low < 0 or (self.clip_high is not None and self.clip_high < 0):
            raise ValueError(f"clip_low and clip_high must be >= 0, got {self.clip_low} and {self.clip_high}")
        if self.minibatches < 1 or self.epochs < 1:
            raise ValueError(f"minibatches and epochs must be >= 1, got {self.minibatches} and {self.epochs}")
        if self.beta < 0:
            raise ValueError(f"beta must be >= 0, got {self.beta}")
        if not self.critic_lr > 0:
            raise ValueError(f"critic_lr must be > 0, got {self.critic_lr}")
        if self.advantage == "gfpo" and self.gfpo_group_size is None:
            raise ValueError("gfpo_group_size must be set when advantage='gfpo' (how many to sample per prompt)")

    def changes_from_grpo(self) -> dict:
        """The fields that differ from GRPO's: the whole algorithm, in one dict."""
        base = asdict(PRESETS["grpo"])
        return {k: v for k, v in asdict(self).items() if k != "name" and v != base[k]}

    def with_(self, **changes: Any) -> "Algorithm":
        """A copy with some fields changed (unknown names raise ValueError)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown Algorithm field(s) {unknown}; valid fields: {sorted(known)}")
        return replace(self, **changes)


def _check_type(name: str, value, annotation: str) -> None:
    optional = "None" in annotation
    if value is None:
        if not optional:
            raise ValueError(f"{name} must not be None")
        return
    if annotation.startswith("bool"):
        ok = isinstance(value, bool)
    elif annotation.startswith("int"):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif annotation.startswith("float"):
        ok = (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and value == value
            and abs(value) != float("inf")
        )
    else:
        ok = isinstance(value, str)
    if not ok:
        raise ValueError(f"{name} must be {annotation}, got {value!r}")


GRPO = Algorithm()

PRESETS: dict[str, Algorithm] = {
    "grpo": GRPO,
    "ppo": replace(
        GRPO,
        name="ppo",
        advantage="gae",
        aggregation="token_mean",
        beta=0.05,  # TRL PPOConfig.kl_coef
        kl_kind="k1",
        kl_in_reward=True,
        critic_warmup_steps=4,
        # Several updates per rollout, as PPO is meant to run (K epochs of mini-batch SGD on each
        # batch; 4 epochs in CleanRL, the lm-human-preferences reproduction and TRL's PPOConfig),
        # so the ratio leaves 1 and the clip acts. 2 x 2 rather than 4 epochs: on this task, at
        # lr 1e-4, 4 epochs x 4 mini-batches drove ratios past 30 and stalled learning, while
        # 2 x 2 learned fast with about 1% of tokens clipped (notebook 02 shows the trade-off).
        minibatches=2,
        epochs=2,
    ),
    "dr_grpo": replace(GRPO, name="dr_grpo", scale="none", aggregation="seq_mean_token_sum_norm"),
    "dapo": replace(
        GRPO,
        name="dapo",
        clip_high=0.28,
        dynamic_sampling=True,
        aggregation="token_mean",
        overlong_penalty=True,
    ),
    "gspo": replace(
        GRPO,
        name="gspo",
        ratio_level="sequence",
        clip_low=3e-4,
        clip_high=4e-4,
        minibatches=2,  # fully on-policy GSPO is GRPO; the paper splits each rollout into 4
    ),
    "gfpo": replace(
        GRPO,
        name="gfpo",
        advantage="gfpo",
        aggregation="token_mean",
        gfpo_group_size=16,  # sample 16, keep the group_size (8) shortest
    ),
}


def get_algorithm(name: str, **overrides: Any) -> Algorithm:
    """The preset ``name`` with ``overrides`` applied."""
    check_choice("algo", name, PRESETS)
    return PRESETS[name].with_(**overrides) if overrides else PRESETS[name]
