"""Fault injection: a real tiny training run (``python -m grpo_lab train``, 2 prompts x 2
completions, 8 new tokens, 3 steps, ``--save`` after every step) is killed or interrupted, and
after each fault the checkpoint left on disk must load and resume to exactly the metrics and
weights of the same run left alone.

Kill points, 34 in all, each followed by a resume checked against the run left alone:

- SIGKILL before each file-system operation of a save that replaces a checkpoint (every fsync,
  rename, folder swap, deletion, and the write of the trainer state), and once after the last: 14
  points with Linux's atomic folder swap (the tiny model's checkpoint has 6 files in 2 folders),
  enumerated, so every instant of a save is covered whatever the timing;
- the same where the swap is unavailable (macOS, Windows: the old checkpoint is renamed aside,
  then the new one into place): the last 6 points, around the two renames and between them;
- SIGKILL at 6 random instants of the run (start-up, evaluation, steps, saves);
- SIGINT at 5 random instants: the run must stop after its current step with exit status 130, a
  checkpoint at that step and a JSON summary saying ``"stop_reason": "interrupted"``;
- SIGINT twice in quick succession at 3 random instants: the run stops at once (status 130), even
  mid-save, and the checkpoint on disk is still whole.

Random instants come from a seeded generator, spread over the time one run takes here. Each
faulted run is a ``fork`` of the test process (imports and the model already warm), so a kill
point costs a fraction of a second of training, the resume, and at most 3 steps; there are 4
more runs (the reference, a timing run and the two counting runs). The whole file, damaged
checkpoints included, ran in 24 s (pytest's own count; 32 s with the interpreter's start) on the
lab's 2-core CPU, measured once while the machine was otherwise idle.

Also here: checkpoints damaged or mixed in each way a resume must refuse with one line.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path

import pytest
import torch

import grpo_lab.train.trainer as trainer_mod
from grpo_lab.cli.main import main
from grpo_lab.lab.tasks import get_task
from grpo_lab.train.trainer import TrainConfig, Trainer, policy_digest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the fault suite forks the test process")

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # no tokenizer threads across fork

STEPS = 3
TIMING_KEYS = {"wall_seconds", "step_seconds", "rollout_seconds", "tokens_per_second"}
N_RANDOM_KILLS, N_RANDOM_INTS, N_DOUBLE_INTS = 6, 5, 3


def argv(folder: Path) -> list[str]:
    return ["train", "--algo", "grpo", "--steps", str(STEPS), "--prompts", "2", "--group-size", "2",
            "--max-new-tokens", "8", "--n-eval", "2", "--lr", "1e-3", "--seed", "3", "--quiet",
            "--save", str(folder / "ckpt"), "--save-every", "1", "--json", str(folder / "run.json")]  # fmt: skip


def fork_run(folder: Path, before_main=None) -> int:
    """Start the run in a forked child; returns its pid. ``before_main()`` runs in the child first."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if before_main is not None:
                before_main()
            code = main(argv(folder))
        except KeyboardInterrupt:
            code = 130
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def wait(pid: int, timeout: float = 120.0) -> int:
    """The child's exit status (-N when killed by signal N)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"the run did not end within {timeout} s")


def history_without_timing(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if k not in TIMING_KEYS} for m in history]


def same(a, b) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The run left alone, in this process (which also warms every import the forks will need)."""
    folder = tmp_path_factory.mktemp("reference")
    assert main(argv(folder)) == 0
    summary = json.loads((folder / "run.json").read_text())
    warm = tmp_path_factory.mktemp("warm")  # how long a forked run takes: the span random faults are drawn from
    t0 = time.monotonic()
    assert wait(fork_run(warm)) == 0
    seconds = time.monotonic() - t0
    task = get_task("sum3", seed=0)
    final = Trainer.resume(folder / "ckpt", task=task)
    assert final.step == STEPS
    return {
        "history": final.history,
        "digest": policy_digest(final.model),
        "seconds": seconds,
        "task": task,
        "summary": summary,
    }


