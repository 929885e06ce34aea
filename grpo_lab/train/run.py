"""A whole run as the command line makes it: train (or continue a checkpoint), evaluate before and after,
and write the summary, whatever becomes of the save.

Every output path is checked before the model is loaded; the checkpoint folder is locked for the run,
so a second run saving there is refused at once rather than replacing this one's checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, replace
from pathlib import Path

from ..io import check_output_file, folder_lock, save_json, stop_on_signal, take_stop_request
from ..lab.metrics import evaluate
from .checkpoint import SaveFailed, check_checkpoint_target
from .trainer import TrainConfig, Trainer, peak_memory_mb


def train_and_evaluate(
    cfg: TrainConfig,
    n_eval: int = 1000,
    progress: bool = True,
    eval_every: int | None = None,
    save_dir: str | Path | None = None,
    save_every: int | None = None,
    json_path: str | Path | None = None,
) -> dict:
    """Train with ``cfg`` and return the command line's summary: before/after held-out greedy
    accuracy and mean length, wall time, peak memory and the per-step history. With ``save_dir``
    the run is saved there when it stops (at the end, on ``kl_stop``, on Ctrl-C) and every
    ``save_every`` steps, ready for ``Trainer.resume``; the folder must be new, empty or absent (another
    run's checkpoint is refused) and is checked before the first step. With ``json_path`` the summary is
    written there, also when a save fails (then the error is raised after).

    Ctrl-C (SIGINT), SIGTERM or SIGHUP stops the run after the current step, or during the final
    evaluation: ``stop_reason`` is "interrupted" and ``after`` is None."""
    return _evaluated_run(lambda: Trainer(cfg), set(), n_eval, progress, eval_every, save_dir, save_every, json_path)


run = train_and_evaluate
"""The name this function had first."""


def continue_run(
    path: str | Path,
    steps: int | None = None,
    progress: bool = True,
    save_dir: str | Path | None = None,
    save_every: int | None = None,
    json_path: str | Path | None = None,
    device: str | None = None,
    n_eval: int = 1000,
    eval_every: int | None = None,
) -> dict:
    """Resume the checkpoint at ``path`` for ``steps`` more steps (``TrainConfig``'s default when None),
    on ``device`` if given, and return the same summary as ``train_and_evaluate``. ``save_dir`` may be
    ``path`` itself, a new or an empty folder; with neither ``save_dir`` nor ``json_path`` the steps would
    be thrown away, so that is refused before any work."""
    if save_dir is None and json_path is None:
        raise ValueError(
            f"--resume {path} without --save or --json would train and keep nothing; add --save {path} to "
            "continue the checkpoint (or --json FILE for the summary alone)"
        )

    def resumed() -> Trainer:
        trainer = Trainer.resume(path, device=device)
        trainer.cfg = replace(trainer.cfg, steps=TrainConfig.steps if steps is None else steps)
        return trainer

    own = {str(Path(path).resolve())}
    return _evaluated_run(resumed, own, n_eval, progress, eval_every, save_dir, save_every, json_path)


def _evaluated_run(
    make: Callable[[], Trainer], own: set[str], n_eval, progress, eval_every, save_dir, save_every, json_path
) -> dict:
    """Check the outputs, make the trainer, evaluate, train, evaluate again, and write the summary."""
    with ExitStack() as stack:
        _check_outputs(stack, save_dir, json_path, own=own)
        with stop_on_signal():
            trainer = make()
            cfg = trainer.cfg
            ev = dict(n_prompts=n_eval, greedy=True, max_new_tokens=cfg.max_new_tokens, system=cfg.system_prompt)
            before = evaluate(trainer.model, trainer.tokenizer, trainer.task, **ev)
            evals: list[dict] = []
            t0 = time.perf_counter()
            failed = _train(trainer, cfg, ev, evals, eval_every, progress, save_dir, save_every)
            wall = time.perf_counter() - t0
            after = None if failed else _final_evaluation(trainer, ev)
        summary = {
            "algo": cfg.algo,
            "steps": trainer.step,
            "seed": cfg.seed,
            "wall_seconds": round(wall, 2),
            "train_seconds": round(trainer.history[-1]["wall_seconds"], 2) if trainer.history else 0.0,
            "before": {"accuracy": before["accuracy"], "mean_length": before["length_mean"], "n": before["n_prompts"]},
            "after": after,
            "evals": evals,
            "peak_memory_mb": None if (peak := peak_memory_mb(trainer.device)) is None else round(peak, 1),
            "skipped_updates": trainer.skipped_steps,
            "stop_reason": _stop_reason(trainer, failed),
            "config": asdict(cfg),
            "algorithm": asdict(trainer.algo),
            "history": trainer.history,
        }
        return _finish(summary, json_path, failed)


def _check_outputs(stack: ExitStack, save_dir, json_path, own: set[str]) -> None:
    """Check the output paths before any work and hold the checkpoint folder's lock for the run."""
    if json_path is not None:
        check_output_file(json_path, "--json")
    if save_dir is not None:
        check_checkpoint_target(save_dir, "--save", own=own, json_path=json_path)
        stack.enter_context(folder_lock(save_dir, "--save"))


def _train(trainer, cfg, ev, evals, eval_every, progress, save_dir, save_every) -> SaveFailed | None:
    """Train ``cfg.steps`` steps, evaluating every ``eval_every``; a failed save stops the run and is returned."""
    try:
        if not eval_every:
            trainer.train(progress=progress, checkpoint_dir=save_dir, save_every=save_every)
            return None
        done = 0
        while done < cfg.steps and trainer.stop_reason is None:
            n = min(eval_every, cfg.steps - done)
            trainer.train(n, progress=progress, checkpoint_dir=save_dir, save_every=save_every)
            done += n
            if trainer.stop_reason == "interrupted":
                break
            e = evaluate(trainer.model, trainer.tokenizer, trainer.task, **ev)
            evals.append(
                {
                    "step": trainer.step,
                    "wall_seconds": trainer.history[-1]["wall_seconds"],
                    "accuracy": e["accuracy"],
                    "mean_length": e["length_mean"],
                }
            )
    except SaveFailed as err:
        return err
    return None


def _final_evaluation(trainer, ev) -> dict | None:
    """The after-training evaluation, unless a stop was asked for: before it, or during it (at once)."""
    if trainer.stop_reason == "interrupted":
        return None
    if take_stop_request():
        trainer.stop_reason = "interrupted"
        return None
    try:
        with stop_on_signal(at_once=True):
            a = evaluate(trainer.model, trainer.tokenizer, trainer.task, **ev)
    except KeyboardInterrupt:
        trainer.stop_reason = "interrupted"
        return None
    return {"accuracy": a["accuracy"], "mean_length": a["length_mean"], "n": a["n_prompts"]}


def _stop_reason(trainer, failed: SaveFailed | None) -> str | None:
    return f"the save failed: {failed}" if failed is not None else trainer.stop_reason


def _finish(summary: dict, json_path, failed: SaveFailed | None) -> dict:
    """Write the summary where asked, then raise the save's failure if there was one."""
    if json_path is not None:
        save_json(summary, json_path)
    if failed is not None:
        raise failed
    return summary
