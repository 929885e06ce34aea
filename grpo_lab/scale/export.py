"""From the lab to a cluster: a preset written out as a recipe that TRL or verl launches as it is.

``export_recipe(algo, engine, model, task, out)`` writes, for ``engine="trl"``:

- ``train_grpo.py``: a standalone script (the task's prompts in the format ``GRPOTrainer`` expects, the
  lab's reward in TRL's reward-function signature, ``GRPOConfig`` with the preset at scale); ``--smoke``
  swaps in CPU sizes so the same script runs two optimiser steps on a tiny model;
- ``accelerate/single_gpu.yaml``, ``multi_gpu.yaml`` (DDP), ``zero3.yaml`` (DeepSpeed ZeRO-3) and
  ``launch.sh``: the launch commands, with vLLM colocated (sleep mode) or as a separate server;

and for ``engine="verl"`` (verl 0.9.1): ``prepare_data.py`` (parquet in verl's row format), ``reward.py``
(``compute_score``) and ``run.sh`` (``python -m verl.trainer.main_ppo`` with the overrides of
``verl_overrides``). Both write a ``README.md`` with the table of lab value vs at-scale value (``SCALE``).

What an engine cannot run is refused with one line that names what to use instead (``refusal``):
PPO with a critic goes to verl (TRL removed its PPOTrainer); GFPO is refused by both (see ``refusal``).
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from pprint import pformat

from ..algorithms import Algorithm
from ..core.checks import check_choice
from .trl_bridge import _algorithm, grpo_config_kwargs

ENGINES = ("trl", "verl")
TASKS = ("gsm8k", "words", "sum3")
VERL_VERSION = "0.9.1"


@dataclass(frozen=True)
class ScaleRow:
    """One setting that changes between the lab's CPU and a GPU cluster."""

    knob: str
    lab: object
    at_scale: object
    source: str
    why: str


# The one place the at-scale values live; the recipes read them from here.
SCALE: tuple[ScaleRow, ...] = (
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
        "DAPO (Yu et al. 2025): 4096 of 20480 tokens; the lab and the recipe keep a quarter of the budget",
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

_SCALE = {r.knob: r.at_scale for r in SCALE}
NUM_GPUS = 8
PER_DEVICE = _SCALE["micro-batch per GPU"]
STEPS_PER_GENERATION = _SCALE["prompts per rollout"] * _SCALE["completions per prompt (G)"] // (NUM_GPUS * PER_DEVICE)
"""TRL: completions per rollout = per_device_train_batch_size x processes x steps_per_generation (8 x 8 x 4 = 256)."""

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
    "dataloader_num_workers": 0,
}
"""What ``train_grpo.py --smoke`` replaces: sizes only, so a CPU runs two optimiser steps of the same recipe."""


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


def refusal(algo: str | Algorithm, engine: str) -> str | None:
    """Why ``engine`` cannot run ``algo`` and what to use instead, or None when it can."""
    check_choice("engine", engine, ENGINES)
    a = _algorithm(algo)
    if a.advantage == "gfpo":
        # A GRPOTrainer subclass would have to replace _generate_and_score_completions, a private method
        # whose signature has changed between TRL releases; a recipe pinned to it would break silently.
        return (
            f"GFPO is in neither engine: TRL removed GFPOTrainer (huggingface/trl#6309) and verl {VERL_VERSION} "
            "has no length filter on groups. Use the lab's trainer on one GPU (python -m grpo_lab train --algo gfpo "
            "--model NAME), or export dapo or dr_grpo, whose token-mean and length-unbiased losses also curb length"
        )
    if engine == "trl" and a.advantage == "gae":
        return (
            "PPO with a critic is not in TRL: PPOTrainer was removed (huggingface/trl#7020) and GRPOTrainer has no "
            "value model. Use --engine verl (algorithm.adv_estimator=gae with a critic)"
        )
    if engine == "trl" and a.dynamic_sampling:
        return (
            "DAPO's dynamic sampling (drop all-equal groups, sample more) is not in TRL's GRPOTrainer. Use --engine "
            "verl (algorithm.filter_groups), or in Python export get_algorithm('dapo', dynamic_sampling=False) to TRL"
        )
    if engine == "trl" and a.kl_in_reward:
        return "KL folded into the reward is not in TRL's GRPOTrainer (only k3 KL in the loss). Use --engine verl"
    if engine == "trl" and a.beta > 0 and a.kl_kind != "k3":
        return f"TRL's GRPOTrainer has only the k3 KL, not {a.kl_kind}. Use --engine verl (kl_loss_type)"
    return None


