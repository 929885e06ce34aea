"""Checkpoints: save a trainer whole, resume it exactly, refuse anything else with one line.

A checkpoint is a folder holding ``policy/`` (the weights and the tokenizer, loadable with
``from_pretrained``) and ``trainer_state.pt`` (everything else, as plain data: numbers, strings, lists,
dicts and tensors, loaded with ``weights_only=True`` so that a checkpoint never runs code). A save writes
a fresh hidden folder beside the target, flushes it to the disk and swaps it in with one rename, under a
lock file only one writer can hold: at every instant the target holds the previous checkpoint or the new
one, whole, whenever the process is killed.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import secrets
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ..io import (
    check_not_locked,
    check_writable_folder,
    first_line,
    folder_lock,
    fsync_tree,
    is_inside,
    recover_folder,
    replace_folder,
)
from ..lab.models import check_model_folder, load_policy

CHECKPOINT_FORMAT = 3
"""Version of ``trainer_state.pt``: 2 added the algorithm and the policy digest; 3 the tokenizer digest and
plain data only (the RNG states as lists), loaded without unpickling objects."""

STATE = "trainer_state.pt"
ENTRIES = {"policy", STATE}
"""What a checkpoint folder holds; anything else in it is someone's file, which a save would delete."""


class SaveFailed(OSError):
    """A save could not be written (a full disk, a file size limit, a folder gone); the previous
    checkpoint is whole. An ``OSError``, so the command line reports it in one line."""


# --- digests ------------------------------------------------------------------------------------------


def policy_digest(model: torch.nn.Module) -> str:
    """SHA-256 of the model's weights (names, dtypes, shapes and bytes): what ``resume`` checks the
    policy folder against."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def tokenizer_digest(tokenizer: Any) -> str:
    """SHA-256 of what maps text to token ids: the tokenizer's whole definition (vocabulary, merges,
    normaliser) where it is a fast one, else its vocabulary, plus its special tokens and chat template."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    body = json.loads(backend.to_str()) if backend is not None else sorted(tokenizer.get_vocab().items())
    parts = [body, sorted(tokenizer.special_tokens_map.items()), getattr(tokenizer, "chat_template", None)]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


# --- the target, checked before any work ---------------------------------------------------------------


def check_checkpoint_target(
    path: str | Path, what: str = "--save", own: set[str] | None = None, json_path: str | Path | None = None
) -> None:
    """Refuse, before any training, a checkpoint folder that cannot be written or must not be replaced:
    a file; a folder holding something else than a checkpoint, or a checkpoint plus other files; a folder
    another process is writing; one that cannot be written itself (read-only, immutable) or whose parent
    cannot. A symbolic link is followed to its folder. With ``own`` (the real paths of this run's own
    checkpoints), a checkpoint of another run there is refused too; with ``json_path``, a summary file
    that would land inside the checkpoint."""
    path = Path(path)
    real = Path(os.path.realpath(path))
    if json_path is not None and is_inside(json_path, real):
        raise ValueError(
            f"--json {json_path} lies inside the checkpoint folder {what} {path}, which each save replaces "
            "whole; give a file outside it"
        )
    if real.exists() and not real.is_dir():
        raise ValueError(f"{what} {path} is a file; give a folder for the checkpoint")
    if real.is_dir():
        names = sorted(p.name for p in real.iterdir())
        if names and STATE not in names:
            raise ValueError(
                f"{what} {path} is a folder with other files in it (no {STATE}), which saving "
                "would replace; give a new or empty folder"
            )
        foreign = [n for n in names if n not in ENTRIES and not n.startswith(".write-test-")]
        if foreign:
            raise ValueError(
                f"{what} {path} holds files that are not part of a checkpoint ({', '.join(foreign[:3])}), which "
                "saving would delete with the old checkpoint; move them out, or give another folder"
            )
        if names and own is not None and str(real) not in own:
            raise ValueError(
                f"{what} {path} holds the checkpoint of another run, which saving would replace; give another "
                "folder, delete that one, or continue it with --resume (Trainer.resume)"
            )
        check_writable_folder(real, what, path)  # the folder itself: read-only, immutable, full
    check_writable_folder(real.parent, what, path)
    check_not_locked(path, what)


# --- save -----------------------------------------------------------------------------------------------


