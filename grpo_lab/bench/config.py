"""What one bench run measures (``BenchConfig``), its arms, the order they run in, and how the
comparison is kept fair (``FAIRNESS``, also written into the result)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.checks import check_positive_int
from ..train.trainer import TrainConfig, Trainer

if TYPE_CHECKING:
    from datasets import Dataset

LAB_ARMS = {
    "lab": (),
    "lab_no_prompt_sharing": ("share_prompt",),
    "lab_no_compaction": ("compact",),
    "lab_no_length_grouping": ("length_grouping",),
}
"""Each lab arm and the ``rollout.SPEEDUPS`` it switches off."""
TRL_ARMS = {
    "trl": {},
    "trl_continuous_batching": {"use_transformers_continuous_batching": True},
}
"""Each TRL arm and the ``GRPOConfig`` settings it adds."""
ARMS = tuple(LAB_ARMS) + tuple(TRL_ARMS)
PARTS = ARMS + ("rollout",)
MIN_PAIRS_FOR_README = 5


def _default_train() -> TrainConfig:
    return TrainConfig(algo="grpo", track_kl=False)


@dataclass
class BenchConfig:
    """What one bench run measures. ``train`` holds the work both sides do (prompts x G, completion
    length, temperature, lr, seed, model, device); the defaults are the course's CPU profile
    (16 x 8, 32 tokens). The rest says how it is measured."""

    train: TrainConfig = field(default_factory=_default_train)
    steps: int = 5
    """Timed steps per run of an arm (its median is the run's step time)."""
    warmup: int = 2
    """Steps each run does first and does not time (lazy initialisation, optimiser state, allocator)."""
    pairs: int = 5
    """Runs of every arm, in alternating order; one ratio per pair."""
    rollout_repeats: int = 5
    """Timed calls of each generator in the rollout comparison (after one warm-up call each)."""
    parts: tuple = PARTS
    """Arms to run (see ``ARMS``), and "rollout" for the generator comparison."""
    level: float = 0.95
    """Coverage of the bootstrap interval of the ratios."""
    isolate: bool = True
    """Run each arm in a forked child process (Linux). False: one after another in this process."""

    def __post_init__(self):
        if not isinstance(self.train, TrainConfig):
            raise ValueError(f"train must be a TrainConfig, got {type(self.train).__name__}")
        t = self.train
        if t.algo != "grpo" or t.track_kl or t.algo_overrides or t.task != "sum3" or t.system_prompt is not None:
            raise ValueError(
                "train must be GRPO on sum3 with track_kl=False and no algo_overrides or system_prompt "
                f"(TRL's side runs exactly that), got algo={t.algo!r}, task={t.task!r}, track_kl={t.track_kl}, "
                f"algo_overrides={t.algo_overrides}, system_prompt={t.system_prompt!r}"
            )
        for name, minimum in (("steps", 1), ("warmup", 0), ("pairs", 1), ("rollout_repeats", 1)):
            check_positive_int(name, getattr(self, name), minimum=minimum)
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {self.level!r}")
        self.parts = tuple(self.parts)
        if not self.parts or any(p not in PARTS for p in self.parts):
            raise ValueError(f"parts must be a non-empty subset of {PARTS}, got {self.parts!r}")
        if self.train.device not in (None, "cpu") and not str(self.train.device).startswith("cuda"):
            raise ValueError(f"device must be None, 'cpu' or 'cuda[:N]', got {self.train.device!r}")

    @property
    def arms(self) -> tuple:
        return tuple(a for a in ARMS if a in self.parts)


def run_order(arms: tuple, pairs: int) -> list[tuple[int, str]]:
    """``(pair, arm)`` in the order they run: the arms in order in even pairs, reversed in odd ones
    (lab, trl, trl, lab, lab, trl, ...), so a steady drift of the machine's speed favours no side."""
    return [(p, a) for p in range(pairs) for a in (arms if p % 2 == 0 else arms[::-1])]


def lab_prompt_stream(cfg: BenchConfig, n_steps: int) -> Dataset:
    """The rows of the train split the lab's Trainer draws for ``n_steps`` steps, in order."""
    from ..lab.tasks import get_task

    task = get_task(cfg.train.task, seed=0, data_dir=cfg.train.data_dir)
    idx = Trainer.prompt_indices(random.Random(cfg.train.seed), len(task.train), n_steps * cfg.train.prompts_per_step)
    return task.train.select(idx).select_columns(["prompt", "answer"])


FAIRNESS = [
    "same weights: both sides load the same model from disk",
    "same prompts per step, in the same order: the lab's prompt stream is TRL's dataset, unshuffled "
    "(checked on what each model was fed: same_prompts)",
    "same batch: prompts x G completions, one optimiser step per generation (steps_per_generation=1, num_iterations=1)",
    "same sampling: temperature T, top-k 0, top-p 1, the same max completion length; stop at EOS",
    "same loss: GRPO, clip 0.2, beta 0 (no reference model; the lab's track_kl off), "
    "loss_type='grpo' = seq_mean_token_mean",
    "same optimiser: torch AdamW, same lr, betas (0.9, 0.999), eps 1e-8, same weight decay, constant lr, grad clip",
    "TRL's gradient checkpointing off (GRPOConfig turns it on by default; the lab never recomputes activations)",
    "a step is the time between the ends of two consecutive steps of each library's own loop; warm-up steps excluded",
    "arms run in pairs in alternating order (lab ... trl, trl ... lab, ...); one ratio per pair, reported as median "
    "with a bootstrap interval",
    "time per token beside time per step: completion tokens sampled, and prompt + completion tokens in the update",
    "each run in its own process (forked; started afresh on CUDA): its own memory peak and timers",
]