def _refuse(a: Algorithm, engine: str) -> None:
    why = refusal(a, engine)
    if why:
        raise ValueError(f"algo {a.name!r} cannot be exported to {engine}: {why}")


# --- TRL ---------------------------------------------------------------------------------------


def trl_settings(algo: str | Algorithm = "grpo") -> dict:
    """The ``GRPOConfig`` fields of the TRL recipe: the preset's algorithm fields (as ``grpo_config_kwargs``
    maps them) with the at-scale sizes of ``SCALE``. The lab's ``minibatches`` optimiser steps per rollout
    stay ``minibatches``: ``gradient_accumulation_steps = steps_per_generation / minibatches``."""
    from ..train.trainer import TrainConfig

    a = _algorithm(algo)
    _refuse(a, "trl")
    if STEPS_PER_GENERATION % a.minibatches:
        raise ValueError(f"minibatches must divide steps_per_generation = {STEPS_PER_GENERATION}, got {a.minibatches}")
    cfg = TrainConfig(
        prompts_per_step=_SCALE["prompts per rollout"],
        group_size=_SCALE["completions per prompt (G)"],
        max_new_tokens=_SCALE["max new tokens"],
        lr=_SCALE["learning rate"],
    )
    kw = grpo_config_kwargs(a, cfg)
    kw.update(
        per_device_train_batch_size=PER_DEVICE,
        steps_per_generation=STEPS_PER_GENERATION,
        gradient_accumulation_steps=STEPS_PER_GENERATION // a.minibatches,
        bf16=_SCALE["bf16"],
        gradient_checkpointing=_SCALE["gradient checkpointing"],
        # TRL's default: the unbiased reverse-KL gradient (DeepSeek-V3.2); it acts only when beta > 0.
        use_bias_correction_kl=True,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_enable_sleep_mode=True,
        vllm_gpu_memory_utilization=0.3,
        logging_steps=10,
        save_strategy="steps",
        save_steps=200,
        report_to="none",
    )
    return kw


def _task_source(task: str, with_data: bool = True) -> tuple[str, str]:
    """The lab's own task code for ``task`` (copied from grpo_lab/lab/tasks.py: the reward, and the prompts when
    ``with_data``) and the reward's name."""
    from ..lab import tasks as t

    reward = t.sum3_reward if task == "sum3" else t.gsm8k_reward
    data = {"sum3": [t.sum3_prompt, t._triples], "words": [t.synthetic_word_problems], "gsm8k": []}[task]
    graders = [t.last_number, t.check_answer] if task == "sum3" else [t.check_answer, t.read_number]
    funcs = graders + [reward] + (data if with_data else [])
    # What those functions read from the module: its imports and constants, written out so the recipe
    # runs without grpo_lab installed (tests/test_export.py runs the exported script).
    head = (
        "import math\nimport numbers\nfrom fractions import Fraction\n\n"
        f"MAX_ANSWER_DIGITS = {t.MAX_ANSWER_DIGITS!r}\n"
        f"_NUMBER = re.compile({t._NUMBER.pattern!r})\n"
        f"_FINAL_NUMBER = {t._FINAL_NUMBER!r}\n"
        f"_AFTER_MARKER = re.compile({t._AFTER_MARKER.pattern!r})\n"
        f"_ANY_NUMBER = re.compile({t._ANY_NUMBER.pattern!r})\n"
        f"GSM8K_SYSTEM = {t.GSM8K_SYSTEM!r}\n\n\n"
    )
    return head + "\n\n".join(inspect.getsource(f) for f in funcs), reward.__name__