def save_checkpoint(trainer: Any, path: str | Path) -> Path:
    """Save ``trainer`` (a ``Trainer``, typed loosely since trainer.py imports this module) to the folder
    ``path`` (see the module's docstring); returns ``path``."""
    path = Path(path)
    real = Path(os.path.realpath(path))
    own = trainer.__dict__.setdefault("_own_checkpoints", set())
    broken = [n for n, p in trainer.model.named_parameters() if not bool(torch.isfinite(p).all())]
    if broken:  # keep the last good checkpoint rather than replace it with a wrecked policy
        raise ValueError(
            f"the policy's weights hold NaN or infinity ({broken[0]}), so they were not saved over {path}: "
            "most often a learning rate (lr) far too large"
        )
    real.parent.mkdir(parents=True, exist_ok=True)
    with folder_lock(real, "path"):
        recover_folder(real, STATE)
        check_checkpoint_target(path, "path", own=own)
        _remove_temporaries(real)  # any writer to this folder holds the lock: theirs are leftovers of a kill
        tmp = real.parent / f".{real.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.mkdir()
        try:
            _write(path, "policy/ (the weights)", lambda: trainer.model.save_pretrained(tmp / "policy"))
            _write(path, "policy/ (the tokenizer)", lambda: trainer.tokenizer.save_pretrained(tmp / "policy"))
            _write(path, STATE, lambda: torch.save(_state(trainer), tmp / STATE))
            _write(path, "the folder", lambda: (fsync_tree(tmp), replace_folder(tmp, real)))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    own.add(str(real))
    return path


def _write(path: Path, what: str, fn) -> None:
    try:
        fn()
    except Exception as err:  # OSError, SafetensorError, torch.save's RuntimeError on a full disk or size limit
        # torch.save's error ("unexpected pos ...") does not say why; an OSError's and a full disk's do
        unclear = not isinstance(err, OSError) and "No space left" not in str(err)
        why = "; most often the disk is full or a file size limit (ulimit -f) was reached" if unclear else ""
        raise SaveFailed(
            f"checkpoint {path}: writing {what} failed ({first_line(err)}){why}; the previous checkpoint, if any, "
            "is whole"
        ) from None


def _state(t) -> dict:
    version, internal, gauss = t.prompt_rng.getstate()
    return {
        "format": CHECKPOINT_FORMAT,
        "config": asdict(t.cfg),
        "algorithm": asdict(t.algo),
        "policy_digest": policy_digest(t.model),
        "tokenizer_digest": tokenizer_digest(t.tokenizer),
        "step": t.step,
        "history": t.history,
        "skipped_steps": t.skipped_steps,
        "samples_generated": t.samples_generated,
        "seen_difficulty": t.seen_difficulty,
        "opt": t.opt.state_dict(),
        "prompt_rng": [version, list(internal), gauss],
        "sample_gen": t.sample_gen.get_state(),
        "ref": t.ref.state_dict() if t.ref is not None else None,
        "critic": t.critic.state_dict() if t.critic is not None else None,
        "critic_opt": t.critic_opt.state_dict() if t.critic_opt is not None else None,
        "stop_reason": t.stop_reason,
    }


