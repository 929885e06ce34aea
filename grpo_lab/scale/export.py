"""From the lab to a cluster: a preset written out as a recipe that TRL or verl launches as it is.

``export_recipe(algo, engine, model, task, out)`` writes, for ``engine="trl"`` (``trl_recipe``): ``train_grpo.py``
(the task's prompts, the lab's reward in TRL's signature, ``GRPOConfig`` at scale; ``--smoke`` runs two optimiser
steps at CPU sizes), ``accelerate/{single_gpu,multi_gpu,zero3}.yaml`` and ``launch.sh``; for ``engine="verl"``
(``verl_recipe``, verl 0.9.1): ``prepare_data.py``, ``reward.py`` and ``run.sh``. Both write a ``README.md`` with the
effective algorithm (``effective_algorithm``) and the table of lab vs at-scale values (``at_scale.AT_SCALE``).

What an engine cannot run is refused with one line that names what to use instead (``engines.refusal``). The files
are written into a temporary folder next to ``out`` and renamed into place, so an interrupted export leaves no
half-written recipe; ``out`` must be empty, new, or a recipe this command wrote before (nothing else in it).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import tempfile
from pathlib import Path

from ..algorithms import Algorithm, get_algorithm
from ..core.checks import check_choice
from ..io import replace_folder
from ..lab.tasks import check_data_dir, gsm8k_split
from .at_scale import NUM_GPUS, VALUE, scale_table
from .engines import ENGINES, VERL_VERSION, as_algorithm, refusal
from .task_code import TASKS
from .trl_recipe import INSTALL as TRL_INSTALL
from .trl_recipe import rollout_arithmetic, trl_files, trl_settings
from .verl_recipe import INSTALL as VERL_INSTALL
from .verl_recipe import NO_DUAL_CLIP, dual_clip, verl_files, verl_overrides

MARKER = ".grpo_lab_recipe.json"
"""Written into every recipe folder: the files export wrote, so a later export may replace exactly those."""


def _choices_note(a: Algorithm) -> str:
    """Two of the preset's choices a reader of the paper would not expect, said in the README."""
    notes = []
    if a.beta == 0 and a.advantage != "gae":
        notes.append(
            "No KL penalty (beta = 0), as in the lab, TRL's default, DAPO, Dr. GRPO and GSPO; DeepSeekMath's "
            "GRPO used beta = 0.04 (`--set beta=0.04` at export)."
        )
    if a.advantage == "gae":
        g = VALUE["completions per prompt (G)"]
        notes.append(
            f"PPO has no groups: its advantages come from the critic (GAE). It samples {g} completions per "
            "prompt only to keep the other presets' batch shape."
        )
    return "".join(f"{n}\n\n" for n in notes)


def set_flags(a: Algorithm) -> list[tuple[str, object]]:
    """The fields of ``a`` that differ from its preset ``a.name`` (what ``--set`` changed); empty for a custom name."""
    try:
        preset = get_algorithm(a.name)
    except ValueError:
        return []
    return [
        (f.name, getattr(a, f.name))
        for f in dataclasses.fields(a)
        if f.name != "name" and getattr(a, f.name) != getattr(preset, f.name)
    ]