_ROWS = {
    "sum3": 'rows = [{"prompt": sum3_prompt(*t), "answer": sum(t)} for t in _triples(split, n or 4096, 0)]',
    "words": (
        'ds = synthetic_word_problems(n or 4096, 0 if split == "train" else 1)\n'
        '    rows = [{"prompt": p, "answer": a} for p, a in zip(ds["prompt"], ds["answer"])]'
    ),
    "gsm8k": (
        "from datasets import load_dataset\n"
        '    ds = load_dataset("openai/gsm8k", "main", split=split)\n'
        '    rows = [{"prompt": r["question"], "answer": int(r["answer"].rsplit("####", 1)[-1].strip().replace(",", ""))}\n'
        "            for r in (ds if n is None else ds.select(range(min(n, len(ds)))))]"
    ),
}

_TRL_SCRIPT = '''"""{algo} on {task} with TRL's GRPOTrainer: exported by grpo_lab (python -m grpo_lab export).

Launch it with accelerate (launch.sh has the commands); README.md says where each setting comes from.
  --smoke      the same recipe at CPU sizes: two optimiser steps, no vLLM (a check, not a run)
  --vllm-mode  colocate (default: vLLM inside each training process, asleep during the optimiser step),
               server (a separate `trl vllm-serve`), or none (transformers' generate)
At the end it writes TRL's resolved config to OUTPUT_DIR/resolved_config.json.
"""

import argparse
import json
import os
import random
import re

from datasets import Dataset

MODEL = {model!r}
SETTINGS = {settings}
"""GRPOConfig fields: the preset's algorithm with the at-scale sizes."""
SMOKE = {smoke}
"""What --smoke replaces (sizes only)."""
SOFT_OVERLONG_CACHE = {overlong_cache}
"""DAPO's soft overlong penalty ramps over this many last tokens (None: the preset has no penalty)."""
CHAT = {chat}
"""Conversational prompts (system + user messages, the model's chat template) or plain text."""

# --- the task: the lab's own prompts and reward (grpo_lab/lab/tasks.py) ---

{task_source}

def build_dataset(split="train", n=None):
    """Prompts in the format GRPOTrainer expects: a "prompt" column (text, or a list of chat messages)
    and the "answer" column, which TRL passes to the reward function by name."""
    {rows}
    if CHAT:
        rows = [{{"prompt": [{{"role": "system", "content": GSM8K_SYSTEM}}, {{"role": "user", "content": r["prompt"]}}],
                 "answer": r["answer"]}} for r in rows]
    return Dataset.from_list(rows)


def make_reward(eos_token_id):
    """The task's reward in TRL's signature. A completion counts as finished when its last token is EOS
    (TRL keeps the EOS in completion_ids), as the lab decides it."""

    def {reward_name}_trl(prompts, completions, completion_ids, answer, **kwargs):
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        finished = [len(ids) > 0 and ids[-1] == eos_token_id for ids in completion_ids]
        return [float({reward_name}(t, int(a), f)) for t, a, f in zip(texts, answer, finished)]

    return {reward_name}_trl


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=MODEL)
    p.add_argument("--output-dir", default="runs/{algo}_{task}")
    p.add_argument("--max-steps", type=int, default=-1, help="optimiser steps (-1: one pass over the data)")
    p.add_argument("--n-train", type=int, default=None, help="train prompts (default: all)")
    p.add_argument("--vllm-mode", choices=["colocate", "server", "none"], default="colocate")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args(argv)

    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    kw = dict(SETTINGS, max_steps=args.max_steps)
    if args.vllm_mode == "none":
        kw["use_vllm"] = False
    elif args.vllm_mode == "server":
        kw["vllm_mode"] = "server"
    if args.smoke:
        kw.update(SMOKE)
    config = GRPOConfig(output_dir=args.output_dir, **kw)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    reward_funcs = [make_reward(tokenizer.eos_token_id)]
    if SOFT_OVERLONG_CACHE is not None:
        from trl.rewards import get_soft_overlong_punishment

        # the same share of the budget when --smoke shrinks it
        cache = SOFT_OVERLONG_CACHE * config.max_completion_length // SETTINGS["max_completion_length"]
        reward_funcs.append(get_soft_overlong_punishment(config.max_completion_length, cache))
    trainer = GRPOTrainer(model=args.model, reward_funcs=reward_funcs, args=config, processing_class=tokenizer,
                          train_dataset=build_dataset("train", 64 if args.smoke else args.n_train))
    trainer.train()
    if trainer.accelerator.is_main_process:
        resolved = {{
            "args": json.loads(config.to_json_string()),
            "trainer": {{k: getattr(trainer, k) for k in ("loss_type", "importance_sampling_level", "epsilon_low",
                        "epsilon_high", "beta", "num_generations", "num_iterations", "scale_rewards",
                        "mask_truncated_completions", "max_completion_length", "temperature", "use_vllm")
                        if hasattr(trainer, k)}},
            "reward_funcs": [getattr(f, "__name__", type(f).__name__) for f in trainer.reward_funcs],
            "global_step": trainer.state.global_step,
            "log_history": trainer.state.log_history,
        }}
        with open(os.path.join(args.output_dir, "resolved_config.json"), "w") as f:
            json.dump(resolved, f, indent=1, default=str)


if __name__ == "__main__":
    main()
'''

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


