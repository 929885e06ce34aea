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

from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal, get_args, get_origin, get_type_hints

from .core.advantages import GFPO_METRICS, SCALES
from .core.checks import check_choice, check_number, check_positive_int
from .core.kl import KL_KINDS
from .core.losses import AGGREGATIONS, RATIO_LEVELS

AlgoName = Literal["grpo", "ppo", "dr_grpo", "dapo", "gspo", "gfpo"]
AdvantageKind = Literal["group", "gae", "gfpo"]
# The core formulas name their own choices; a Literal of their tuple keeps one list for both.
Scale = Literal[SCALES]
RatioLevel = Literal[RATIO_LEVELS]
Aggregation = Literal[AGGREGATIONS]
KlKind = Literal[KL_KINDS]
GfpoMetric = Literal[GFPO_METRICS]

MAX_COUNT = 2**31 - 1
"""The largest count a field takes (a 32-bit int: torch and the samplers read counts as such)."""

STAGES = ("sampling", "reward", "advantages", "update", "critic")
"""Where in a step the trainer reads a field: what is sampled and kept, the reward, the advantages,
the policy update, PPO's critic."""


def _is_gae(a: Algorithm) -> bool:
    return a.advantage == "gae"


_CRITIC = (_is_gae, "only the critic uses it (advantage='gae', as in --algo ppo)")
_GFPO = (lambda a: a.advantage == "gfpo", "only GFPO uses it (advantage='gfpo', as in --algo gfpo)")


def _while_on(flag: str, user: str) -> tuple[Callable[[Algorithm], bool], str]:
    """``used_when`` for a field read only while DAPO's boolean field ``flag`` is on."""
    return (lambda a: getattr(a, flag), f"only {user} uses it ({flag}=true, as in --algo dapo)")


def _field(
    default: Any,
    stage: str,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    used_when: tuple[Callable[[Algorithm], bool], str] | None = None,
) -> Any:
    """A field with what the trainer does with it: ``stage`` (one of ``STAGES``), the range it must lie in
    (``low``/``high``; ``low_open``: ``low`` itself excluded), and ``used_when``: ``(condition, why)``
    when the trainer reads it only for some algorithms."""
    assert stage in STAGES
    return field(
        default=default,
        metadata={"stage": stage, "low": low, "high": high, "low_open": low_open, "used_when": used_when},
    )