def effective_algorithm(algo: str | Algorithm, engine: str) -> tuple[list[str], list[str]]:
    """What the exported recipe runs, in words (updates per rollout, each clip, dual clip, aggregation, KL, seeds,
    epochs), and a warning for each configured mechanism that cannot act in it."""
    check_choice("engine", engine, ENGINES)
    a = as_algorithm(algo)
    updates = a.minibatches * a.epochs
    high = a.clip_high if a.clip_high is not None else a.clip_low
    acts = updates > 1
    lines = [
        f"updates per rollout: {updates} ({a.minibatches} mini-batches x {a.epochs} epochs)",
        f"clip: 1 - {a.clip_low} / 1 + {high}: "
        + ("can act from the second update of each rollout on" if acts else "cannot act (every ratio is 1)"),
    ]
    warnings = []
    if not acts:
        warnings.append(
            f"clip_low {a.clip_low} and clip_high {high} cannot act: with 1 update per rollout the old log-probs come "
            "from the weights being updated, so every ratio is 1 up to recompute noise (TRL recomputes them in a "
            "separate forward pass when vLLM's correction is on, verl recomputes old_log_prob unless algorithm.rollout_correction.bypass_mode=true)"
        )
    if engine == "trl":
        s = trl_settings(a)
        lines += [
            "dual clip: " + (f"delta={s['delta']}" if "delta" in s else "none (delta unset)"),
            f"aggregation: loss_type={s['loss_type']}",
            "KL: "
            + (
                f"beta={s['beta']} (k3 in the loss)"
                if s["beta"]
                else "none in the loss (beta=0); the script loads TRL's reference model to log health/kl_to_start, "
                "the k3 KL of each rollout's sampling policy to the starting weights"
            ),
            "vLLM/trainer mismatch: vllm_importance_sampling_correction=True, mode sequence_mask (TRL's defaults): "
            "one ratio exp(sum_t(logp_train - logp_vllm)) per completion weights its loss, unclipped; a completion "
            "whose ratio exceeds vllm_importance_sampling_clip_max=3 gets loss 0",
            f"seeds: seed={s['seed']} sets the data order and transformers' sampling (--vllm-mode none); vLLM's seed "
            "is the process index (divided by the tensor-parallel size) in colocate mode; a pretrained model is not "
            "initialised from it",
            f"epochs: num_train_epochs={s['num_train_epochs']} pass over the data, num_iterations={s['num_iterations']}",
        ]
        if dict(set_flags(a)).get("dynamic_sampling") is False:
            lines.append("dynamic sampling: off (TRL has none)")
    else:
        o = dict(x.lstrip("+").split("=", 1) for x in verl_overrides(a))
        c = dual_clip(a)
        if a.ratio_level != "token":
            dual = "none (verl's gspo loss has no dual clip)"
        elif c == NO_DUAL_CLIP:
            dual = f"off (clip_ratio_c={c:g}, a bound no ratio reaches; verl's default 3.0 would be on)"
        else:
            dual = f"clip_ratio_c={c} on negative advantages"
        kl = "none (use_kl_loss=false)"
        if o.get("actor_rollout_ref.actor.use_kl_loss") == "true" and a.beta == 0:
            kl = (
                "none in the loss (kl_loss_coef=0.0); use_kl_loss=true loads the reference so that actor/kl_loss "
                f"logs the KL ({o['actor_rollout_ref.actor.kl_loss_type']}) to the starting weights"
            )
        elif o.get("actor_rollout_ref.actor.use_kl_loss") == "true":
            kl = f"kl_loss_coef={a.beta} ({o['actor_rollout_ref.actor.kl_loss_type']}) in the loss"
        elif a.kl_in_reward:
            kl = f"kl_coef={a.beta} ({o['algorithm.kl_penalty']}) in the reward"
        lines += [
            "dual clip: " + dual,
            f"aggregation: loss_agg_mode={o['actor_rollout_ref.actor.loss_agg_mode']}",
            "KL: " + kl,
            "vLLM/trainer mismatch: no correction (algorithm.rollout_correction.rollout_is: null, verl's default)",
            f"seeds: data.seed={o['data.seed']} (the prompt sampler), "
            f"actor_rollout_ref.rollout.seed={o['actor_rollout_ref.rollout.seed']} (the vLLM engine's seed plus the "
            "replica's rank; per-request seeds only with rollout.full_determinism=true); actor.data_loader_seed and "
            "actor.fsdp_config.seed keep their default, 42",
            f"epochs: trainer.total_epochs={o['trainer.total_epochs']}: the V1 trainer runs len(train dataset after prompt filtering) // "
            "data.train_batch_size rollouts"
            + (
                ", and dynamic sampling's refills draw more prompts from the same dataloader, which restarts when it "
                "runs out: more than one pass of prompts is drawn"
                if a.dynamic_sampling
                else ""
            )
            + f"; ppo_epochs={o['actor_rollout_ref.actor.ppo_epochs']}",
        ]
        if a.dynamic_sampling and a.max_gen_batches:
            warnings.append(
                f"max_gen_batches {a.max_gen_batches} cannot act: verl's V1 trainer ignores "
                "algorithm.filter_groups.max_num_gen_batches (refills have no cap)"
            )
    return lines, warnings