def _remove_temporaries(real: Path) -> None:
    """Delete the temporary folders of earlier saves to ``real`` (killed mid-save). Called with its lock
    held, so no live process is writing them: no process is asked whether it is alive (on Windows that
    would kill it)."""
    for tmp in real.parent.glob(f".{real.name}.tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True)


# --- resume ---------------------------------------------------------------------------------------------


def load_checkpoint(
    trainer_cls: type, config_cls: type, path: str | Path, task: Any = None, device: str | None = None
) -> Any:
    """A ``trainer_cls`` that continues the run saved at ``path`` as if it had never stopped; ``device``
    replaces the saved one (a run saved on a GPU continues on a CPU). A checkpoint that is damaged, mixed
    from two saves, holds more than plain data or was made with an algorithm that now means something
    else is refused with a ``ValueError`` of one line, before it runs anything."""
    path = Path(path)
    recover_folder(Path(os.path.realpath(path)), STATE)
    if not (path / STATE).exists():
        raise ValueError(f"path must be a folder written by Trainer.save, got {path} (no {STATE})")
    try:
        state = torch.load(path / STATE, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:  # objects that are not plain data, or a damaged file
        raise ValueError(
            f"checkpoint {path}: {STATE} cannot be read ({_unpickling_reason(err)}); it is damaged or holds "
            "objects other than plain data, which are never loaded since they could run code; resume from "
            "another checkpoint"
        ) from None
    except Exception as err:  # truncated, not a torch file, written by another program
        raise ValueError(
            f"checkpoint {path}: {STATE} cannot be read ({first_line(err)}); it is damaged, "
            "resume from another checkpoint"
        ) from None
    if not isinstance(state, dict) or "config" not in state:
        raise ValueError(f"checkpoint {path}: {STATE} is not a trainer state written by Trainer.save")
    if state.get("format") != CHECKPOINT_FORMAT or not state.get("policy_digest"):
        raise ValueError(
            f"checkpoint {path} was written by an older grpo_lab, without the digests of its policy "
            "and tokenizer, so it cannot be checked; start a new run"
        )
    try:
        return _restore(trainer_cls, config_cls, path, state, task, device)
    except KeyError as err:
        raise ValueError(
            f"checkpoint {path}: {STATE} has no entry {err}; it is damaged, resume from another checkpoint"
        ) from None
    except (TypeError, RuntimeError, IndexError) as err:  # an entry of the wrong type or shape
        raise ValueError(
            f"checkpoint {path}: {STATE} does not fit this run ({first_line(err)}); it is damaged, "
            "resume from another checkpoint"
        ) from None


def _restore(trainer_cls, config_cls, path: Path, state: dict, task, device: str | None):
    try:
        cfg = config_cls(**{**state["config"], **({"device": device} if device is not None else {})})
    except TypeError as err:
        raise ValueError(f"checkpoint {path}: its config does not fit this grpo_lab ({err})") from None
    now = asdict(cfg.algorithm())
    if now != state["algorithm"]:
        diff = {k: (state["algorithm"].get(k), now.get(k)) for k in now if state["algorithm"].get(k) != now.get(k)}
        raise ValueError(
            f"checkpoint {path}: algorithm {cfg.algo!r} now differs from the one it was saved with "
            f"(field: (saved, now) {diff}), so it cannot continue exactly; start a new run"
        )
    try:
        check_model_folder(path / "policy")  # a folder, never a hub name, whatever its path looks like
        model, tokenizer = load_policy(str((path / "policy").resolve()), cfg.device)
    except ValueError as err:
        raise ValueError(f"checkpoint {path}: {err}") from None
    mixed = f"(step {state['step']}, algo {cfg.algo}): the folder mixes files from two saves; resume from a " \
        "checkpoint written whole by Trainer.save"  # fmt: skip
    if policy_digest(model) != state["policy_digest"]:
        raise ValueError(f"checkpoint {path}: the policy weights in policy/ do not match its trainer state {mixed}")
    if tokenizer_digest(tokenizer) != state["tokenizer_digest"]:
        raise ValueError(f"checkpoint {path}: the tokenizer in policy/ does not match its trainer state {mixed}")
    t = trainer_cls(cfg, model=model, tokenizer=tokenizer, task=task)
    if state["ref"] is not None:
        t.ref.load_state_dict(state["ref"])
    t.opt.load_state_dict(state["opt"])
    if state["critic"] is not None:
        t.critic.load_state_dict(state["critic"])
        t.critic_opt.load_state_dict(state["critic_opt"])
    t.step, t.history = state["step"], state["history"]
    t.skipped_steps, t.samples_generated = state["skipped_steps"], state["samples_generated"]
    t.seen_difficulty, t.stop_reason = state["seen_difficulty"], state["stop_reason"]
    version, internal, gauss = state["prompt_rng"]
    t.prompt_rng.setstate((version, tuple(internal), gauss))
    t.sample_gen.set_state(state["sample_gen"])
    t._own_checkpoints = {os.path.realpath(path)}
    return t


def _unpickling_reason(err: BaseException) -> str:
    """The line of torch's refusal that names what was refused (its first line advises unsafe loading)."""
    for line in str(err).splitlines():
        if "GLOBAL" in line or "Unsupported" in line:
            return line.strip()[:300]
    return first_line(err)