def _yaml(d: dict, indent: int = 0) -> str:
    lines = []
    for k, v in d.items():
        if isinstance(v, dict):
            lines.append(" " * indent + f"{k}:")
            lines.append(_yaml(v, indent + 2))
        else:
            lines.append(" " * indent + f"{k}: {json.dumps(v)}")
    return "\n".join(lines)


def _trl_launch(algo: str, task: str, model: str) -> str:
    return f"""#!/usr/bin/env bash
# {algo} on {task} with TRL. Pick one of the launches below (run from this folder).
set -euo pipefail

# 0. Check the recipe on any machine first: two optimiser steps at CPU sizes, no vLLM.
#    python train_grpo.py --smoke --model PATH_TO_A_SMALL_MODEL --output-dir runs/smoke

# 1. One GPU, vLLM colocated in the training process; sleep mode frees its memory during the optimiser step.
accelerate launch --config_file accelerate/single_gpu.yaml train_grpo.py --model {model}

# 2. One node, {NUM_GPUS} GPUs, data parallel (DDP): each GPU holds the whole model; vLLM colocated on each.
# accelerate launch --config_file accelerate/multi_gpu.yaml train_grpo.py --model {model}

# 3. DeepSpeed ZeRO-3: parameters, gradients and optimiser state sharded over the {NUM_GPUS} GPUs, for models
#    that do not fit one GPU with their optimiser state.
# accelerate launch --config_file accelerate/zero3.yaml train_grpo.py --model {model}

# 4. vLLM as a separate server: GPU 0 generates, GPUs 1-7 train (for models where colocating does not fit).
# CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model {model} &
# CUDA_VISIBLE_DEVICES=1,2,3,4,5,6,7 accelerate launch --config_file accelerate/multi_gpu.yaml --num_processes 7 \\
#     train_grpo.py --model {model} --vllm-mode server
"""


# --- verl --------------------------------------------------------------------------------------

_VERL_LOSS_AGG = {
    "seq_mean_token_mean": "seq-mean-token-mean",
    "token_mean": "token-mean",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
}
_VERL_KL = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}