def _readme(
    a: Algorithm, engine: str, model: str, task: str, summary: list[str], warnings: list[str], data_dir: str | None
) -> str:
    head = f"# {a.name} on {task} with {'TRL' if engine == 'trl' else 'verl ' + VERL_VERSION}\n\n"
    sets = "".join(f" --set {k}={json.dumps(v)}" for k, v in set_flags(a))
    data = f" --data-dir {shlex.quote(data_dir)}" if data_dir else ""
    body = f"Exported by `python -m grpo_lab export --algo {a.name}{sets} --engine {engine} --task {task}{data}`.\n\n"
    if data_dir:
        script = "train_grpo.py" if engine == "trl" else "prepare_data.py"
        body += (
            f"Data: GSM8K's `train.jsonl` and `test.jsonl` in `{data_dir}`, {script}'s `--data-dir` default (the "
            "Hugging Face hub without one).\n\n"
        )
    body += f"Install: `{TRL_INSTALL if engine == 'trl' else VERL_INSTALL}`\n\n## The algorithm this recipe runs\n\n"
    body += "".join(f"- {line}\n" for line in summary) + "".join(f"- warning: {w}\n" for w in warnings) + "\n"
    body += _choices_note(a)
    if engine == "trl":
        s = trl_settings(a)
        arith = rollout_arithmetic(
            s["per_device_train_batch_size"],
            NUM_GPUS,
            s["steps_per_generation"],
            s["gradient_accumulation_steps"],
            s["num_iterations"],
        )
        body += (
            "Files: `train_grpo.py` (the script), `accelerate/` (one GPU, DDP, DeepSpeed ZeRO-3), `launch.sh` "
            "(`./launch.sh [single_gpu|multi_gpu|zero3|server] [GPUS]`).\n\n## Batch arithmetic\n\n"
            "completions per rollout = per_device_train_batch_size x processes x steps_per_generation = "
            f"{s['per_device_train_batch_size']} x {NUM_GPUS} x {s['steps_per_generation']} = "
            f"{arith['completions_per_rollout']}; optimiser steps per rollout = steps_per_generation / "
            f"gradient_accumulation_steps x num_iterations = {arith['optimiser_steps_per_rollout']}. On fewer "
            "processes the script multiplies steps_per_generation and gradient_accumulation_steps by the same factor, "
            "so both numbers stay.\n\n"
            "## Checkpoints, validation, tracking\n\n"
            f"A checkpoint every {s['save_steps']} optimiser steps ({arith['optimiser_steps_per_rollout']} per "
            f"rollout here), the last {s['save_total_limit']} kept; a run started again with the same --output-dir "
            f"resumes from the last one. Validation every {s['eval_steps']} optimiser steps samples "
            f"{s['num_generations_eval']} completions per prompt of the held-out split (`--n-eval` prompts, 256 by default) at the "
            "training temperature. Metrics go to TensorBoard (`report_to=tensorboard`, offline: "
            "`tensorboard --logdir OUTPUT_DIR/runs`). `log_completions=True` writes the last generation batch "
            "(prompt, completion, each reward, advantage) to `OUTPUT_DIR/completions/completions_STEP.parquet` at "
            "each logging step, and prints a sample of it only if `rich` is installed (TRL sends the table itself "
            "only to wandb or trackio).\n\n"
            "## Generation: vLLM, colocated or a server\n\n"
            '- `vllm_mode="colocate"` (default here): vLLM runs inside each training process and, with '
            "`vllm_enable_sleep_mode`, releases its memory during the optimiser step.\n"
            "- `./launch.sh server GPUS`: `trl vllm-serve` on one more GPU; the training GPUs keep all their memory.\n"
            "- With vLLM, `vllm_importance_sampling_correction=True` in mode `sequence_mask` (TRL's defaults) "
            "recomputes the trainer's log-probs of each completion and takes one ratio per completion, "
            "exp(sum over its tokens of logp_trainer - logp_vLLM). A completion whose ratio is above "
            "`vllm_importance_sampling_clip_max=3` gets loss 0; otherwise the ratio multiplies its loss, "
            "unclipped.\n"
            f"- Seeds: `seed={s['seed']}` sets the data order and transformers' sampling (`--vllm-mode none`); in colocate "
            "mode vLLM's seed is the process index (divided by `vllm_tensor_parallel_size`). A pretrained model is not "
            "initialised from it.\n\n"
        )
    else:
        body += (
            "Files: `prepare_data.py` (parquet), `reward.py` (`compute_score`), `run.sh` "
            "(`./run.sh [GPUS] [key=value ...]`: `python -m verl.trainer.main_ppo` with its overrides).\n\n"
            "Checkpoints: every `trainer.save_freq` rollouts and at the last, the last `trainer.max_actor_ckpt_to_keep` kept, "
            "`trainer.resume_mode=auto` resumes from `trainer.default_local_dir`. Validation: every "
            "`trainer.test_freq` rollouts, at the last, and once before training (`trainer.val_before_train`, true by default), "
            "on the whole test parquet, sampled (`val_kwargs.do_sample=true`, `val_kwargs.n`). Tracking: `trainer.logger=[console,tensorboard]` "
            "(TensorBoard files under `tensorboard_log/`), `trainer.log_val_generations` validation completions to "
            "TensorBoard, every training completion as JSON lines under `trainer.rollout_data_dir`.\n\n"
            "Overriding on the command line: `actor_rollout_ref.actor.loss_scale_factor` and "
            "`+reward.reward_kwargs.max_resp_len` (where set) follow `data.max_response_length` (Hydra "
            "interpolations), the overlong buffer's `len` does not; `actor_rollout_ref.actor.ppo_mini_batch_size` "
            "does not follow `data.train_batch_size`, so changing the batch changes the updates per rollout "
            "(train_batch_size / ppo_mini_batch_size): override both together.\n\n"
        )
        if a.dynamic_sampling or a.overlong_penalty:
            body += (
                "## Where DAPO's pieces are applied in verl " + VERL_VERSION + "\n\n"
                "- Dynamic sampling: `algorithm.filter_groups.enable=true` is acted on by the V1 trainer "
                "(`trainer.use_v1=true`, the default; its ReplayBuffer drops all-equal groups and refills). The V1 "
                "trainer ignores `max_num_gen_batches`: there is no cap on refills.\n"
                "- Overlong buffer: not a key of verl's trainer config. The reward loop's `dapo` reward manager "
                "(`reward.reward_manager.name=dapo`) reads `reward.reward_kwargs.overlong_buffer_cfg` and "
                "`max_resp_len`, appended with `+`.\n\n"
            )
    return head + body + "## Settings that change with scale\n\n" + scale_table() + "\n"


