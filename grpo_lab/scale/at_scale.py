"""The settings that change between the lab's CPU and a GPU cluster: the one place the recipes read them from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScaleRow:
    """One setting that changes between the lab's CPU and a GPU cluster."""

    knob: str
    lab: object
    at_scale: object
    source: str
    why: str


# The one place the at-scale values live; the recipes read them from here.
AT_SCALE: tuple[ScaleRow, ...] = (
    ScaleRow(
        "learning rate",
        1e-4,
        1e-6,
        "TRL GRPOConfig default (trl/trainer/grpo_config.py); verl actor.optim.lr default; DAPO (Yu et al. 2025)",
        "the lab's 1M-parameter model learns from a near-random start; a pretrained billion-parameter policy "
        "drifts from its reference and collapses at 1e-4",
    ),
    ScaleRow(
        "prompts per rollout",
        16,
        32,
        "chosen to fill one 8-GPU node (32 prompts x G 8 = 256 completions); DAPO (Yu et al. 2025) used 512 x 16",
        "enough groups per update for a stable mean; raise it with more GPUs",
    ),
    ScaleRow(
        "completions per prompt (G)",
        8,
        8,
        "the preset's G; DeepSeekMath (Shao et al. 2024) used 64, DAPO (Yu et al. 2025) 16",
        "kept: the algorithm, not the hardware, sets G",
    ),
    ScaleRow(
        "micro-batch per GPU",
        128,
        8,
        "TRL GRPOConfig default per_device_train_batch_size; verl ppo_micro_batch_size_per_gpu in its GSM8K examples",
        "a 1.5B-parameter model at 1024 new tokens fits 8 sequences per forward pass with checkpointing",
    ),
    ScaleRow(
        "max new tokens",
        32,
        1024,
        "verl's GSM8K GRPO examples (data.max_response_length=1024, max_prompt_length=512)",
        "a GSM8K chain of thought takes hundreds of tokens; sum3's answer takes at most 32",
    ),
    ScaleRow(
        "overlong cache (DAPO)",
        8,
        256,
        "DAPO (Yu et al. 2025): 4096 of a 20480-token budget, a fifth of it (a quarter of the 16384 unpenalised "
        "tokens); the lab (8 of 32) and the recipe (256 of 1024) take a quarter of theirs",
        "the soft penalty ramps over the last quarter of the generation budget",
    ),
    ScaleRow(
        "bf16",
        False,
        True,
        "TRL GRPOConfig default (bf16=True); verl FSDP dtype bfloat16",
        "half the memory and the tensor cores of the GPU; the lab's CPU runs float32",
    ),
    ScaleRow(
        "gradient checkpointing",
        False,
        True,
        "TRL GRPOConfig default; verl actor_rollout_ref.model.enable_gradient_checkpointing default",
        "recomputes activations in the backward pass: long completions fit at the cost of one more forward",
    ),
    ScaleRow(
        "generation engine",
        "the lab's KV-cache loop",
        "vLLM",
        "TRL use_vllm (colocate or server); verl actor_rollout_ref.rollout.name=vllm",
        "generation is most of a step; vLLM's paged attention and continuous batching make it several times faster",
    ),
    ScaleRow(
        "critic learning rate (PPO)",
        1e-3,
        1e-5,
        "verl critic.optim.lr default",
        "the critic is a copy of the pretrained model with a value head, not a tiny network trained from scratch",
    ),
)

VALUE = {r.knob: r.at_scale for r in AT_SCALE}
"""``AT_SCALE`` by knob."""
NUM_GPUS = 8
PER_DEVICE = VALUE["micro-batch per GPU"]
STEPS_PER_GENERATION = VALUE["prompts per rollout"] * VALUE["completions per prompt (G)"] // (NUM_GPUS * PER_DEVICE)
"""TRL: completions per rollout = per_device_train_batch_size x processes x steps_per_generation (8 x 8 x 4 = 256)."""

CHECKPOINT_EVERY = 100
"""Optimiser steps (TRL) or rollouts (verl) between checkpoints."""
CHECKPOINTS_KEPT = 3
VALIDATE_EVERY = 50
VALIDATION_SAMPLES = 4
"""k completions per validation prompt, sampled at the training temperature (pass@k and mean accuracy)."""
LOGGED_GENERATIONS = 10


def scale_table() -> str:
    """``AT_SCALE`` as a markdown table."""
    rows = ["| setting | lab | at scale | source | why |", "|---|---|---|---|---|"]
    rows += [f"| {r.knob} | {r.lab} | {r.at_scale} | {r.source} | {r.why} |" for r in AT_SCALE]
    return "\n".join(rows)
