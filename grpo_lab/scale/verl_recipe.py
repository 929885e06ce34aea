"""The verl 0.9.1 recipe: the Hydra overrides of ``python -m verl.trainer.main_ppo``, run.sh, the data and reward."""

from __future__ import annotations

import shlex

from ..algorithms import Algorithm
from .at_scale import (
    CHECKPOINT_EVERY,
    CHECKPOINTS_KEPT,
    LOGGED_GENERATIONS,
    NUM_GPUS,
    PER_DEVICE,
    VALIDATE_EVERY,
    VALIDATION_SAMPLES,
    VALUE,
)
from .engines import VERL_VERSION, as_algorithm, refusal
from .task_code import ROWS, TASKS, render, task_source

INSTALL = f'pip install "verl[verl-core,vllm]=={VERL_VERSION}"'
"""verl's install line: the trainer's dependencies (Ray, Hydra, tensorboard) are in its verl-core extra, vLLM (pinned
by verl) in its vllm extra."""

LOSS_AGG = {
    "seq_mean_token_mean": "seq-mean-token-mean",
    "token_mean": "token-mean",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
}
KL = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}
NO_DUAL_CLIP = 1e9
"""verl's vanilla loss always caps a negative advantage's ratio at clip_ratio_c (default 3.0, asserted > 1); a bound
no ratio reaches is how a preset without a dual clip switches it off."""

KL_AT_BETA_0 = ["actor_rollout_ref.actor.kl_loss_coef=0.0", "actor_rollout_ref.actor.kl_loss_type=low_var_kl"]
"""With ``use_kl_loss=true``, what a beta = 0 preset sets so that verl logs ``actor/kl_loss``, the k3 KL of the
policy being updated to the starting weights, without changing the gradient: verl loads its reference policy whenever
use_kl_loss is on (``need_reference_policy``), and its actor loss adds ``kl_loss * kl_loss_coef`` (0 here: k3 is
clamped to [-10, 10], so never inf times 0) while logging ``kl_loss`` itself. Cost: the reference's weights and one
forward pass of it per rollout. ``actor/kl_loss`` is aggregated as the policy loss is (the preset's
``loss_agg_mode``)."""


def dual_clip(a: Algorithm) -> float:
    """The ``clip_ratio_c`` the recipe sets for ``a``: its ``dual_clip``, or ``NO_DUAL_CLIP`` when it has none."""
    return a.dual_clip if a.dual_clip is not None else NO_DUAL_CLIP