def _check_out(out: Path) -> None:
    """``out`` must be new, empty, or hold exactly a recipe this command wrote."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"out must be a folder, got the file {out}")
    if not out.is_dir():
        return
    present = sorted(str(p.relative_to(out)) for p in out.rglob("*") if not p.is_dir())
    if not present:
        return
    marker = out / MARKER
    ours = set(json.loads(marker.read_text())["files"]) | {MARKER} if marker.is_file() else set()
    foreign = [p for p in present if p not in ours]
    if foreign:
        raise ValueError(
            f"out must be a new or empty folder or a recipe written by export, got {out} holding {len(foreign)} "
            f"other file(s) (e.g. {foreign[0]}); choose another --out"
        )


def export_recipe(
    algo: str | Algorithm, engine: str, model: str, task: str, out: str | Path, data_dir: str | None = None
) -> list[Path]:
    """Write the recipe for ``algo`` (a preset name or an ``Algorithm``) on ``engine`` into folder ``out``;
    returns the files written. ``data_dir`` (task gsm8k): a folder with GSM8K's train.jsonl and test.jsonl, read
    now and written into the recipe as its absolute path, so its scripts read the same files (default: the hub).
    Raises ``ValueError`` (one line, naming what to use instead) when the engine cannot run the algorithm, the
    data is not GSM8K's format, or ``out`` cannot take the recipe."""
    a = as_algorithm(algo)
    check_choice("engine", engine, ENGINES)
    check_choice("task", task, TASKS)
    check_data_dir(task, data_dir)
    if data_dir is not None:
        for split in ("train", "test"):  # refused here, in one line, rather than on the cluster
            gsm8k_split(data_dir, split)
        data_dir = str(Path(data_dir).expanduser().resolve())
    if not isinstance(model, str) or not model:
        raise ValueError(f"model must be a Hugging Face name or a folder, got {model!r}")
    why = refusal(a, engine)
    if why:
        raise ValueError(f"algo {a.name!r} cannot be exported to {engine}: {why}")
    out = Path(out)
    _check_out(out)
    files = trl_files(a, task, model, data_dir) if engine == "trl" else verl_files(a, task, model, data_dir)
    summary, warnings = effective_algorithm(a, engine)
    files["README.md"] = _readme(a, engine, model, task, summary, warnings, data_dir)
    files[MARKER] = json.dumps({"algo": a.name, "engine": engine, "files": sorted(files)}, indent=1) + "\n"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as err:
        raise ValueError(f"out must be a folder you can write to, got {out} ({err.strerror}); wanted a writable path")
    try:
        for rel, text in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            path.chmod(0o755 if rel.endswith(".sh") else 0o644)
        tmp.chmod(0o755)
        replace_folder(tmp, out)  # empty, or our own earlier recipe (checked above): swapped in one step
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [out / rel for rel in files if rel != MARKER]


__all__ = ["effective_algorithm", "export_recipe", "refusal", "trl_settings", "verl_overrides"]