@dataclass(frozen=True)
class Algorithm:
    """Everything that distinguishes one algorithm from another. Defaults are GRPO's.

    Every field is checked when an ``Algorithm`` is made (type, choice, range), so a bad value is refused
    with one line before any work, never at the first update.
    """

    name: str = "grpo"
    """The preset this was made from; not a setting (``with_`` refuses to change it)."""
    # --- advantages ---
    advantage: AdvantageKind = _field("group", "advantages")
    """'group' (GRPO family: (R - mean) / std per group), 'gae' (PPO: a critic and GAE), or 'gfpo'
    (group statistics over the retained responses only)."""
    scale: Scale = _field(
        "group",
        "advantages",
        used_when=(lambda a: a.advantage == "group", "only group advantages use it (advantage='group')"),
    )
    """std used by 'group' advantages: 'group', 'batch', or 'none' (Dr. GRPO: no division)."""
    # --- the policy loss ---
    ratio_level: RatioLevel = _field("token", "update")
    """'token' (PPO/GRPO), 'sequence' (GSPO) or 'sequence_token' (GSPO-token)."""
    aggregation: Aggregation = _field("seq_mean_token_mean", "update")
    """'seq_mean_token_mean' (GRPO), 'token_mean' (DAPO, GFPO), 'seq_mean_token_sum_norm' (Dr. GRPO)."""
    clip_low: float = _field(0.2, "update", low=0)
    clip_high: float | None = _field(None, "update", low=0)
    """None: symmetric. DAPO's clip-higher uses 0.28; GSPO 4e-4 (with clip_low 3e-4)."""
    dual_clip: float | None = _field(None, "update", low=1, low_open=True)
    """Dual-clip PPO's c (> 1): a negative-advantage token's loss is capped at c times its advantage."""
    # --- KL to the reference ---
    beta: float = _field(0.0, "update", low=0)
    """KL coefficient. GRPO's paper used 0.04; the lab defaults to 0, as DAPO, Dr. GRPO, GSPO and
    TRL's default do, and still *measures* KL every step."""
    kl_kind: KlKind = _field(
        "k3",
        "update",
        used_when=(
            lambda a: a.beta > 0 and not a.kl_in_reward,
            "only a KL term in the loss uses it (beta > 0 and kl_in_reward=false)",
        ),
    )
    kl_in_reward: bool = _field(
        False,
        "reward",
        used_when=(_is_gae, "only the critic's per-token reward uses it (advantage='gae', as in --algo ppo)"),
    )
    """PPO/RLHF: fold -beta * k1 into the per-token reward instead of adding KL to the loss."""
    entropy_coef: float = _field(0.0, "update", low=0)
    """Weight of the entropy bonus (>= 0: a bonus, never a penalty)."""
    # --- sampling and filters ---
    dynamic_sampling: bool = _field(False, "sampling")
    """DAPO: drop groups whose rewards are all equal and sample more until the batch is full."""
    max_gen_batches: int = _field(4, "sampling", low=1, used_when=_while_on("dynamic_sampling", "dynamic sampling"))
    """DAPO: give up refilling after this many generation rounds (train on what was kept)."""
    overlong_filter: bool = _field(False, "sampling")
    """DAPO: mask the loss of truncated completions (off in DAPO's best runs; soft penalty instead)."""
    overlong_penalty: bool = _field(False, "reward")
    """DAPO eq. 13: add the soft overlong punishment to the reward."""
    overlong_cache: int = _field(8, "reward", low=1, used_when=_while_on("overlong_penalty", "the overlong penalty"))
    """L_cache: the penalty ramps from max_new_tokens - overlong_cache to max_new_tokens."""
    gfpo_group_size: int | None = _field(None, "sampling", low=2, used_when=_GFPO)
    """GFPO: how many to sample per prompt (G); the lab's group_size is then k, the number kept."""
    gfpo_metric: GfpoMetric = _field("length", "sampling", used_when=_GFPO)
    gfpo_adaptive: bool = _field(False, "sampling", used_when=_GFPO)
    """GFPO Algorithm 2: k from the prompt's difficulty bucket instead of a fixed k."""
    # --- optimisation ---
    minibatches: int = _field(1, "update", low=1)
    """Optimiser steps per rollout (the batch is split); > 1 makes later updates off-policy."""
    epochs: int = _field(1, "update", low=1)
    target_kl: float | None = _field(
        None,
        "update",
        low=0,
        low_open=True,
        used_when=(lambda a: a.minibatches * a.epochs > 1, "only several updates per rollout can stop early"),
    )
    """Skip a rollout's remaining updates once the approx-KL to the policy that sampled passes it. Checked on each
    mini-batch before its step, as Stable-Baselines3 does (at 1.5 times its ``target_kl``; the lab at the value
    itself): the step that carried the policy past it has been taken, and none after it. CleanRL tests the last
    mini-batch's approx-KL after each epoch, so all of that epoch's steps are taken. With one update per rollout
    the approx-KL is always 0: the command line refuses it there, and in Python it never triggers. Neither TRL
    nor verl has it: ``export`` refuses it."""
    # --- critic (PPO only) ---
    gamma: float = _field(1.0, "advantages", low=0, high=1, used_when=_CRITIC)
    lam: float = _field(0.95, "advantages", low=0, high=1, used_when=_CRITIC)
    vf_coef: float = _field(0.1, "critic", low=0, used_when=_CRITIC)
    value_clip: float | None = _field(0.2, "critic", low=0, low_open=True, used_when=_CRITIC)
    critic_lr: float = _field(1e-3, "critic", low=0, low_open=True, used_when=_CRITIC)
    critic_warmup_steps: int = _field(0, "critic", low=0, used_when=_CRITIC)
    """PPO: rollouts on which only the critic learns, so the first policy updates see sane values."""

    def __post_init__(self):
        hints = _hints()
        for f in fields(self):  # types first, so a bad value gets a clear message, not a TypeError
            check_field(f.name, getattr(self, f.name), hints[f.name], f.metadata)
        if self.advantage == "gfpo" and self.gfpo_group_size is None:
            raise ValueError("gfpo_group_size must be set when advantage='gfpo' (how many to sample per prompt)")

    def changes_from_grpo(self) -> dict:
        """The fields that differ from GRPO's: the whole algorithm, in one dict."""
        base = asdict(PRESETS["grpo"])
        return {k: v for k, v in asdict(self).items() if k != "name" and v != base[k]}

    def with_(self, **changes: Any) -> Algorithm:
        """A copy with some fields changed (unknown names, and ``name``, raise ValueError)."""
        known = set(SETTINGS)
        if "name" in changes:
            raise ValueError(
                f"name is the preset's name, not a setting, got name={changes['name']!r}; "
                "pick the preset itself (--algo) and change its fields"
            )
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown Algorithm field(s) {unknown}; valid fields: {sorted(known)}")
        return replace(self, **changes)