def verl_overrides(
    algo: str | Algorithm = "grpo",
    model: str = "Qwen/Qwen2.5-1.5B-Instruct",
    task: str = "gsm8k",
    data_dir: str = "data",
) -> list[str]:
    """The Hydra overrides of ``python -m verl.trainer.main_ppo`` (verl 0.9.1) that run ``algo`` at scale."""
    a = as_algorithm(algo)
    why = refusal(a, "verl")
    if why:
        raise ValueError(f"algo {a.name!r} cannot be exported to verl: {why}")
    if task not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")
    if a.kl_kind not in KL:
        raise ValueError(f"kl_kind must be one of {sorted(KL)} for verl, got {a.kl_kind!r}")
    prompts, g, max_len = VALUE["prompts per rollout"], VALUE["completions per prompt (G)"], VALUE["max new tokens"]
    updates = a.minibatches
    if prompts % updates:
        raise ValueError(f"updates per rollout must divide the {prompts} prompts per rollout, got {updates}")
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    name = f"{a.name}_{task}"
    o = [
        f"algorithm.adv_estimator={'gae' if a.advantage == 'gae' else 'grpo'}",
        f"data.train_files={data_dir}/{task}/train.parquet",
        f"data.val_files={data_dir}/{task}/test.parquet",
        f"data.train_batch_size={prompts}",  # prompts per rollout; verl multiplies by rollout.n
        "data.max_prompt_length=512",
        f"data.max_response_length={max_len}",
        "data.filter_overlong_prompts=true",
        "data.seed=0",  # the prompt sampler's seed (verl 0.9.1 has no trainer.seed)
        f"actor_rollout_ref.model.path={model}",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={str(VALUE['gradient checkpointing']).lower()}",
        f"{actor}.optim.lr={VALUE['learning rate']}",
        f"{actor}.optim.weight_decay=0.0",
        f"{actor}.grad_clip=1.0",
        f"{actor}.ppo_mini_batch_size={prompts // updates}",  # a SIZE in prompts: `updates` updates per rollout
        f"{actor}.ppo_micro_batch_size_per_gpu={PER_DEVICE}",
        f"{actor}.ppo_epochs={a.epochs}",
        f"{actor}.policy_loss.loss_mode={'gspo' if a.ratio_level != 'token' else 'vanilla'}",
        f"{actor}.loss_agg_mode={LOSS_AGG[a.aggregation]}",
        f"{actor}.clip_ratio_low={a.clip_low}",
        f"{actor}.clip_ratio_high={a.clip_high if a.clip_high is not None else a.clip_low}",
        f"{actor}.clip_ratio_c={dual_clip(a)}",
        f"{actor}.entropy_coeff={a.entropy_coef}",
        f"{actor}.use_kl_loss={str(not a.kl_in_reward).lower()}",  # at beta = 0 too: see KL_AT_BETA_0
        f"{rollout}.name=vllm",
        f"{rollout}.n={g}",
        f"{rollout}.temperature=1.0",
        f"{rollout}.seed=0",  # vLLM's sampling seed (plus each replica's rank)
        f"{rollout}.tensor_model_parallel_size=1",
        f"{rollout}.gpu_memory_utilization=0.6",
        f"{rollout}.log_prob_micro_batch_size_per_gpu={2 * PER_DEVICE}",
        # every preset loads the reference: a KL term, or KL_AT_BETA_0's measurement
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={2 * PER_DEVICE}",
        f"{rollout}.val_kwargs.do_sample=true",
        f"{rollout}.val_kwargs.temperature=1.0",
        f"{rollout}.val_kwargs.n={VALIDATION_SAMPLES}",
        "reward.custom_reward_function.path=reward.py",
        "reward.custom_reward_function.name=compute_score",
        "trainer.use_v1=true",
        f"trainer.n_gpus_per_node={NUM_GPUS}",
        "trainer.nnodes=1",
        "trainer.total_epochs=1",
        f"trainer.save_freq={CHECKPOINT_EVERY}",
        f"trainer.max_actor_ckpt_to_keep={CHECKPOINTS_KEPT}",
        "trainer.resume_mode=auto",
        f"trainer.test_freq={VALIDATE_EVERY}",
        "trainer.logger=[console,tensorboard]",
        f"trainer.log_val_generations={LOGGED_GENERATIONS}",
        f"trainer.rollout_data_dir=runs/{name}/rollouts",
        "trainer.project_name=grpo_lab",
        f"trainer.experiment_name={name}",
    ]
    if a.aggregation == "seq_mean_token_sum_norm":  # Dr. GRPO's constant: the budget, not the padded width
        o.append(f"{actor}.loss_scale_factor=${{data.max_response_length}}")
    if a.advantage == "group":
        o.append(f"algorithm.norm_adv_by_std_in_grpo={str(a.scale != 'none').lower()}")
    if a.beta > 0 and not a.kl_in_reward:
        o += [
            f"{actor}.kl_loss_coef={a.beta}",
            f"{actor}.kl_loss_type={KL[a.kl_kind]}",
        ]
    if a.beta == 0 and not a.kl_in_reward:
        o += KL_AT_BETA_0
    if a.kl_in_reward:
        o += [
            "algorithm.use_kl_in_reward=true",
            f"algorithm.kl_penalty={KL[a.kl_kind]}",
            f"algorithm.kl_ctrl.kl_coef={a.beta}",
        ]
    if a.advantage == "gae":
        o += [
            f"algorithm.gamma={a.gamma}",
            f"algorithm.lam={a.lam}",
            f"critic.model.path={model}",
            f"critic.optim.lr={VALUE['critic learning rate (PPO)']}",
            f"critic.ppo_micro_batch_size_per_gpu={PER_DEVICE}",
            f"critic.model.enable_gradient_checkpointing={str(VALUE['gradient checkpointing']).lower()}",
            # verl counts steps from 1 and updates the actor once global_steps >= critic_warmup
            # (trainer/ppo/v1/trainer_base.py), so N critic-only rollouts need critic_warmup = N + 1.
            f"trainer.critic_warmup={a.critic_warmup_steps + 1 if a.critic_warmup_steps else 0}",
            f"trainer.max_critic_ckpt_to_keep={CHECKPOINTS_KEPT}",
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
        # max_resp_len interpolates data.max_response_length (resolved by main_ppo), so overriding one moves both.
        o += [
            "+reward.reward_kwargs.max_resp_len=${data.max_response_length}",
            "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
            f"+reward.reward_kwargs.overlong_buffer_cfg.len={VALUE['overlong cache (DAPO)']}",
            "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
            "+reward.reward_kwargs.overlong_buffer_cfg.log=false",
        ]
    return o


RECIPE_PATHS = ("data.train_files", "data.val_files", "reward.custom_reward_function.path")
"""Overrides naming a file of the recipe's folder: run.sh makes them absolute, because Ray's workers resolve a
relative path in their own working directory, which is not this folder when the job attaches to a running cluster."""


def _shell_word(override: str) -> str:
    key, _, value = override.partition("=")
    if key in RECIPE_PATHS and not value.startswith("/"):
        return f'"{key}=$PWD/"{shlex.quote(value)}'  # run.sh has cd'd into the recipe's folder
    return shlex.quote(override)


def run_script(overrides: list[str]) -> str:
    """run.sh: ``./run.sh [GPUS] [key=value ...]``; every override is shell-quoted, the recipe's own files as
    absolute paths."""
    lines = " \\\n    ".join(_shell_word(o) for o in overrides)
    return (
        "#!/usr/bin/env bash\n"
        f"# verl {VERL_VERSION}. Install: {INSTALL}\n"
        "# python prepare_data.py first. ./run.sh [GPUS] [key=value ...]: GPUS sets trainer.n_gpus_per_node and must\n"
        "# divide ppo_mini_batch_size x rollout.n (verl splits each mini-batch's completions evenly over the GPUs)\n"
        "# (default " + str(NUM_GPUS) + "); later key=value arguments override the recipe's. Couplings:\n"
        "# actor.loss_scale_factor (Dr. GRPO) and +reward.reward_kwargs.max_resp_len (DAPO) follow\n"
        "# data.max_response_length; the overlong buffer's len does not. actor.ppo_mini_batch_size is a size in\n"
        "# prompts: a new data.train_batch_size changes the updates per rollout\n"
        "# (train_batch_size / ppo_mini_batch_size) unless you override both.\n"
        'set -euo pipefail\ncd "$(dirname "$0")"\n'
        f'GPUS={NUM_GPUS}\nif [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then GPUS="$1"; shift; fi\n'
        f'python -m verl.trainer.main_ppo \\\n    {lines} \\\n    "trainer.n_gpus_per_node=$GPUS" \\\n    "$@"\n'
    )


def verl_files(a: Algorithm, task: str, model: str, data_dir: str | None = None) -> dict[str, str]:
    """The verl recipe's files by relative path; ``data_dir`` (task gsm8k: GSM8K's files) is prepare_data.py's
    default."""
    source, reward_name = task_source(task)
    return {
        "prepare_data.py": render(
            "prepare_data.py",
            task=task,
            task_repr=repr(task),
            task_source=source,
            rows=ROWS[task],
            chat=task != "sum3",
            data_dir_repr=repr(data_dir),
        ),
        "reward.py": render("reward.py", task=task, task_source=task_source(task, False)[0], reward_name=reward_name),
        "run.sh": run_script(verl_overrides(a, model, task)),
    }