def verl_overrides(
    algo: str | Algorithm = "grpo",
    model: str = "Qwen/Qwen2.5-1.5B-Instruct",
    task: str = "gsm8k",
    data_dir: str = "data",
) -> list[str]:
    """The Hydra overrides of ``python -m verl.trainer.main_ppo`` (verl 0.9.1) that run ``algo`` at scale."""
    a = _algorithm(algo)
    _refuse(a, "verl")
    check_choice("task", task, TASKS)
    if a.kl_kind not in _VERL_KL:
        raise ValueError(f"kl_kind must be one of {sorted(_VERL_KL)} for verl, got {a.kl_kind!r}")
    prompts, g, max_len = _SCALE["prompts per rollout"], _SCALE["completions per prompt (G)"], _SCALE["max new tokens"]
    if prompts % a.minibatches:
        raise ValueError(f"minibatches must divide the {prompts} prompts per rollout, got {a.minibatches}")
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    o = [
        f"algorithm.adv_estimator={'gae' if a.advantage == 'gae' else 'grpo'}",
        f"data.train_files={data_dir}/{task}/train.parquet",
        f"data.val_files={data_dir}/{task}/test.parquet",
        f"data.train_batch_size={prompts}",  # prompts per rollout; verl multiplies by rollout.n
        "data.max_prompt_length=512",
        f"data.max_response_length={max_len}",
        "data.filter_overlong_prompts=true",
        f"actor_rollout_ref.model.path={model}",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={str(_SCALE['gradient checkpointing']).lower()}",
        f"{actor}.optim.lr={_SCALE['learning rate']}",
        f"{actor}.optim.weight_decay=0.0",
        f"{actor}.grad_clip=1.0",
        f"{actor}.ppo_mini_batch_size={prompts // a.minibatches}",  # in prompts: minibatches updates per rollout
        f"{actor}.ppo_micro_batch_size_per_gpu={PER_DEVICE}",
        f"{actor}.ppo_epochs={a.epochs}",
        f"{actor}.policy_loss.loss_mode={'gspo' if a.ratio_level != 'token' else 'vanilla'}",
        f"{actor}.loss_agg_mode={_VERL_LOSS_AGG[a.aggregation]}",
        f"{actor}.clip_ratio_low={a.clip_low}",
        f"{actor}.clip_ratio_high={a.clip_high if a.clip_high is not None else a.clip_low}",
        f"{actor}.entropy_coeff={a.entropy_coef}",
        f"{actor}.use_kl_loss={str(a.beta > 0 and not a.kl_in_reward).lower()}",
        f"{rollout}.name=vllm",
        f"{rollout}.n={g}",
        f"{rollout}.temperature=1.0",
        f"{rollout}.tensor_model_parallel_size=1",
        f"{rollout}.gpu_memory_utilization=0.6",
        f"{rollout}.log_prob_micro_batch_size_per_gpu={2 * PER_DEVICE}",
        "reward.custom_reward_function.path=reward.py",
        "reward.custom_reward_function.name=compute_score",
        "trainer.use_v1=true",
        f"trainer.n_gpus_per_node={NUM_GPUS}",
        "trainer.nnodes=1",
        "trainer.total_epochs=1",
        "trainer.logger=[console]",
        "trainer.project_name=grpo_lab",
        f"trainer.experiment_name={a.name}_{task}",
    ]
    if a.aggregation == "seq_mean_token_sum_norm":  # Dr. GRPO's constant: the budget, not the padded width
        o.append(f"{actor}.loss_scale_factor={max_len}")
    if a.advantage == "group":
        o.append(f"algorithm.norm_adv_by_std_in_grpo={str(a.scale != 'none').lower()}")
        if a.scale == "batch":
            raise ValueError("scale='batch' has no verl key (norm_adv_by_std_in_grpo divides by the group's std)")
    if a.dual_clip is not None:
        o.append(f"{actor}.clip_ratio_c={a.dual_clip}")
    if a.beta > 0 and not a.kl_in_reward:
        o += [
            f"{actor}.kl_loss_coef={a.beta}",
            f"{actor}.kl_loss_type={_VERL_KL[a.kl_kind]}",
            f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={2 * PER_DEVICE}",
        ]
    if a.kl_in_reward:
        o += [
            "algorithm.use_kl_in_reward=true",
            f"algorithm.kl_penalty={_VERL_KL[a.kl_kind]}",
            f"algorithm.kl_ctrl.kl_coef={a.beta}",
            f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={2 * PER_DEVICE}",
        ]
    if a.advantage == "gae":
        o += [
            f"algorithm.gamma={a.gamma}",
            f"algorithm.lam={a.lam}",
            f"critic.model.path={model}",
            f"critic.optim.lr={_SCALE['critic learning rate (PPO)']}",
            f"critic.ppo_micro_batch_size_per_gpu={PER_DEVICE}",
            f"critic.model.enable_gradient_checkpointing={str(_SCALE['gradient checkpointing']).lower()}",
            f"trainer.critic_warmup={a.critic_warmup_steps}",
        ]
        if a.value_clip is not None:
            o.append(f"critic.cliprange_value={a.value_clip}")
    if a.dynamic_sampling:
        # Applied by the V1 trainer's ReplayBuffer (trainer.use_v1=true); the "acc" metric is the task
        # reward before the overlong penalty, as in DAPO. V1 ignores max_num_gen_batches.
        o += ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"]
    if a.overlong_penalty or a.dynamic_sampling:
        o.append("reward.reward_manager.name=dapo")  # the reward loop's dapo manager: acc + overlong buffer
    if a.overlong_penalty:
        # Not keys of verl's trainer config: the dapo reward manager reads reward.reward_kwargs, appended with "+".
        o += [
            f"+reward.reward_kwargs.max_resp_len={max_len}",
            "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
            f"+reward.reward_kwargs.overlong_buffer_cfg.len={_SCALE['overlong cache (DAPO)']}",
            "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
            "+reward.reward_kwargs.overlong_buffer_cfg.log=false",
        ]
    return o


