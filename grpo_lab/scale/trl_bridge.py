"""From the lab to TRL: the lab's settings as TRL's ``GRPOConfig``, TRL's own loss on the lab's batch,
and TRL's ``GRPOTrainer`` driving the lab's model and task.

- ``grpo_config_kwargs(algo, cfg)``: the ``GRPOConfig`` fields that reproduce a lab preset (what TRL cannot
  run is ``engines.gaps(algo, "trl")``).
- ``trl_policy_loss(...)``: TRL's ``GRPOTrainer._compute_loss`` called for real on given log-probs,
  through a stand-in object that carries exactly the attributes that method reads.
- ``reward_function(task, tokenizer)``: the task's reward in TRL's reward-function signature.
- ``make_trl_trainer(model, tokenizer, task, ...)``: a ``GRPOTrainer`` on the lab's model and task,
  offline and on one process; ``trl_history(trainer)`` reads its per-step log as the lab's metric names.

TRL is imported inside the functions: the rest of the package works without it.
"""

from __future__ import annotations

import os
import tempfile
import time
import types
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ..algorithms import Algorithm
from ..core.checks import check_choice, check_positive_int
from .engines import as_algorithm, gaps

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from trl import GRPOTrainer

    from ..lab.tasks import Task
    from ..train.trainer import TrainConfig

LOSS_TYPE = {"seq_mean_token_mean": "grpo", "token_mean": "dapo", "seq_mean_token_sum_norm": "dr_grpo"}
"""The lab's ``aggregation`` -> TRL's ``loss_type``. ``"bnpo"`` is also ``token_mean`` on one process
without gradient accumulation; ``"dapo"`` is TRL's default and stays token-mean across accumulation."""
TRL_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
"""The ``loss_type`` values whose loss is the clipped surrogate the lab computes (they differ only in
the normaliser)."""
TRL_OTHER_LOSS_TYPES = ("cispo", "sapo", "luspo", "vespo")
"""``loss_type`` values of trl 1.16 that change the per-token loss itself (clipped weights, soft gates, length
scaling), which the lab does not compute."""
IMPORTANCE_SAMPLING_LEVEL = {"token": "token", "sequence": "sequence", "sequence_token": "sequence"}
"""``ratio_level`` -> ``importance_sampling_level``. GSPO-token equals GSPO (``"sequence"``) in value and
gradient whenever the advantage is one per sequence, which is all TRL computes."""


def trl_loss_type(aggregation: str) -> str:
    """TRL's ``loss_type`` for the lab's ``aggregation``."""
    check_choice("aggregation", aggregation, LOSS_TYPE)
    return LOSS_TYPE[aggregation]


def grpo_config_kwargs(algo: str | Algorithm = "grpo", cfg: TrainConfig | None = None) -> dict:
    """The ``GRPOConfig`` fields that reproduce ``algo`` (a preset name or an ``Algorithm``) with the run
    sizes of ``cfg`` (a ``TrainConfig``; default sizes when None), on one process.

    One lab step (one rollout of ``prompts_per_step * group_size`` completions, split into
    ``minibatches`` optimiser steps) is ``steps_per_generation = minibatches`` TRL optimiser steps.
    What TRL cannot express is left out here and listed by ``engines.gaps(algo, "trl")``.
    """
    from ..train.trainer import TrainConfig

    a = as_algorithm(algo)
    cfg = cfg if cfg is not None else TrainConfig()
    n = cfg.prompts_per_step * cfg.group_size
    if n % a.minibatches:
        raise ValueError(f"minibatches must divide prompts_per_step * group_size = {n}, got {a.minibatches}")
    kw = {
        "num_generations": cfg.group_size,
        "per_device_train_batch_size": n // a.minibatches,
        "steps_per_generation": a.minibatches,
        "gradient_accumulation_steps": 1,
        "num_iterations": a.epochs,
        "max_completion_length": cfg.max_new_tokens,
        "temperature": cfg.temperature,
        "learning_rate": cfg.lr,
        "weight_decay": cfg.weight_decay,
        "max_grad_norm": cfg.grad_clip,
        "lr_scheduler_type": "constant",
        "seed": cfg.seed,
        "loss_type": trl_loss_type(a.aggregation),
        "importance_sampling_level": IMPORTANCE_SAMPLING_LEVEL[a.ratio_level],
        "epsilon": a.clip_low,
        "epsilon_high": a.clip_high if a.clip_high is not None else a.clip_low,
        "scale_rewards": a.scale,
        "beta": 0.0 if a.kl_in_reward else a.beta,
        # False: the k3 term of the GRPO paper, which the lab computes (exact parity). TRL's default, True, multiplies
        # it by the ratio, which makes its gradient the unbiased reverse-KL gradient (notebook 03's fix).
        "use_bias_correction_kl": False,
        "entropy_coef": a.entropy_coef,
        "mask_truncated_completions": a.overlong_filter,
    }
    if a.dual_clip is not None:
        # equals verl's dual clip when delta > 1 + epsilon_high (tests/integration/test_trl_parity.py)
        kw["delta"] = a.dual_clip
    return kw


