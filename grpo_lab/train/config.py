"""``TrainConfig``: the settings of one run (the algorithm's own settings live in ``Algorithm``).

Each field is declared once, here. The command line's flags are generated from the fields: ``flag`` in a
field's metadata names the flag where it is not the field's name (``prompts_per_step`` is ``--prompts``),
``help`` says what it does; a field without ``help`` has no flag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from ..algorithms import AlgoName, Algorithm, get_algorithm
from ..core.checks import check_choice, check_positive_int
from ..core.losses import ROLLOUT_IS_MODES
from ..lab.tasks import TASKS, TaskName, check_data_dir

RolloutIsMode = Literal[ROLLOUT_IS_MODES]

MAX_SEED = 2**32 - 1
"""Seeds are 32-bit, as NumPy's are: larger ones overflow the per-step generators derived from them."""


def _flag(default: object, help: str, flag: str | None = None, **more: object) -> object:
    """A field with a command-line flag: ``help``, and ``flag`` where it is not ``--field-name``."""
    meta = {"help": help} | ({"flag": flag} if flag else {})
    if callable(default):
        return field(default_factory=default, metadata=meta | more)
    return field(default=default, metadata=meta | more)


@dataclass
class TrainConfig:
    """The run's settings (the algorithm's own settings live in ``Algorithm``)."""

    algo: AlgoName = _flag("grpo", "the algorithm (a preset of Algorithm fields)")
    model: str = _flag(
        "tiny-sum3", "'tiny-sum3' or 'tiny-sum3-long' (shipped), a folder (a saved policy too), or a Hugging Face name"
    )
    """'tiny-sum3' or 'tiny-sum3-long' (shipped in assets/), a local folder, or a Hugging Face model name."""
    task: TaskName = _flag(
        "sum3", "default: sum3 for the lab's own model (and policies trained from it), words otherwise"
    )
    data_dir: str | None = _flag(
        None, "task gsm8k only: a folder with GSM8K's train.jsonl and test.jsonl (default: the Hugging Face hub)"
    )
    """Task gsm8k only: a folder holding GSM8K's own files, train.jsonl and test.jsonl (JSON lines with "question"
    and "answer", the answer ending '#### <integer>'); None reads openai/gsm8k from the Hugging Face hub."""
    steps: int = _flag(100, "training steps")
    seed: int = _flag(0, f"random seed, an integer in [0, {MAX_SEED}]")
    prompts_per_step: int = _flag(16, "prompts per step", flag="--prompts")
    group_size: int = _flag(8, "G: completions per prompt (GFPO: kept per prompt)")
    """G: completions per prompt (for GFPO: how many are *kept*; it samples gfpo_group_size)."""
    max_new_tokens: int = _flag(32, "longest completion, in tokens")
    temperature: float = _flag(1.0, "sampling temperature")
    lr: float = _flag(1e-4, "the policy's learning rate")
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    track_kl: bool = True
    """Measure KL to the reference every step even when beta = 0 (one extra forward pass)."""
    kl_stop: float | None = _flag(None, "stop (and save) when KL exceeds this")
    """Stop the run (and save a checkpoint) when the measured KL exceeds this."""
    max_seconds: float | None = _flag(None, "stop after this much training time", flag="--seconds")
    """Stop once this much training time has passed (a time budget instead of a step count)."""
    max_samples: int | None = _flag(None, "stop once this many completions have been sampled (a sample budget)")
    """Stop once this many completions have been sampled (a sample budget: DAPO's refills and GFPO's
    extra samples count, so algorithms that sample more per step get fewer steps)."""
    device: str | None = _flag(None, "cpu or cuda (default: cuda when available)")
    sampler_noise: float = _flag(
        0.0,
        "sample from a copy of the policy whose weights are each scaled by (1 + this x N(0,1)), a new copy "
        "every step: a large, random sampler/trainer mismatch made on purpose, not a model of vLLM's kernel "
        "differences (default: 0, none)",
    )
    """A sampler/trainer mismatch made on purpose: the completions come from a perturbed copy of the
    policy (its log-probs are the rollout's ``sample_logp``), the loss from the policy itself."""
    rollout_is: RolloutIsMode | None = _flag(
        None, "correct the sampler/trainer mismatch as TRL's vllm_importance_sampling_mode does (default: none)"
    )
    """Weight each token's loss by ``core.losses.rollout_is_weight``: TRL 1.16's four modes."""
    rollout_is_max: float = _flag(3.0, "C_max of --rollout-is: the clamp (truncate) or the cut-off (mask)")
    """TRL's ``vllm_importance_sampling_clip_max`` (its default 3.0); the lower bound is TRL's default, none."""
    system_prompt: str | None = None
    algo_overrides: dict = field(default_factory=dict)

    def __post_init__(self):
        check_choice("task", self.task, TASKS)
        check_data_dir(self.task, self.data_dir)
        for name in ("steps", "prompts_per_step", "group_size", "max_new_tokens"):
            check_positive_int(name, getattr(self, name), minimum=0 if name == "steps" else 1)
        check_positive_int("seed", self.seed, minimum=0, maximum=MAX_SEED)
        for name in ("temperature", "lr", "weight_decay", "grad_clip", "kl_stop", "max_seconds", "sampler_noise",
                     "rollout_is_max"):  # fmt: skip
            v = getattr(self, name)  # a string or None here would fail later with a TypeError deep in torch
            if not (v is None and name in ("kl_stop", "max_seconds")) and (
                isinstance(v, bool) or not isinstance(v, (int, float))
            ):
                raise ValueError(f"{name} must be a number, got {type(v).__name__} {v!r}")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number > 0, got {self.temperature}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr}")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay}")
        if not (self.sampler_noise >= 0 and math.isfinite(self.sampler_noise)):
            raise ValueError(f"sampler_noise must be a finite number >= 0, got {self.sampler_noise}")
        if self.rollout_is is not None:
            check_choice("rollout_is", self.rollout_is, ROLLOUT_IS_MODES)
        if not (self.rollout_is_max > 0 and math.isfinite(self.rollout_is_max)):
            raise ValueError(f"rollout_is_max must be a finite number > 0, got {self.rollout_is_max}")
        if self.rollout_is is None and self.rollout_is_max != 3.0:  # read only with a correction: never ignore it
            raise ValueError(
                f"rollout_is_max is the bound of rollout_is, which is not set; got rollout_is_max={self.rollout_is_max}"
            )
        if not self.grad_clip > 0:
            raise ValueError(f"grad_clip must be > 0, got {self.grad_clip}")
        if not isinstance(self.algo_overrides, dict):
            raise ValueError(
                f"algo_overrides must be a dict of Algorithm fields, got {type(self.algo_overrides).__name__}"
            )
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds must be > 0 or None, got {self.max_seconds}")
        if self.max_samples is not None:
            check_positive_int("max_samples", self.max_samples)
        if self.kl_stop is not None and not self.kl_stop > 0:
            raise ValueError(f"kl_stop must be > 0 or None, got {self.kl_stop}")
        algo = self.algorithm()
        if algo.advantage in ("group", "gfpo") and self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 for {algo.name} (a group needs a spread), got {self.group_size}")
        if algo.overlong_penalty and not 0 < algo.overlong_cache <= self.max_new_tokens:
            raise ValueError(
                f"overlong_cache must be in (0, max_new_tokens={self.max_new_tokens}] for the overlong penalty, "
                f"got {algo.overlong_cache}"
            )
        if algo.advantage == "gfpo" and algo.gfpo_group_size < self.group_size:
            raise ValueError(
                f"gfpo_group_size must be >= group_size (k <= G), got G={algo.gfpo_group_size} < k={self.group_size}"
            )

    def algorithm(self) -> Algorithm:
        return get_algorithm(self.algo, **self.algo_overrides)