_VERL_PREPARE = '''"""Write {task} as verl's parquet rows: data_source, prompt (chat messages), ability, reward_model, extra_info.

    python prepare_data.py --out data/{task}
"""

import argparse
import os
import random
import re

from datasets import Dataset

{task_source}

def build_rows(split="train", n=None):
    {rows}
    return [{{"data_source": {task!r},
             "prompt": [{{"role": "system", "content": GSM8K_SYSTEM}}, {{"role": "user", "content": r["prompt"]}}]
             if {chat} else [{{"role": "user", "content": r["prompt"]}}],
             "ability": "math",
             "reward_model": {{"style": "rule", "ground_truth": str(r["answer"])}},
             "extra_info": {{"split": split, "index": i}}}} for i, r in enumerate(rows)]


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="data/{task}")
    p.add_argument("--n", type=int, default=None)
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for split in ("train", "test"):
        Dataset.from_list(build_rows(split, args.n)).to_parquet(os.path.join(args.out, f"{{split}}.parquet"))


if __name__ == "__main__":
    main()
'''

_VERL_REWARD = '''"""verl's custom reward for {task}: compute_score(data_source, solution_str, ground_truth, extra_info).

verl passes the decoded response, not whether it ended with EOS, so a truncated answer is scored on its text
(the lab scores it 0); DAPO's overlong buffer is the length penalty verl applies instead.
"""

import re

{task_source}

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return float({reward_name}(solution_str, int(ground_truth), True))
'''


def _verl_run(overrides: list[str]) -> str:
    lines = " \\\n    ".join(overrides)
    return (
        "#!/usr/bin/env bash\n# verl "
        + VERL_VERSION
        + ": python prepare_data.py first; extra key=value arguments override.\n"
        'set -euo pipefail\ncd "$(dirname "$0")"\n'
        f'python -m verl.trainer.main_ppo \\\n    {lines} \\\n    "$@"\n'
    )


# --- README of a recipe ------------------------------------------------------------------------


def scale_table() -> str:
    """``SCALE`` as a markdown table."""
    rows = ["| setting | lab | at scale | source | why |", "|---|---|---|---|---|"]
    rows += [f"| {r.knob} | {r.lab} | {r.at_scale} | {r.source} | {r.why} |" for r in SCALE]
    return "\n".join(rows)