# --- TRL's loss, called for real -------------------------------------------------------------------


class _IdentityAccelerator:
    """One process: gather and reduce are the identity."""

    num_processes = 1
    sync_gradients = True

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def gather_for_metrics(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def reduce(self, x: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        return x


def trl_stand_in(
    logp: torch.Tensor,
    loss_type: str,
    importance_sampling_level: str,
    epsilon: float,
    epsilon_high: float | None,
    beta: float,
    max_completion_length: int | None,
    delta: float | None,
    use_bias_correction_kl: bool,
    entropies: torch.Tensor | None,
) -> types.SimpleNamespace:
    """An object with exactly the attributes ``GRPOTrainer._compute_loss`` (trl 1.16) reads, whose
    ``_get_per_token_logps_and_entropies`` returns ``logp`` (so gradients flow to the caller's tensor).
    The settings are the ``GRPOConfig`` fields of the same names (``epsilon_high=None``: ``epsilon``);
    ``trl_policy_loss`` declares their defaults."""
    entropies = torch.zeros_like(logp.detach()) if entropies is None else entropies

    def get_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        if logits_to_keep != logp.shape[1]:
            raise ValueError(f"logits_to_keep must be the completion length {logp.shape[1]}, got {logits_to_keep}")
        return logp, entropies, None

    return types.SimpleNamespace(
        loss_type=loss_type,
        importance_sampling_level=importance_sampling_level,
        epsilon_low=epsilon,
        epsilon_high=epsilon if epsilon_high is None else epsilon_high,
        beta=beta,
        args=types.SimpleNamespace(delta=delta, use_bias_correction_kl=use_bias_correction_kl, steps_per_generation=1),
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        aux_loss_enabled=False,
        _entropy_bonus_enabled=False,
        max_completion_length=max_completion_length if max_completion_length is not None else logp.shape[1],
        current_gradient_accumulation_steps=1,
        accelerator=_IdentityAccelerator(),
        model=types.SimpleNamespace(training=True),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _get_per_token_logps_and_entropies=get_logps_and_entropies,
    )


def trl_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str = "dapo",
    importance_sampling_level: str = "token",
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    beta: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    max_completion_length: int | None = None,
    delta: float | None = None,
    use_bias_correction_kl: bool = False,
    entropies: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """TRL's own ``GRPOTrainer._compute_loss`` on a batch of per-token log-probs.

    ``logp`` ``[B, T]`` (may require grad: the loss is differentiable w.r.t. it), ``old_logp`` ``[B, T]`` or
    None (on-policy: TRL then uses ``logp.detach()``), ``advantages`` ``[B]``, ``mask`` ``[B, T]`` 0/1,
    ``ref_logp`` needed when ``beta > 0``. Returns ``(loss, metrics)`` with TRL's logged metrics
    (``clip_ratio/low_mean``, ``clip_ratio/high_mean``, ``clip_ratio/region_mean``, ``kl``, ...), one value each.
    """
    from trl import GRPOTrainer

    check_choice("loss_type", loss_type, TRL_LOSS_TYPES)
    check_choice("importance_sampling_level", importance_sampling_level, ("token", "sequence"))
    if not isinstance(logp, torch.Tensor) or logp.dim() != 2:
        raise ValueError(f"logp must be a [B, T] tensor, got {getattr(logp, 'shape', type(logp).__name__)}")
    if tuple(mask.shape) != tuple(logp.shape):
        raise ValueError(f"mask must have shape {tuple(logp.shape)} like logp, got {tuple(mask.shape)}")
    if advantages.dim() != 1 or advantages.shape[0] != logp.shape[0]:
        raise ValueError(f"advantages must have shape ({logp.shape[0]},), got {tuple(advantages.shape)}")
    if beta != 0.0 and ref_logp is None:
        raise ValueError(f"ref_logp must be given when beta != 0, got None with beta={beta}")
    B, T = logp.shape
    stand_in = trl_stand_in(
        logp,
        loss_type,
        importance_sampling_level,
        epsilon,
        epsilon_high,
        beta,
        max_completion_length,
        delta,
        use_bias_correction_kl,
        entropies,
    )
    mask = mask.long()
    inputs = {
        "prompt_ids": torch.ones(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.ones(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": advantages,
        "num_items_in_batch": mask.sum(),
    }
    if old_logp is not None:
        inputs["old_per_token_logps"] = old_logp
    if beta != 0.0:
        inputs["ref_per_token_logps"] = ref_logp
    loss = GRPOTrainer._compute_loss(stand_in, None, inputs)
    metrics = {k: v[0] for k, v in stand_in._metrics["train"].items() if v}
    return loss, metrics


# --- TRL's trainer on the lab's model and task -------------------------------------------------------


def reward_function(task: Task, tokenizer: PreTrainedTokenizerBase) -> Callable[..., list[float]]:
    """The task's reward as a TRL reward function: ``f(prompts, completions, completion_ids, answer, **kw)``.

    A completion counts as finished when its last token is EOS (TRL keeps the EOS in ``completion_ids``),
    exactly as the lab's rollout decides it, so both trainers score the same text the same way.
    """
    from ..lab.tasks import score_completions

    eos = tokenizer.eos_token_id

    def sum3_reward(prompts, completions, completion_ids, answer, **kwargs):
        texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
        finished = [len(ids) > 0 and ids[-1] == eos for ids in completion_ids]
        return score_completions(task.reward_fn, texts, list(answer), finished)

    sum3_reward.__name__ = f"{task.name}_reward"
    return sum3_reward


class _StepTimer:
    """A TrainerCallback that records the wall time of each optimiser step."""

    def __new__(cls):
        from transformers import TrainerCallback

        class StepTimer(TrainerCallback):
            def __init__(self):
                self.step_seconds: list[float] = []
                self._t = None

            def on_step_begin(self, args, state, control, **kwargs):
                self._t = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                self.step_seconds.append(time.perf_counter() - self._t)

        return StepTimer()


def make_trl_trainer(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    algo: str | Algorithm = "grpo",
    steps: int = 10,
    prompts_per_step: int = 16,
    group_size: int = 8,
    max_new_tokens: int = 32,
    lr: float = 1e-4,
    temperature: float = 1.0,
    seed: int = 0,
    output_dir: str | None = None,
    **config_overrides: Any,
) -> GRPOTrainer:
    """A TRL ``GRPOTrainer`` that trains ``model`` on ``task`` with the lab preset ``algo``'s settings.

    Offline, no logging service (``report_to="none"``), no checkpoints, one process; float32 and no
    gradient checkpointing on the CPU (TRL's defaults are bf16 and checkpointing). ``steps`` counts lab
    steps (rollouts); TRL's ``max_steps`` is ``steps * minibatches``. ``config_overrides`` go to
    ``GRPOConfig`` last. The trainer carries ``step_timer.step_seconds`` (seconds per optimiser step).
    Raises ``ValueError`` for an algorithm TRL cannot run (a non-empty ``engines.gaps(algo, "trl")``).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from trl import GRPOConfig, GRPOTrainer

    from ..train.trainer import TrainConfig

    a = as_algorithm(algo)
    blocking = gaps(a, "trl")
    if blocking:
        raise ValueError(f"algo {a.name!r} needs what TRL's GRPOTrainer does not have: {'; '.join(blocking)}")
    check_positive_int("steps", steps)
    # The sizes grpo_config_kwargs reads, checked as a lab run's are (steps is checked above).
    cfg = TrainConfig(
        prompts_per_step=prompts_per_step, group_size=group_size, max_new_tokens=max_new_tokens,
        lr=lr, temperature=temperature, seed=seed,
    )  # fmt: skip
    kw = grpo_config_kwargs(a, cfg)
    on_cpu = next(model.parameters()).device.type == "cpu"
    kw.update(
        output_dir=output_dir or tempfile.mkdtemp(prefix="grpo_lab_trl_"),
        max_steps=steps * a.minibatches,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=False,
        bf16=False if on_cpu else kw.get("bf16", None),
        use_cpu=on_cpu,
        gradient_checkpointing=False,
        dataloader_num_workers=0,
        log_completions=False,
    )
    kw = {k: v for k, v in kw.items() if v is not None}
    kw.update(config_overrides)
    args = GRPOConfig(**kw)
    reward_funcs = [reward_function(task, tokenizer)]
    if a.overlong_penalty:
        from trl.rewards import get_soft_overlong_punishment

        reward_funcs.append(
            get_soft_overlong_punishment(max_completion_len=max_new_tokens, soft_punish_cache=a.overlong_cache)
        )
    timer = _StepTimer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=task.train.select_columns(["prompt", "answer"]),
        processing_class=tokenizer,
        callbacks=[timer],
    )
    trainer.step_timer = timer
    _quiet_progress(trainer)
    return trainer


def _quiet_progress(trainer) -> None:
    """Keep TRL's progress bar but not its printed dict of metrics after every step (read them with
    ``trl_history``)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class QuietProgress(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            return None

    trainer.remove_callback(PrinterCallback)
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(QuietProgress())


def trl_history(trainer: GRPOTrainer) -> list[dict]:
    """TRL's per-step log as a list of dicts with the lab's names where they exist:
    ``step``, ``reward_mean``, ``accuracy`` (the task reward's mean), ``length_mean``, ``entropy``, ``kl``,
    ``clip_frac``, ``step_seconds`` (from the trainer's step timer, when it has one)."""
    rows = [r for r in trainer.state.log_history if "reward" in r]
    timer = getattr(trainer, "step_timer", None)
    out = []
    for i, r in enumerate(rows):
        acc = next((v for k, v in r.items() if k.startswith("rewards/") and k.endswith("_reward/mean")), float("nan"))
        row = {
            "step": int(r.get("step", i + 1)),
            "reward_mean": r["reward"],
            "accuracy": acc,
            "length_mean": r.get("completions/mean_length", float("nan")),
            "entropy": r.get("entropy", float("nan")),
            "kl": r.get("kl", float("nan")),
            "clip_frac": r.get("clip_ratio/region_mean", float("nan")),
            "loss": r.get("loss", float("nan")),
        }
        if timer is not None and i < len(timer.step_seconds):
            row["step_seconds"] = timer.step_seconds[i]
        out.append(row)
    return out
