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
more runs (the reference, a timing run and the two counting runs). The kill and interrupt cases
and the damaged checkpoints ran in 24 s (pytest's own count; 32 s with the interpreter's start) on
the lab's 2-core CPU, measured once while the machine was otherwise idle.

Also here: checkpoints damaged, mixed or unsafe (a pickle payload) in each way a resume must refuse
with one line; and the save target, checked before any work (a link, a folder that cannot be
written, files that are not the checkpoint's, another run's checkpoint, a second writer, --json
inside it), a save that fails on a full disk (the last checkpoint kept, the summary written), and
the signals that stop a run (SIGTERM in the final evaluation, SIGHUP).
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

import grpo_lab.io as io_mod
from grpo_lab.cli.main import main
from grpo_lab.lab.tasks import get_task
from grpo_lab.train.checkpoint import policy_digest
from grpo_lab.train.trainer import TrainConfig, Trainer

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
        os.fsync = point(os.fsync, "fsync")
        os.rename = point(os.rename, "rename")
        os.replace = point(os.replace, "replace")
        shutil.rmtree = point(shutil.rmtree, "rmtree")
        torch.save = point(torch.save, "torch.save")
        exchange = io_mod.exchange
        io_mod.exchange = point(exchange if swap else (lambda a, b: False), "exchange")

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
    assert main(["train", "--resume", str(bad), "--steps", "1", "--quiet", "--save", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trainer_state.pt cannot be read" in err[0] and str(bad) in err[0], err


def test_a_tokenizer_other_than_the_saved_one_is_refused(two_checkpoints, tmp_path):
    from grpo_lab.lab.models import build_char_tokenizer, load_policy

    ckpts, task = two_checkpoints

    def reorder(folder: Path):  # the same characters in another order: same size, other ids
        _, tok = load_policy(str(folder / "policy"), "cpu")
        vocab = tok.get_vocab()
        chars = "".join(sorted((k for k in vocab if len(k) == 1), key=lambda c: vocab[c]))
        build_char_tokenizer(chars[::-1]).save_pretrained(folder / "policy")

    with pytest.raises(ValueError, match="the tokenizer in policy/ does not match") as info:
        Trainer.resume(damaged_copy(ckpts["grpo"], tmp_path / "tok", reorder), task=task)
    assert "\n" not in str(info.value)


class _Payload:
    """Unpickling this runs a command that writes a file: what a malicious checkpoint would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"echo ran > {self.marker}",))


def test_a_checkpoint_carrying_a_pickle_payload_is_refused_and_runs_nothing(two_checkpoints, tmp_path, capsys):
    ckpts, task = two_checkpoints
    marker = tmp_path / "PWNED.txt"
    # the payload really runs when unpickled the unsafe way (else this test would prove nothing)
    torch.save({"x": _Payload(marker)}, tmp_path / "probe.pt")
    torch.load(tmp_path / "probe.pt", weights_only=False)
    assert marker.exists()
    marker.unlink()

    def plant(folder: Path):
        state = torch.load(folder / "trainer_state.pt", weights_only=True)
        state["history"].append(_Payload(marker))
        torch.save(state, folder / "trainer_state.pt")

    evil = damaged_copy(ckpts["grpo"], tmp_path / "evil", plant)
    with pytest.raises(ValueError, match="objects other than plain data") as info:
        Trainer.resume(evil, task=task)
    assert "\n" not in str(info.value) and "weights_only" not in str(info.value)
    assert main(["train", "--resume", str(evil), "--steps", "1", "--quiet", "--save", str(evil)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "plain data" in err[0], err
    assert not marker.exists()


def test_a_trainer_state_missing_an_entry_is_refused_naming_the_file_and_the_entry(two_checkpoints, tmp_path):
    ckpts, task = two_checkpoints

    def drop(folder: Path):
        state = torch.load(folder / "trainer_state.pt", weights_only=True)
        del state["sample_gen"]
        torch.save(state, folder / "trainer_state.pt")

    with pytest.raises(ValueError, match=r"trainer_state.pt has no entry 'sample_gen'") as info:
        Trainer.resume(damaged_copy(ckpts["grpo"], tmp_path / "nokey", drop), task=task)
    assert "\n" not in str(info.value)


def test_a_checkpoint_saved_on_a_gpu_continues_on_the_device_asked_for(two_checkpoints, tmp_path, capsys):
    ckpts, task = two_checkpoints

    def on_cuda(folder: Path):  # what a run started with --device cuda saves
        state = torch.load(folder / "trainer_state.pt", weights_only=True)
        state["config"]["device"] = "cuda"
        torch.save(state, folder / "trainer_state.pt")

    gpu = damaged_copy(ckpts["grpo"], tmp_path / "gpu", on_cuda)
    t = Trainer.resume(gpu, task=task, device="cpu")
    assert t.device.type == "cpu" and t.cfg.device == "cpu" and t.step == 1
    argv = ["train", "--resume", str(gpu), "--steps", "1", "--quiet", "--save", str(gpu), "--device", "cpu"]
    assert main(argv) == 0, capsys.readouterr().err
    assert Trainer.resume(gpu, task=task).step == 2


# --------------------------------------------------------------------------------------------
# The save target, checked before any work: links, permissions, other files, other runs, other writers
# --------------------------------------------------------------------------------------------

TINY = ["train", "--algo", "grpo", "--steps", "1", "--prompts", "2", "--group-size", "2", "--max-new-tokens", "8",
        "--n-eval", "2", "--quiet"]  # fmt: skip


@pytest.fixture
def no_run(monkeypatch):
    """Fails the test if a trainer is built: the refusal under test must come before any work."""

    def refuse(*args, **kwargs):
        raise AssertionError("a run started before the bad save target was refused")

    monkeypatch.setattr(Trainer, "__init__", refuse)


def one_line(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for n in needles:
        assert n in err[0], (n, err[0])
    return err[0]


def test_files_kept_in_a_checkpoint_folder_are_never_deleted(two_checkpoints, tmp_path, capsys):
    ckpts, task = two_checkpoints
    t = Trainer.resume(damaged_copy(ckpts["grpo"], tmp_path / "ck", lambda f: None), task=task)
    (tmp_path / "ck" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"not part of a checkpoint \(notes.txt\)"):
        t.save(tmp_path / "ck")
    ck = str(tmp_path / "ck")
    assert main(["train", "--resume", ck, "--steps", "1", "--quiet", "--save", ck]) == 2
    one_line(capsys, "notes.txt", "move them out")
    assert (tmp_path / "ck" / "notes.txt").read_text() == "mine"


def test_a_save_through_a_symbolic_link_replaces_the_folder_it_points_to(two_checkpoints, tmp_path):
    ckpts, task = two_checkpoints
    real = damaged_copy(ckpts["grpo"], tmp_path / "run3", lambda f: None)
    link = tmp_path / "latest"
    link.symlink_to(real, target_is_directory=True)
    t = Trainer.resume(link, task=task)
    t.train(1, progress=False)
    t.save(link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert Trainer.resume(real, task=task).step == 2
    assert main(["train", "--resume", str(link), "--steps", "1", "--quiet", "--save", str(link)]) == 0
    assert link.is_symlink() and Trainer.resume(real, task=task).step == 3


def test_saving_a_new_run_over_another_runs_checkpoint_is_refused(two_checkpoints, tmp_path, capsys, no_run):
    ckpts, task = two_checkpoints
    other = damaged_copy(ckpts["ppo"], tmp_path / "other", lambda f: None)
    assert main(TINY + ["--save", str(other)]) == 2
    one_line(capsys, "--save", "holds the checkpoint of another run")
    assert main(["train", "--resume", str(ckpts["grpo"]), "--steps", "1", "--quiet", "--save", str(other)]) == 2
    one_line(capsys, "another run")


def test_a_new_trainer_does_not_save_over_another_trainers_checkpoint(two_checkpoints, tmp_path, tiny_policy):
    import copy

    ckpts, task = two_checkpoints
    other = damaged_copy(ckpts["ppo"], tmp_path / "other", lambda f: None)
    model, tok = tiny_policy
    t = Trainer(TrainConfig(prompts_per_step=2, group_size=2, max_new_tokens=8), model=copy.deepcopy(model),
                tokenizer=tok, task=task)  # fmt: skip
    with pytest.raises(ValueError, match="another run"):
        t.save(other)
    t.save(tmp_path / "mine")
    t.save(tmp_path / "mine")  # its own checkpoint: replaced
    assert Trainer.resume(other, task=task).cfg.algo == "ppo"


def test_a_checkpoint_folder_that_cannot_be_written_is_refused_before_any_work(
    two_checkpoints, tmp_path, capsys, monkeypatch, no_run
):
    ckpts, _ = two_checkpoints
    frozen = damaged_copy(ckpts["grpo"], tmp_path / "frozen", lambda f: None)
    real_open = open

    def open_(file, *args, **kwargs):  # what chmod 555 (for a user) or chattr +i (for anyone) does
        if Path(file).parent == frozen:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(io_mod, "open", open_, raising=False)
    argv = ["train", "--resume", str(frozen), "--steps", "1", "--quiet", "--save", str(frozen)]
    assert main(argv + ["--json", str(tmp_path / "r.json")]) == 2
    one_line(capsys, "--save", "cannot be written: Permission denied", "frozen")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_a_read_only_checkpoint_folder_is_refused_for_an_ordinary_user(two_checkpoints, tmp_path):
    import subprocess

    ckpts, _ = two_checkpoints
    ro = damaged_copy(ckpts["grpo"], tmp_path / "ro", lambda f: None)
    ro.chmod(0o555)
    drop = "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"
    code = "import os, sys; from grpo_lab.train.checkpoint import check_checkpoint_target as c; c(sys.argv[1])"
    try:
        out = subprocess.run(["setpriv", *drop, sys.executable, "-c", code, str(ro)], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})  # fmt: skip
    finally:
        ro.chmod(0o755)
    assert "cannot be written: Permission denied" in out.stderr, out.stderr


def test_a_second_writer_on_one_save_folder_is_refused_with_one_line(tmp_path, capsys, no_run):
    import fcntl

    ckpt = tmp_path / "ckpt"
    held = tmp_path / ".ckpt.lock"  # another run holds the folder's lock (a separate open file: as another process)
    fd = os.open(held, os.O_RDWR | os.O_CREAT)
    os.write(fd, b"4242\n")
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        assert main(TINY + ["--save", str(ckpt)]) == 2
        one_line(capsys, "--save", "being written by another run (process 4242)")
    finally:
        os.close(fd)
    assert not ckpt.exists()


@pytest.mark.parametrize("inside", ["", "trainer_state.pt", "policy/x.json"], ids=["same", "state", "deeper"])
def test_a_json_summary_inside_the_save_folder_is_refused_before_any_work(tmp_path, capsys, no_run, inside):
    ckpt = tmp_path / "ck"
    assert main(TINY + ["--save", str(ckpt), "--json", str(ckpt / inside) if inside else str(ckpt)]) == 2
    one_line(capsys, "--json", "inside the checkpoint folder --save")


def test_resume_without_save_or_json_is_refused_rather_than_thrown_away(two_checkpoints, capsys, no_run):
    ckpts, _ = two_checkpoints
    assert main(["train", "--resume", str(ckpts["grpo"]), "--steps", "2", "--quiet"]) == 2
    one_line(capsys, "keep nothing", f"--save {ckpts['grpo']}")


TORCH_SAVE_TOO_BIG = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 8187136")


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), TORCH_SAVE_TOO_BIG],
                         ids=["disk-full", "file-size-limit"])  # fmt: skip
def test_a_save_that_cannot_be_written_keeps_the_last_checkpoint_and_writes_the_summary(
    tmp_path, capsys, monkeypatch, failure
):
    real_save, calls = torch.save, []

    def save(obj, f, *args, **kwargs):
        calls.append(f)
        if len(calls) == 2:  # the second save's trainer state
            raise failure
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    ckpt, out = tmp_path / "ck", tmp_path / "run.json"
    argv = TINY[:4] + ["3"] + TINY[5:] + ["--save", str(ckpt), "--save-every", "1", "--json", str(out)]
    assert main(argv) == 1
    line = one_line(capsys, "trainer_state.pt", "failed", str(failure).split(":")[0][:20], "previous checkpoint")
    assert "Traceback" not in line
    if failure is TORCH_SAVE_TOO_BIG:  # torch's own words do not say what went wrong: the line does
        assert "the disk is full or a file size limit (ulimit -f) was reached" in line
    summary = json.loads(out.read_text())
    assert summary["steps"] == 2 and summary["stop_reason"].startswith("the save failed") and summary["after"] is None
    monkeypatch.setattr(torch, "save", real_save)
    assert Trainer.resume(ckpt).step == 1
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


def test_a_json_path_on_a_full_disk_is_refused_before_any_work(tmp_path, capsys, monkeypatch, no_run):
    real_fsync = os.fsync

    def fsync(fd):  # an empty file fits on a full disk; a block of data does not
        if os.fstat(fd).st_size > 0:
            raise OSError(28, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(io_mod.os, "fsync", fsync)
    assert main(TINY + ["--json", str(tmp_path / "r.json")]) == 2
    one_line(capsys, "--json", "No space left on device")


def test_sigterm_during_the_final_evaluation_stops_the_run(tmp_path, capsys, monkeypatch):
    import grpo_lab.train.run as run_mod

    real_evaluate, calls = run_mod.evaluate, []

    def evaluate(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the final evaluation: a scheduler's SIGTERM arrives in the middle of it
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            raise AssertionError("the final evaluation went on after SIGTERM")
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(run_mod, "evaluate", evaluate)
    out = tmp_path / "run.json"
    assert main(TINY + ["--json", str(out), "--save", str(tmp_path / "ck")]) == 130
    one_line(capsys, "interrupted", "stopped after step 1")
    summary = json.loads(out.read_text())
    assert summary["stop_reason"] == "interrupted" and summary["after"] is None and summary["steps"] == 1
    assert Trainer.resume(tmp_path / "ck").step == 1


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this system")
def test_sighup_stops_training_after_the_current_step_like_sigint(two_checkpoints, tmp_path):
    ckpts, task = two_checkpoints
    t = Trainer.resume(ckpts["grpo"], task=task)

    def hang_up(m):
        if m["step"] == 2:
            os.kill(os.getpid(), signal.SIGHUP)

    t.train(3, progress=False, callback=hang_up, checkpoint_dir=tmp_path / "ck")
    assert t.step == 2 and t.stop_reason == "interrupted"
    assert Trainer.resume(tmp_path / "ck", task=task).step == 2


def test_removing_a_killed_saves_temporary_never_signals_a_process(two_checkpoints, tmp_path, monkeypatch):
    """On Windows ``os.kill(pid, 0)`` terminates ``pid``: no save may call it to ask whether a process lives."""
    import subprocess

    ckpts, task = two_checkpoints
    t = Trainer.resume(ckpts["grpo"], task=task)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f".ck.tmp-{victim.pid}-deadbeef"  # a save killed mid-write, its pid now reused
        (stale / "policy").mkdir(parents=True)
        kills, real_kill = [], os.kill

        def windows_kill(pid, sig):  # Windows: any signal but CTRL_C/CTRL_BREAK is TerminateProcess
            kills.append((pid, sig))
            real_kill(pid, signal.SIGKILL)

        monkeypatch.setattr(os, "kill", windows_kill)
        try:
            t.save(tmp_path / "ck")
        finally:
            monkeypatch.undo()
        time.sleep(0.2)
        assert kills == [] and victim.poll() is None and not stale.exists()
    finally:
        victim.kill()
        victim.wait()
