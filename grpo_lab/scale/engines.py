"""The engine facts: every lab setting and health metric with its TRL 1.16 and verl 0.9.1 name, read from the
engines' own source, and the one place that says what an engine cannot run.

- ``SETTINGS``: lab knob -> ``GRPOConfig`` fields -> verl keys, with what each counts (counts vs sizes).
- ``VERL_READS``: for each verl key, the file of the verl package and the line fragment that reads it on the path
  ``python -m verl.trainer.main_ppo`` takes (the V1 trainer, the reward loop), read from ``verl_reads.tsv``;
  ``tests/integration/test_engines.py`` checks both that the key
  composes with verl's Hydra config and that the fragment is in that file.
- ``METRICS``: each lab health metric as TRL and verl log it, with the formula and scope each engine uses;
  ``tests/integration/test_engines.py`` checks the TRL keys against the log of a real ``GRPOTrainer`` step.
- ``gaps(algo, engine)`` / ``refusal(algo, engine)``: what an engine cannot run, and what to use instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files

from ..algorithms import Algorithm, get_algorithm
from ..core.checks import check_choice

TRL_VERSION = "1.16"
VERL_VERSION = "0.9.1"
ENGINES = ("trl", "verl")
A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"


def as_algorithm(algo: str | Algorithm) -> Algorithm:
    """A preset name or an ``Algorithm`` as an ``Algorithm``."""
    if isinstance(algo, Algorithm):
        return algo
    if isinstance(algo, str):
        return get_algorithm(algo)
    raise ValueError(f"algo must be a preset name or an Algorithm, got {type(algo).__name__}")


@dataclass(frozen=True)
class Setting:
    """One lab knob in both engines. ``trl``/``verl`` are empty where the engine has no such setting."""

    lab: str
    trl: tuple[str, ...]
    verl: tuple[str, ...]
    note: str


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "prompts_per_step",
        ("per_device_train_batch_size", "steps_per_generation"),
        ("data.train_batch_size",),
        "TRL counts completions: per_device_train_batch_size x processes x steps_per_generation = prompts x G; "
        "verl counts prompts (data.train_batch_size), each sampled rollout.n times",
    ),
    Setting("group_size", ("num_generations",), (f"{R}.n",), "G, completions per prompt, in both"),
    Setting("max_new_tokens", ("max_completion_length",), ("data.max_response_length",), "tokens, in both"),
    Setting("temperature", ("temperature",), (f"{R}.temperature",), "sampling temperature of the rollouts"),
    Setting(
        "rollout_is",
        ("vllm_importance_sampling_correction", "vllm_importance_sampling_mode"),
        ("algorithm.rollout_correction.rollout_is",),
        "the vLLM/trainer mismatch's correction. TRL: on by default with use_vllm=True, mode sequence_mask; "
        "verl: null in the composed config (the dataclass default is sequence; null: no weights, the gap still "
        "logged), token or sequence. export sets neither: each recipe keeps its engine's default",
    ),
    Setting(
        "rollout_is_max",
        ("vllm_importance_sampling_clip_max",),
        ("algorithm.rollout_correction.rollout_is_threshold",),
        "TRL: C_max, default 3.0 (truncate: clamp at it; mask: 0 above it); verl: a number truncates at it "
        "(default 2.0), a 'lower_upper' string masks outside [lower, upper], a lower bound required, so TRL's "
        "mask with no lower bound has no exact verl spelling",
    ),
    Setting("lr", ("learning_rate",), (f"{A}.optim.lr",), "the policy's learning rate"),
    Setting("weight_decay", ("weight_decay",), (f"{A}.optim.weight_decay",), "AdamW weight decay"),
    Setting("grad_clip", ("max_grad_norm",), (f"{A}.grad_clip",), "gradient-norm clip"),
    Setting(
        "seed",
        ("seed",),
        ("data.seed", f"{R}.seed"),
        "verl 0.9.1 has no trainer.seed: data.seed seeds the prompt sampler, rollout.seed is the vLLM engine's "
        "seed (plus the replica's rank; per-request seeds only with rollout.full_determinism); "
        "data.seed defaults to null (the sampler's new torch.Generator keeps torch's fixed default seed: the same "
        "prompt order in every run); actor.data_loader_seed and "
        "actor.fsdp_config.seed keep their default, 42, and actor.shuffle defaults to false, so the former "
        "shuffles nothing unless that is set",
    ),
    Setting("advantage", (), ("algorithm.adv_estimator",), "grpo or gae (a critic); TRL has no critic"),
    Setting(
        "scale",
        ("scale_rewards",),
        ("algorithm.norm_adv_by_std_in_grpo",),
        "TRL: group / batch / none; verl: true (the group's std) / false, no batch std",
    ),
    Setting(
        "ratio_level",
        ("importance_sampling_level",),
        (f"{A}.policy_loss.loss_mode",),
        "TRL: token / sequence; verl: vanilla / gspo",
    ),
    Setting(
        "aggregation",
        ("loss_type",),
        (f"{A}.loss_agg_mode", f"{A}.loss_scale_factor"),
        "TRL grpo / dapo / dr_grpo; verl seq-mean-token-mean / token-mean / seq-mean-token-sum-norm, whose "
        "constant is loss_scale_factor (without it, the padded width of the batch). TRL's dapo divides each "
        "optimiser step by the generation batch's tokens over the steps per generation (an average), the lab's "
        "token_mean and verl's token-mean by the step's own tokens: equal with one step per generation",
    ),
    Setting("clip_low", ("epsilon",), (f"{A}.clip_ratio_low",), "lower clip 1 - eps"),
    Setting("clip_high", ("epsilon_high",), (f"{A}.clip_ratio_high",), "upper clip 1 + eps_high"),
    Setting(
        "dual_clip",
        ("delta",),
        (f"{A}.clip_ratio_c",),
        "TRL: off unless delta is set; verl's vanilla loss always applies clip_ratio_c (default 3.0, must be "
        "> 1) to negative advantages, its gspo loss never does",
    ),
    Setting(
        "beta",
        ("beta",),
        (f"{A}.use_kl_loss", f"{A}.kl_loss_coef"),
        "KL in the loss; at 0 TRL loads no reference model. TRL multiplies k3 by the importance ratio by default "
        "(use_bias_correction_kl=True), which with token-level ratios gives it k2's gradient even on-policy (the "
        "lab's k3+); "
        "use_bias_correction_kl=False is the lab's k3",
    ),
    Setting(
        "kl_kind",
        (),
        (f"{A}.kl_loss_type", "algorithm.kl_penalty"),
        "TRL's KL has k3's value always, times the ratio by default (use_bias_correction_kl), which with token-level "
        "ratios gives it k2's gradient on-policy; verl low_var_kl = k3, kl = k1, mse = k2",
    ),
    Setting(
        "kl_in_reward",
        (),
        ("algorithm.use_kl_in_reward", "algorithm.kl_ctrl.kl_coef"),
        "KL folded into the reward: verl only",
    ),
    Setting("entropy_coef", ("entropy_coef",), (f"{A}.entropy_coeff",), "entropy bonus"),
    Setting(
        "dynamic_sampling",
        (),
        ("algorithm.filter_groups.enable", "algorithm.filter_groups.metric", "trainer.use_v1"),
        "verl: applied by the V1 trainer (trainer.use_v1=true, the default); set metric=acc (the default is "
        "reward); with the dapo reward manager a float score becomes acc, a dict must hold an acc key",
    ),
    Setting(
        "max_gen_batches",
        (),
        ("algorithm.filter_groups.max_num_gen_batches",),
        "ignored by verl's V1 trainer (it logs a warning): refills have no cap",
    ),
    Setting(
        "overlong_penalty",
        (),
        (
            "reward.reward_manager.name",
            "+reward.reward_kwargs.overlong_buffer_cfg.enable",
            "+reward.reward_kwargs.max_resp_len",
        ),
        "TRL: a reward function, trl.rewards.get_soft_overlong_punishment; verl: the dapo reward manager reads "
        "the appended + keys, and overlong_buffer_cfg.penalty_factor and .log too (export sets both)",
    ),
    Setting("overlong_cache", (), ("+reward.reward_kwargs.overlong_buffer_cfg.len",), "tokens"),
    Setting("overlong_filter", ("mask_truncated_completions",), (), "verl has no such mask"),
    Setting(
        "minibatches",
        ("steps_per_generation", "gradient_accumulation_steps"),
        (f"{A}.ppo_mini_batch_size",),
        "a COUNT in the lab and in TRL (optimiser steps per rollout = steps_per_generation / "
        "gradient_accumulation_steps); a SIZE in verl: ppo_mini_batch_size prompts per update = "
        "train_batch_size / minibatches",
    ),
    Setting("epochs", ("num_iterations",), (f"{A}.ppo_epochs",), "passes over each rollout"),
    Setting("gamma", (), ("algorithm.gamma",), "GAE discount; verl only"),
    Setting("lam", (), ("algorithm.lam",), "GAE lambda; verl only"),
    Setting("value_clip", (), ("critic.cliprange_value",), "verl only"),
    Setting("critic_lr", (), ("critic.optim.lr",), "the critic's own optimiser; verl has no vf_coef"),
    Setting(
        "critic_warmup_steps",
        (),
        ("trainer.critic_warmup",),
        "rollouts that train the critic alone; verl counts steps from 1 and updates the actor once the step "
        "reaches critic_warmup, so set critic_warmup to the lab's N + 1",
    ),
    # run control: not lab knobs, but what an exported recipe sets
    Setting("passes over the data", ("num_train_epochs",), ("trainer.total_epochs",), "TRL's default is 3, verl's 30"),
    Setting(
        "checkpoints",
        ("save_strategy", "save_steps", "save_total_limit"),
        ("trainer.save_freq", "trainer.max_actor_ckpt_to_keep", "trainer.resume_mode"),
        "verl's save_freq defaults to -1 (never saves); resume_mode=auto resumes from default_local_dir",
    ),
    Setting(
        "validation",
        ("eval_strategy", "eval_steps", "num_generations_eval"),
        ("trainer.test_freq", f"{R}.val_kwargs.do_sample", f"{R}.val_kwargs.temperature", f"{R}.val_kwargs.n"),
        "verl's test_freq defaults to -1 (no validation during training; val_before_train=true still validates once "
        "before it) and val_kwargs to greedy, n=1",
    ),
    Setting(
        "tracking",
        ("report_to", "log_completions"),
        ("trainer.logger", "trainer.log_val_generations", "trainer.rollout_data_dir"),
        "TRL's log_completions writes the last generation batch (prompt, completion, rewards, advantage) to "
        "OUTPUT_DIR/completions/completions_STEP.parquet at each logging step, prints a sample only if rich is "
        "installed and sends the table to wandb/trackio only; verl's tensorboard logger also takes the validation "
        "generations, rollout_data_dir writes every training completion as JSON lines",
    ),
    Setting(
        "reward file",
        ("reward_funcs (a GRPOTrainer argument)",),
        ("reward.custom_reward_function.path", "reward.custom_reward_function.name"),
        "verl: the reward loop reads reward.custom_reward_function",
    ),
)
"""The lab's knobs and the recipe's run settings in both engines."""


def _read_verl_reads() -> dict[str, tuple[str, str]]:
    text = (files(__package__) / "verl_reads.tsv").read_text(encoding="utf-8")
    rows = [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]
    return {key: (path, fragment) for key, path, fragment in rows}


VERL_READS = _read_verl_reads()
"""Where verl 0.9.1 reads each key of ``SETTINGS``: (file under the verl package, a fragment of the reading line),
one line of the data file ``verl_reads.tsv`` a key."""


@dataclass(frozen=True)
class Metric:
    """One lab health metric as each engine logs it; an empty key: the engine does not log it."""

    lab: str
    trl: str
    trl_means: str
    verl: str
    verl_means: str
    verl_read: tuple[str, str] = ("", "")


METRICS: tuple[Metric, ...] = (
    Metric(
        "reward_mean",
        "reward",
        "mean of the summed (weighted) rewards over every completion of the rollout",
        "critic/score/mean",
        "mean of each sequence's score over the batch",
        ("trainer/ppo/metric_utils.py", '"critic/score/mean": score_mean'),
    ),
    Metric(
        "reward_std_within_group",
        "",
        "not logged: TRL's reward_std is the std over the whole batch (nanstd(rewards)), which can stay high when "
        "every group has zero std (a mix of all-right and all-wrong groups); the exported recipe logs "
        "health/reward_std_within_group",
        "",
        "not logged",
    ),
    Metric(
        "zero_std_frac",
        "frac_reward_zero_std",
        "share of completions whose group's reward std is 0 (per group when scale_rewards is group or none; "
        "for scale_rewards=batch it tests the batch std)",
        "training/filter_groups/evicted_samples",
        "with filter_groups on: the number of prompt groups evicted in the step because their metric was all "
        "equal (len(dapo_uids), summed over the replay buffer's polls); absent when none",
        ("trainer/ppo/v1/replay_buffer.py", '/filter_groups/evicted_samples"] = len(dapo_uids)'),
    ),
    Metric(
        "kl",
        "kl",
        "mean k3 per token (with use_bias_correction_kl, k3 times the ratio) over completion tokens, logged only "
        "when beta != 0 (at 0 TRL loads no reference model); at beta = 0 the exported recipe logs "
        "health/kl_to_start, k3 of the sampling policy to the starting weights per token over each rollout",
        "actor/kl_loss",
        "kl_loss_type's estimator aggregated with loss_agg_mode, logged only when use_kl_loss=true (the exported "
        "recipe sets it at beta = 0 too, with kl_loss_coef=0: logged, not in the gradient)",
        ("workers/utils/losses.py", 'metrics["kl_loss"] = Metric(value=kl_loss'),
    ),
    Metric(
        "length_mean",
        "completions/mean_length",
        "mean completion length in tokens over the rollout",
        "response_length/mean",
        "mean response length over the batch",
        ("trainer/ppo/metric_utils.py", '"response_length/mean": torch.mean(response_length)'),
    ),
    Metric(
        "entropy",
        "entropy",
        "mean per-token entropy over completion tokens",
        "actor/entropy",
        "per-token entropy aggregated with loss_agg_mode",
        ("trainer/ppo/v1/trainer_base.py", '"actor/entropy": entropy_agg.detach().item()'),
    ),
    Metric(
        "clip_frac",
        "clip_ratio/region_mean",
        "share of completion tokens whose clip cuts the gradient, (r < 1 - eps and A < 0) or (r > 1 + eps_high "
        "and A > 0) (low_mean and high_mean split it); with importance_sampling_level=sequence, share of sequences; "
        "logged per optimiser step (one mini-batch) and averaged over logging_steps, not per rollout",
        "actor/pg_clipfrac",
        "share of tokens where the clipped term is the larger loss, per token for vanilla and gspo alike, averaged "
        "over micro-batches and mini-batches (a mean of shares, not one global token share)",
        ("trainer/ppo/core_algos.py", '"actor/pg_clipfrac": pg_clipfrac.detach().item()'),
    ),
    Metric(
        "clip_frac_low",
        "clip_ratio/low_mean",
        "share of completion tokens with r < 1 - epsilon and A < 0 (loss types grpo, bnpo, dr_grpo, dapo, luspo)",
        "",
        "not logged per side: actor/pg_clipfrac counts both sides; actor/pg_clipfrac_lower is the dual clip's "
        "share (A < 0 and the loss capped at clip_ratio_c), not the lower clip",
    ),
    Metric(
        "clip_frac_high",
        "clip_ratio/high_mean",
        "share of completion tokens with r > 1 + epsilon_high and A > 0 (loss types grpo, bnpo, dr_grpo, dapo, luspo)",
        "",
        "not logged per side: actor/pg_clipfrac counts both sides",
    ),
    Metric(
        "approx_kl",
        "",
        "not logged: TRL's kl is to the reference model (beta != 0); sampling/importance_sampling_ratio/* "
        "compares the vLLM sampler with the trainer, not successive updates",
        "actor/ppo_kl",
        "k1 estimate mean(old_log_prob - log_prob) over response tokens (the lab's "
        "approx_kl is k3 of the same KL: the same expectation, never negative)",
        ("trainer/ppo/core_algos.py", '"actor/ppo_kl": ppo_kl.detach().item()'),
    ),
)
"""The lab's health metrics and their counterparts in the engines' logs."""

TRL_KL_ONLY_WITH_BETA = ("kl",)
"""TRL keys of ``METRICS`` logged only when beta != 0 (trl/trainer/grpo_trainer.py: ``if self.beta != 0.0``)."""


def setting(lab: str) -> Setting:
    """The row of ``SETTINGS`` for lab knob ``lab``."""
    for s in SETTINGS:
        if s.lab == lab:
            return s
    raise ValueError(f"lab must be a knob of SETTINGS, got {lab!r}")


def verl_keys() -> list[str]:
    """Every verl key of ``SETTINGS``."""
    return [k for s in SETTINGS for k in s.verl]


# --- what an engine cannot run ------------------------------------------------------------------


def gaps(algo: str | Algorithm, engine: str) -> list[str]:
    """What of ``algo`` ``engine`` cannot run, one sentence each naming what to use instead; empty when nothing."""
    check_choice("engine", engine, ENGINES)
    a = as_algorithm(algo)
    out = []
    if a.advantage == "gfpo":
        # A GRPOTrainer subclass would have to replace _generate_and_score_completions, a private method
        # whose signature has changed between TRL releases; a recipe pinned to it would break silently.
        out.append(
            f"GFPO is in neither engine: TRL removed GFPOTrainer (huggingface/trl#6309) and verl {VERL_VERSION} "
            "has no length filter on groups. Use the lab's trainer on one GPU (python -m grpo_lab train --algo gfpo "
            "--task gsm8k --model NAME), or export dapo or dr_grpo, whose losses drop the per-answer "
            "1/|o_i| weight behind GRPO's length bias (notebook 04): a change to the loss, not a filter on length"
        )
    if a.target_kl is not None:
        out.append(
            f"target_kl (stop a rollout's updates once approx-KL passes it) is in neither engine: TRL {TRL_VERSION}'s "
            f"GRPOConfig has no such field, and verl's algorithm.kl_ctrl.target_kl is the adaptive KL coefficient's "
            "target, another thing. Export without it"
        )
    if engine == "verl":
        if a.scale == "batch":
            out.append("scale='batch' has no verl key (norm_adv_by_std_in_grpo divides by the group's std)")
        return out
    if a.advantage == "gae":
        out.append(
            "PPO with a critic is not in TRL: PPOTrainer was removed (huggingface/trl#7020) and GRPOTrainer has no "
            "value model. Use --engine verl (algorithm.adv_estimator=gae with a critic)"
        )
    if a.dynamic_sampling:
        out.append(
            "DAPO's dynamic sampling (drop all-equal groups, sample more) is not in TRL's GRPOTrainer. Use --engine "
            "verl (algorithm.filter_groups), or export DAPO without it: python -m grpo_lab export --algo dapo "
            "--set dynamic_sampling=false --engine trl --out DIR"
        )
    if a.kl_in_reward:
        out.append("KL folded into the reward is not in TRL's GRPOTrainer (only k3 KL in the loss). Use --engine verl")
    elif a.beta > 0 and a.kl_kind != "k3":
        out.append(f"TRL's GRPOTrainer has only the k3 KL, not {a.kl_kind}. Use --engine verl (kl_loss_type)")
    if a.dual_clip is not None and a.dual_clip <= 1 + (a.clip_high if a.clip_high is not None else a.clip_low):
        out.append(f"dual_clip {a.dual_clip} <= 1 + clip_high: TRL's delta then differs from a dual clip")
    return out


def refusal(algo: str | Algorithm, engine: str) -> str | None:
    """Why ``engine`` cannot run ``algo`` and what to use instead (the first gap), or None when it can."""
    found = gaps(algo, engine)
    return found[0] if found else None