def check_recovers(folder: Path, reference: dict) -> int | None:
    """The checkpoint left in ``folder`` loads and resumes to the reference run; its step (None: no checkpoint yet)."""
    ckpt = folder / "ckpt"
    leftovers = [p.name for p in folder.iterdir() if p.name not in ("ckpt", "run.json") and not p.name.startswith(".")]
    assert not leftovers, leftovers
    if not (ckpt / "trainer_state.pt").exists() and not list(folder.glob(".ckpt.old-*")):
        with pytest.raises(ValueError, match="trainer_state.pt"):
            Trainer.resume(ckpt, task=reference["task"])
        return None
    t = Trainer.resume(ckpt, task=reference["task"])
    step = t.step
    assert 0 <= step <= STEPS
    assert same(history_without_timing(t.history), history_without_timing(reference["history"][:step]))
    t.train(STEPS - step, progress=False)
    assert same(history_without_timing(t.history), history_without_timing(reference["history"]))
    assert policy_digest(t.model) == reference["digest"]
    return step


def save_points(kill_at: int | None, counter_file: Path | None = None, swap: bool = True):
    """A ``before_main`` hook: count the file-system operations of the 2nd save (the first to replace a
    checkpoint), SIGKILL the process just before operation ``kill_at`` (1-based; None: only count)."""

    def install():
        state = {"save": 0, "op": 0, "in_save": False}
        real_save = Trainer.save

        def save(self, path):
            state["save"] += 1
            state["in_save"] = state["save"] == 2
            try:
                return real_save(self, path)
            finally:
                if state["in_save"] and counter_file is not None:
                    counter_file.write_text(str(state["op"]))
                state["in_save"] = False

        def point(fn, name):
            def wrapped(*args, **kwargs):
                if state["in_save"]:
                    state["op"] += 1
                    if state["op"] == kill_at:
                        os.kill(os.getpid(), signal.SIGKILL)
                return fn(*args, **kwargs)

            wrapped.__name__ = name
            return wrapped

        Trainer.save = save
        trainer_mod.os.fsync = point(os.fsync, "fsync")
        trainer_mod.os.rename = point(os.rename, "rename")
        trainer_mod.os.replace = point(os.replace, "replace")
        trainer_mod.shutil.rmtree = point(shutil.rmtree, "rmtree")
        trainer_mod.torch.save = point(torch.save, "torch.save")
        exchange = trainer_mod._exchange
        trainer_mod._exchange = point(exchange if swap else (lambda a, b: False), "exchange")

    return install


def test_the_reference_run_saves_a_checkpoint_at_every_step_and_resumes_exactly(reference):
    assert reference["summary"]["steps"] == STEPS
    assert reference["summary"]["stop_reason"] is None
    assert len(reference["history"]) == STEPS


@pytest.mark.parametrize("swap", [True, False], ids=["atomic-swap", "rename-aside"])
def test_sigkill_before_every_file_operation_of_a_save_leaves_a_whole_checkpoint(reference, tmp_path, swap):
    counter = tmp_path / "count"
    probe = tmp_path / "probe"
    probe.mkdir()
    assert wait(fork_run(probe, save_points(None, counter, swap))) == 0
    n_ops = int(counter.read_text())
    assert n_ops >= (12 if swap else 4)  # 6 files and 2 folders flushed, the state written, the swap, ...
    points = list(range(1, n_ops + 2))  # before each operation, and once after the last
    if not swap:  # around the two renames (the last operations): where the fallback differs
        points = points[-6:]
    steps_left = []
    for k in points:
        folder = tmp_path / f"kill{k}"
        folder.mkdir()
        code = wait(fork_run(folder, save_points(k, None, swap)))
        if k <= n_ops:
            assert code == -signal.SIGKILL, (k, code)
        steps_left.append(check_recovers(folder, reference))
    # Killed inside the 2nd save: the checkpoint is the 1st (step 1) or, once swapped in, the 2nd.
    assert set(steps_left) <= {1, 2, STEPS}, steps_left
    assert steps_left[0] == 1
    print(
        f"{len(points)} SIGKILL points inside a save ({'swap' if swap else 'rename aside'}): "
        f"checkpoint steps {steps_left}"
    )