def _hints() -> dict[str, Any]:
    return get_type_hints(Algorithm)


def check_field(name: str, value: object, annotation: Any, metadata: Any = None) -> None:
    """``value`` fits the field ``name``: its type (``int``, ``float``, ``bool``, ``str``, a ``Literal``,
    each maybe ``| None``) and its range from the field's metadata. One line naming it when it does not."""
    args = get_args(annotation)
    optional = type(None) in args
    if value is None:
        if not optional:
            raise ValueError(f"{name} must not be None")
        return
    base = next((a for a in args if a is not type(None)), annotation) if optional else annotation
    meta = metadata or {}
    if get_origin(base) is Literal:
        check_choice(name, value, get_args(base))
    elif base is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {value!r}")
    elif base is int:
        low = meta.get("low")
        check_positive_int(name, value, minimum=0 if low is None else int(low), maximum=MAX_COUNT)
    elif base is float:
        check_number(name, value, meta.get("low"), meta.get("high"), low_open=meta.get("low_open", False))
    elif not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")


def choices(name: str) -> tuple[str, ...]:
    """The values an ``Algorithm`` choice field takes, from its ``Literal`` type."""
    return get_args(_hints()[name])


SETTINGS: tuple[str, ...] = tuple(f.name for f in fields(Algorithm) if f.name != "name")
"""The fields ``with_``, ``--set`` and ``--vary`` may change."""


def fields_of_stage(stage: str) -> tuple[str, ...]:
    """The fields the trainer reads at ``stage`` (one of ``STAGES``)."""
    check_choice("stage", stage, STAGES)
    return tuple(f.name for f in fields(Algorithm) if f.metadata.get("stage") == stage)


UPDATE_FIELDS = fields_of_stage("update")
"""Fields that act only in the policy update: those a paired comparison may change between arms
(a field that acts while the batch is collected would be silently shared by every arm)."""


def unused_fields(algo: Algorithm, names: Collection[str]) -> dict[str, str]:
    """Of the Algorithm field ``names``, those the trainer does not read for ``algo``, each with why: set
    there, they would change nothing, so the command line refuses them rather than ignore them."""
    out = {}
    for f in fields(Algorithm):
        used_when = f.metadata.get("used_when")
        if f.name in names and used_when is not None and not used_when[0](algo):
            out[f.name] = used_when[1]
    return out


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
        # lr 1e-4, 4 epochs x 4 mini-batches drove ratios past 30 and learned far less per rollout
        # over five seeds, while 2 x 2 learned fast with about 1.5% of tokens clipped (notebook 02).
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
        # DAPO's paper splits each rollout (512 prompts x 16 answers) into mini-batches of 512 answers: 16 updates
        # per rollout, at lr 1e-6. Scaled to the lab's 16 x 8 rollout and lr 1e-4, 4 mini-batches of 32 answers:
        # enough for the ratio to leave 1 and the clip, and clip-higher, to act (notebook 05 shows both).
        minibatches=4,
    ),
    "gspo": replace(
        GRPO,
        name="gspo",
        ratio_level="sequence",
        clip_low=3e-4,
        clip_high=4e-4,
        minibatches=4,  # as the paper splits each rollout; fully on-policy GSPO would be GRPO
    ),
    "gfpo": replace(
        GRPO,
        name="gfpo",
        advantage="gfpo",
        aggregation="token_mean",
        gfpo_group_size=16,  # sample 16, keep the group_size (8) shortest
    ),
}


if tuple(PRESETS) != get_args(AlgoName):
    raise AssertionError(f"AlgoName must list the presets {tuple(PRESETS)}")


def get_algorithm(name: str, /, **overrides: Any) -> Algorithm:
    """The preset ``name`` with ``overrides`` applied."""
    check_choice("algo", name, get_args(AlgoName))
    return PRESETS[name].with_(**overrides) if overrides else PRESETS[name]