def _readme(a: Algorithm, engine: str, model: str, task: str, settings: dict | None) -> str:
    head = f"# {a.name} on {task} with {engine.upper() if engine == 'trl' else 'verl ' + VERL_VERSION}\n\n"
    body = (
        f"Exported by `python -m grpo_lab export --algo {a.name} --engine {engine} --model {model} --task {task}`.\n\n"
    )
    if engine == "trl":
        arith = rollout_arithmetic(
            settings["per_device_train_batch_size"],
            NUM_GPUS,
            settings["steps_per_generation"],
            settings["gradient_accumulation_steps"],
            settings["num_iterations"],
        )
        body += (
            "Files: `train_grpo.py` (the script), `accelerate/` (one GPU, DDP, DeepSpeed ZeRO-3), `launch.sh` (the commands).\n\n"
            "## Batch arithmetic\n\n"
            "completions per rollout = per_device_train_batch_size x processes x steps_per_generation = "
            f"{settings['per_device_train_batch_size']} x {NUM_GPUS} x {settings['steps_per_generation']} = "
            f"{arith['completions_per_rollout']} on {NUM_GPUS} GPUs; optimiser steps per rollout = steps_per_generation / "
            f"gradient_accumulation_steps x num_iterations = {arith['optimiser_steps_per_rollout']}, the preset's "
            f"minibatches x epochs. On one GPU a rollout is {NUM_GPUS}x smaller: raise steps_per_generation and "
            "gradient_accumulation_steps together to keep it.\n\n"
            "## Generation: vLLM, colocated or a server\n\n"
            '- `vllm_mode="colocate"` (default here): vLLM runs inside each training process on the same GPU and, with '
            "`vllm_enable_sleep_mode`, releases its weights and KV cache during the optimiser step. No extra GPU, no "
            "server to start; the choice for one node and models that fit twice (training state + vLLM).\n"
            "- `--vllm-mode server`: `trl vllm-serve` on dedicated GPUs; training GPUs keep all their memory for "
            "training. The choice for larger models or when generation and training should not share memory.\n"
            "- With vLLM, TRL corrects for the gap between vLLM's and the trainer's log-probabilities: "
            "`vllm_importance_sampling_correction=True` (the default) multiplies each per-token loss by a truncated "
            "importance ratio. The lab's parity with TRL's loss holds without vLLM; with it, this factor is added.\n\n"
        )
    else:
        body += (
            "Files: `prepare_data.py` (parquet), `reward.py` (`compute_score`), `run.sh` "
            "(`python -m verl.trainer.main_ppo` with its overrides).\n\n"
        )
        if a.dynamic_sampling or a.overlong_penalty:
            body += (
                "## Where DAPO's pieces are applied in verl " + VERL_VERSION + "\n\n"
                "- Dynamic sampling: `algorithm.filter_groups.enable=true` is acted on by the V1 trainer "
                "(`trainer.use_v1=true`, the default; its ReplayBuffer drops all-equal groups and refills). The legacy "
                "trainer (`trainer.use_v1=false`) does not read it. The V1 trainer ignores `max_num_gen_batches`: there "
                "is no cap on refills.\n"
                "- Overlong buffer: not a key of verl's trainer config. The reward loop's `dapo` reward manager "
                "(`reward.reward_manager.name=dapo`) reads `reward.reward_kwargs.overlong_buffer_cfg` and `max_resp_len`, "
                "appended with `+`.\n\n"
            )
    body += "## Settings that change with scale\n\n" + scale_table() + "\n"
    return head + body


# --- the export ---------------------------------------------------------------------------------


def export_recipe(algo: str | Algorithm, engine: str, model: str, task: str, out: str | Path) -> list[Path]:
    """Write the recipe for ``algo`` (a preset name or an ``Algorithm``) on ``engine`` into folder ``out``;
    returns the files written. Raises ``ValueError`` (one line, naming what to use instead) when the engine
    cannot run the algorithm."""
    a = _algorithm(algo)
    check_choice("engine", engine, ENGINES)
    check_choice("task", task, TASKS)
    if not isinstance(model, str) or not model:
        raise ValueError(f"model must be a Hugging Face name or a folder, got {model!r}")
    _refuse(a, engine)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out must be a folder, got the file {out}")
    source, reward_name = _task_source(task)
    chat = task != "sum3"
    files: dict[str, str] = {}
    settings = None
    if engine == "trl":
        settings = trl_settings(a)
        settings = {k: v for k, v in settings.items() if v is not None}
        files["train_grpo.py"] = _TRL_SCRIPT.format(
            algo=a.name,
            task=task,
            model=model,
            settings=pformat(settings, sort_dicts=False),
            smoke=pformat(SMOKE, sort_dicts=False),
            overlong_cache=_SCALE["overlong cache (DAPO)"] if a.overlong_penalty else None,
            chat=chat,
            task_source=source,
            rows=_ROWS[task],
            reward_name=reward_name,
        )
        for name, cfg in ACCELERATE_CONFIGS.items():
            files[f"accelerate/{name}.yaml"] = _yaml(cfg) + "\n"
        files["launch.sh"] = _trl_launch(a.name, task, model)
    else:
        files["prepare_data.py"] = _VERL_PREPARE.format(task=task, task_source=source, rows=_ROWS[task], chat=chat)
        files["reward.py"] = _VERL_REWARD.format(
            task=task, task_source=_task_source(task, with_data=False)[0], reward_name=reward_name
        )
        files["run.sh"] = _verl_run(verl_overrides(a, model, task))
    files["README.md"] = _readme(a, engine, model, task, settings)
    written = []
    for rel, text in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if rel.endswith(".sh"):
            path.chmod(0o755)
        written.append(path)
    return written