def test_sigkill_at_random_instants_never_loses_the_last_checkpoint(reference, tmp_path):
    rng = random.Random(0)
    found = []
    for i in range(N_RANDOM_KILLS):
        folder = tmp_path / f"kill{i}"
        folder.mkdir()
        pid = fork_run(folder)
        time.sleep(rng.uniform(0.0, 0.9 * reference["seconds"]))
        os.kill(pid, signal.SIGKILL)
        wait(pid)
        mid_save = bool(list(folder.glob(".ckpt.tmp-*")))
        found.append((check_recovers(folder, reference), "saving" if mid_save else "training"))
    print(f"{N_RANDOM_KILLS} random SIGKILLs (checkpoint step, phase): {found}")


def test_sigint_stops_after_the_current_step_saves_and_writes_the_summary(reference, tmp_path):
    rng = random.Random(1)
    found = []
    for i in range(N_RANDOM_INTS):
        folder = tmp_path / f"int{i}"
        folder.mkdir()
        pid = fork_run(folder)
        time.sleep(rng.uniform(0.0, 0.9 * reference["seconds"]))
        os.kill(pid, signal.SIGINT)
        code = wait(pid)
        assert code in (0, 130), code
        step = check_recovers(folder, reference)
        summary = json.loads((folder / "run.json").read_text()) if (folder / "run.json").exists() else None
        if code == 0 or (summary is not None and summary["stop_reason"] is None):
            # the signal came after training had finished (before the exit, or while the process was closing):
            # the summary is the whole run's, and so is the checkpoint
            assert summary["stop_reason"] is None and summary["after"] is not None and step == STEPS
        elif summary is not None:  # stopped cleanly: the summary and the checkpoint agree
            assert summary["stop_reason"] == "interrupted"
            assert summary["after"] is None
            assert summary["steps"] == step == len(summary["history"])
        found.append((code, step))
    print(f"{N_RANDOM_INTS} random SIGINTs (exit status, checkpoint step): {found}")
    assert any(code == 130 for code, _ in found), "no SIGINT reached a running run: the test checked nothing"


def test_a_second_sigint_stops_at_once_and_the_checkpoint_is_still_whole(reference, tmp_path):
    rng = random.Random(2)
    found = []
    for i in range(N_DOUBLE_INTS):
        folder = tmp_path / f"int2-{i}"
        folder.mkdir()
        pid = fork_run(folder)
        time.sleep(rng.uniform(0.0, 0.9 * reference["seconds"]))
        os.kill(pid, signal.SIGINT)
        time.sleep(rng.uniform(0.0, 0.05))
        try:
            os.kill(pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        code = wait(pid)
        assert code in (0, 130), code
        found.append((code, check_recovers(folder, reference)))
    print(f"{N_DOUBLE_INTS} double SIGINTs (exit status, checkpoint step): {found}")


# --------------------------------------------------------------------------------------------
# Damaged and mixed checkpoints: one line each, never a silent divergence
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory, tiny_policy):
    """A GRPO and a PPO checkpoint of tiny runs (one step each)."""
    import copy

    folder = tmp_path_factory.mktemp("ckpts")
    task = get_task("sum3", seed=0, n_train=64, n_test=8)
    out = {}
    for algo in ("grpo", "ppo"):
        model, tok = tiny_policy
        cfg = TrainConfig(algo=algo, prompts_per_step=2, group_size=2, max_new_tokens=8, lr=1e-3)
        t = Trainer(cfg, model=copy.deepcopy(model), tokenizer=tok, task=task)
        t.train(1, progress=False)
        out[algo] = t.save(folder / algo)
    return out, task


