"""The TRL recipe: ``GRPOConfig`` fields at scale, the standalone ``train_grpo.py``, accelerate configs, launch.sh."""

from __future__ import annotations

import inspect
import shlex
from pprint import pformat

import yaml

from ..algorithms import Algorithm
from . import health
from .at_scale import (
    CHECKPOINT_EVERY,
    CHECKPOINTS_KEPT,
    NUM_GPUS,
    PER_DEVICE,
    STEPS_PER_GENERATION,
    VALIDATE_EVERY,
    VALIDATION_SAMPLES,
    VALUE,
)
from .engines import TRL_VERSION, as_algorithm, refusal
from .task_code import ROWS, render, task_source
from .trl_bridge import grpo_config_kwargs

INSTALL = f'pip install "trl[vllm,deepspeed]=={TRL_VERSION}.0" tensorboard'
"""The TRL recipe's install line (trl's own extras pull vLLM and DeepSpeed in versions it supports)."""

SMOKE = {
    "num_generations": 4,
    "per_device_train_batch_size": 4,
    "max_completion_length": 32,
    "max_steps": 2,
    "bf16": False,
    "gradient_checkpointing": False,
    "use_vllm": False,
    "use_cpu": True,
    "logging_steps": 1,
    "save_strategy": "no",
    "eval_strategy": "no",
    "report_to": "none",
    "dataloader_num_workers": 0,
}
"""What ``train_grpo.py --smoke`` replaces: sizes only (and no tracking service, no checkpoints), so a CPU runs two
optimiser steps of the same recipe."""


def rollout_arithmetic(
    per_device_train_batch_size: int,
    num_processes: int,
    steps_per_generation: int,
    gradient_accumulation_steps: int,
    num_iterations: int = 1,
) -> dict:
    """TRL's batch arithmetic: completions per rollout and optimiser steps per rollout."""
    if steps_per_generation % gradient_accumulation_steps:
        raise ValueError(
            f"gradient_accumulation_steps must divide steps_per_generation = {steps_per_generation}, "
            f"got {gradient_accumulation_steps}"
        )
    return {
        "completions_per_rollout": per_device_train_batch_size * num_processes * steps_per_generation,
        "optimiser_steps_per_rollout": steps_per_generation // gradient_accumulation_steps * num_iterations,
    }


def trl_settings(algo: str | Algorithm = "grpo") -> dict:
    """The ``GRPOConfig`` fields of the TRL recipe: the preset's algorithm fields (as ``grpo_config_kwargs`` maps
    them) with the at-scale sizes of ``AT_SCALE``; ``a.minibatches`` optimiser steps per rollout
    (``gradient_accumulation_steps = steps_per_generation / updates``), one pass over the data."""
    from ..train.trainer import TrainConfig

    a = as_algorithm(algo)
    why = refusal(a, "trl")
    if why:
        raise ValueError(f"algo {a.name!r} cannot be exported to trl: {why}")
    updates = a.minibatches
    if STEPS_PER_GENERATION % updates:
        raise ValueError(f"updates per rollout must divide {STEPS_PER_GENERATION} micro-steps, got {updates}")
    cfg = TrainConfig(
        prompts_per_step=VALUE["prompts per rollout"],
        group_size=VALUE["completions per prompt (G)"],
        max_new_tokens=VALUE["max new tokens"],
        lr=VALUE["learning rate"],
    )
    kw = grpo_config_kwargs(a, cfg)
    kw.update(
        per_device_train_batch_size=PER_DEVICE,
        steps_per_generation=STEPS_PER_GENERATION,
        gradient_accumulation_steps=STEPS_PER_GENERATION // updates,
        num_train_epochs=1,
        bf16=VALUE["bf16"],
        gradient_checkpointing=VALUE["gradient checkpointing"],
        # TRL's default: the unbiased reverse-KL gradient (DeepSeek-V3.2); it acts only when beta > 0.
        use_bias_correction_kl=True,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_enable_sleep_mode=True,
        vllm_gpu_memory_utilization=0.3,
        logging_steps=10,
        save_strategy="steps",
        save_steps=CHECKPOINT_EVERY,
        save_total_limit=CHECKPOINTS_KEPT,
        eval_strategy="steps",
        eval_steps=VALIDATE_EVERY,
        num_generations_eval=VALIDATION_SAMPLES,
        per_device_eval_batch_size=PER_DEVICE,
        report_to="tensorboard",
        log_completions=True,
    )
    return kw