def damaged_copy(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    edit(dst)
    return dst


def _truncate(file: str, keep: float):
    def edit(folder: Path):
        p = folder / file
        data = p.read_bytes()
        p.write_bytes(data[: int(len(data) * keep)])

    return edit


@pytest.mark.parametrize(
    "edit, message",
    [
        (_truncate("trainer_state.pt", 0.02), "trainer_state.pt cannot be read"),
        (_truncate("trainer_state.pt", 0.0), "trainer_state.pt cannot be read"),
        (_truncate("policy/model.safetensors", 0.5), "model.safetensors is truncated"),
        (_truncate("policy/config.json", 0.5), "config.json is not valid JSON"),
        (lambda f: (f / "policy" / "config.json").unlink(), "has no config.json"),
        (lambda f: shutil.rmtree(f / "policy"), "does not exist"),
        (lambda f: (f / "trainer_state.pt").unlink(), "no trainer_state.pt"),
    ],
    ids=[
        "state-truncated",
        "state-empty",
        "weights-truncated",
        "config-truncated",
        "config-missing",
        "policy-missing",
        "state-missing",
    ],
)
def test_a_damaged_checkpoint_is_refused_with_one_line_naming_it(two_checkpoints, tmp_path, edit, message):
    ckpts, task = two_checkpoints
    bad = damaged_copy(ckpts["grpo"], tmp_path / "bad", edit)
    with pytest.raises(ValueError, match=message) as info:
        Trainer.resume(bad, task=task)
    assert "\n" not in str(info.value)


def test_a_grpo_policy_with_a_ppo_trainer_state_is_refused_not_resumed_as_ppo(two_checkpoints, tmp_path):
    ckpts, task = two_checkpoints
    mixed = damaged_copy(
        ckpts["grpo"],
        tmp_path / "mixed",
        lambda f: shutil.copy(ckpts["ppo"] / "trainer_state.pt", f / "trainer_state.pt"),
    )
    with pytest.raises(ValueError, match="do not match its trainer state"):
        Trainer.resume(mixed, task=task)


def test_weights_changed_after_saving_are_refused(two_checkpoints, tmp_path):
    from safetensors.torch import load_file, save_file

    ckpts, task = two_checkpoints

    def nudge(folder: Path):
        f = folder / "policy" / "model.safetensors"
        w = load_file(f)
        name = min(w)
        w[name] = w[name] + 1e-3
        save_file(w, f, metadata={"format": "pt"})

    changed = damaged_copy(ckpts["grpo"], tmp_path / "changed", nudge)
    with pytest.raises(ValueError, match="do not match its trainer state"):
        Trainer.resume(changed, task=task)


def test_a_checkpoint_whose_algorithm_preset_changed_since_is_refused(two_checkpoints, tmp_path):
    ckpts, task = two_checkpoints

    def older_preset(folder: Path):
        state = torch.load(folder / "trainer_state.pt", weights_only=False)
        state["algorithm"]["minibatches"] = 1  # what PPO's preset was before it took 2 x 2 updates
        torch.save(state, folder / "trainer_state.pt")

    old = damaged_copy(ckpts["ppo"], tmp_path / "old", older_preset)
    with pytest.raises(ValueError, match="minibatches"):
        Trainer.resume(old, task=task)


def test_a_checkpoint_without_a_digest_is_refused(two_checkpoints, tmp_path):
    ckpts, task = two_checkpoints

    def strip(folder: Path):
        state = torch.load(folder / "trainer_state.pt", weights_only=False)
        del state["policy_digest"], state["format"]
        torch.save(state, folder / "trainer_state.pt")

    with pytest.raises(ValueError, match="older grpo_lab"):
        Trainer.resume(damaged_copy(ckpts["grpo"], tmp_path / "v1", strip), task=task)


def test_the_command_line_refuses_a_damaged_checkpoint_with_one_line(two_checkpoints, tmp_path, capsys):
    ckpts, _ = two_checkpoints
    bad = damaged_copy(ckpts["grpo"], tmp_path / "bad", _truncate("trainer_state.pt", 0.3))
    assert main(["train", "--resume", str(bad), "--steps", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trainer_state.pt cannot be read" in err[0] and str(bad) in err[0], err