_ACCELERATE_COMMON = {
    "compute_environment": "LOCAL_MACHINE",
    "debug": False,
    "machine_rank": 0,
    "main_training_function": "main",
    "mixed_precision": "bf16",
    "num_machines": 1,
    "rdzv_backend": "static",
    "same_network": True,
    "use_cpu": False,
    "downcast_bf16": "no",
}
ACCELERATE_CONFIGS = {
    "single_gpu": {**_ACCELERATE_COMMON, "distributed_type": "NO", "num_processes": 1, "gpu_ids": "all"},
    "multi_gpu": {**_ACCELERATE_COMMON, "distributed_type": "MULTI_GPU", "num_processes": NUM_GPUS, "gpu_ids": "all"},
    "zero3": {
        **_ACCELERATE_COMMON,
        "distributed_type": "DEEPSPEED",
        "num_processes": NUM_GPUS,
        "deepspeed_config": {
            "deepspeed_multinode_launcher": "standard",
            "offload_optimizer_device": "none",
            "offload_param_device": "none",
            "zero3_init_flag": True,
            "zero3_save_16bit_model": True,
            "zero_stage": 3,
        },
    },
}
"""accelerate configs as TRL ships them (trl/accelerate_configs), with the process counts of this recipe."""


def launch_script(algo: str, task: str, model: str) -> str:
    """launch.sh: ``./launch.sh [single_gpu|multi_gpu|zero3|server] [GPUS] [train_grpo.py options]``."""
    return render("launch_trl.sh", algo=algo, task=task, model=shlex.quote(model), num_gpus=NUM_GPUS, install=INSTALL)


def _health_source() -> str:
    """``health.py``'s functions, with the imports and the constant they need, to paste into the script."""
    functions = (health.group_health, health.with_group_health, health.k3_sum_and_count, health.measuring_kl_to_start)
    head = "import math\nfrom collections.abc import Callable\n\nimport torch\n\n"
    head += f"KL_TO_START = {health.KL_TO_START!r}\n\n\n"
    return head + "\n\n".join(inspect.getsource(f) for f in functions)


def trl_files(a: Algorithm, task: str, model: str, data_dir: str | None = None) -> dict[str, str]:
    """The TRL recipe's files by relative path; ``data_dir`` (task gsm8k: GSM8K's files) is the script's default."""
    settings = {k: v for k, v in trl_settings(a).items() if v is not None}
    source, reward_name = task_source(task)
    files = {
        "train_grpo.py": render(
            "train_grpo.py",
            algo=a.name,
            task=task,
            model_repr=repr(model),
            settings=pformat(settings, sort_dicts=False),
            num_gpus=NUM_GPUS,
            smoke=pformat(SMOKE, sort_dicts=False),
            overlong_cache=VALUE["overlong cache (DAPO)"] if a.overlong_penalty else None,
            chat=task != "sum3",
            data_dir_repr=repr(data_dir),
            task_source=source,
            rows=ROWS[task],
            reward_name=reward_name,
            install=INSTALL,
            health_source=_health_source(),
        ),
        "launch.sh": launch_script(a.name, task, model),
    }
    for name, cfg in ACCELERATE_CONFIGS.items():
        files[f"accelerate/{name}.yaml"] = yaml.safe_dump(cfg, sort_keys=False)
    return files
