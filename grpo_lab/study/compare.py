"""Side-by-side runs: several algorithms, several seeds, the same task and budget.

``python -m grpo_lab compare`` runs each (algorithm, seed) in its own process (so its peak
memory is its own), then prints a table with the spread across seeds (``histories.seed_table``).
Accuracy is held-out greedy accuracy, the mean of the last two evaluations of each run, so that one
lucky evaluation does not decide.

The runs are written into a temporary folder beside ``out_dir`` that takes its name only when the
table is written, so ``out_dir`` is never half a comparison. A stop signal (Ctrl-C, SIGTERM, SIGHUP)
is passed on to the running child, which stops after its current step; the runs finished so far are
kept, with their table.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..io import check_output_folder, replace_folder, save_json
from .histories import RUN_METRICS, final_accuracy, format_seed_table, seed_table

# `compare`'s default budget: the same training seconds for every algorithm (the course's race, notebook 08).
DEFAULT_SECONDS = 90.0
SUMMARY = "summary.json"
"""The file that marks a folder as a comparison's (``compare`` may replace such a folder, and no other)."""


class ChildRunFailed(RuntimeError):
    """A run's process exited non-zero; the message is its own last line (its one-line error, or the
    last line of a traceback), and ``returncode`` its exit status (2: bad input, 130: interrupted)."""

    def __init__(self, message: str, returncode: int):
        super().__init__(message)
        self.returncode = returncode


def run_one(
    algo: str,
    seed: int,
    seconds: float | None,
    steps: int,
    eval_every: int,
    n_eval: int,
    out: Path,
    extra: list[str] | None = None,
    quiet: bool = True,
    max_samples: int | None = None,
    pass_k: int | None = None,
) -> dict:
    """One training run in a fresh process; returns its JSON summary.

    ``max_samples`` stops the run once that many completions were sampled (a sample budget).
    ``pass_k`` also measures the trained policy's pass@1..k (``k`` samples per held-out prompt at
    T = 1, in a second process) and stores the curve in the summary under ``"pass_at_k"``.
    """
    out = Path(out)
    train = {"--algo": algo, "--seed": seed, "--steps": steps, "--eval-every": eval_every, "--n-eval": n_eval}
    train |= {"--json": out, "--seconds": seconds, "--max-samples": max_samples}
    save = out.with_suffix("") if pass_k else None
    train["--save"] = save
    cmd = [sys.executable, "-m", "grpo_lab", "train", *_flags(train)] + (["--quiet"] if quiet else []) + (extra or [])
    _run(cmd)
    summary = json.loads(out.read_text())
    if pass_k:
        ev = out.with_name(out.stem + "-passk.json")
        flags = {"--model": save / "policy", "--task": "sum3", "--n": n_eval, "--samples": pass_k, "--seed": seed}
        _run([sys.executable, "-m", "grpo_lab", "eval", *_flags(flags | {"--json": ev})])
        summary["pass_at_k"] = json.loads(ev.read_text())["pass_at_k"]
        shutil.rmtree(save, ignore_errors=True)  # the checkpoint was only needed for this measurement
        save_json(summary, out)
    return summary


def _flags(values: dict) -> list[str]:
    """``{"--seed": 0, "--save": None}`` -> ``["--seed", "0"]``: a None leaves its flag out."""
    return [x for flag, v in values.items() if v is not None for x in (flag, str(v))]


# A stop signal to `compare` and what its child is sent: SIGHUP (a closed terminal) asks for a stop
# as SIGTERM does, which every run understands.
_FORWARD = {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM}
if hasattr(signal, "SIGHUP"):  # not on Windows
    _FORWARD[signal.SIGHUP] = signal.SIGTERM


@contextmanager
def _forwarding_signals(proc: subprocess.Popen) -> Iterator[list[int]]:
    """While inside, a stop signal to this process is passed on to ``proc`` (and listed in the
    yielded list) instead of ending this process and leaving ``proc`` running on its own."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def forward(signum, frame):
        received.append(signum)
        if proc.poll() is None:
            proc.send_signal(_FORWARD[signum])

    # A signal the parent set to be ignored (a job started with nohup) stays ignored.
    previous = {s: signal.signal(s, forward) for s in _FORWARD if signal.getsignal(s) is not signal.SIG_IGN}
    try:
        yield received
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _run(cmd: list[str]) -> None:
    # Its own session: Ctrl-C in a terminal reaches this process only, which passes it on once; the
    # child would otherwise get it twice, and a second stop signal stops a run without saving.
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=os.name == "posix"
    )
    with _forwarding_signals(proc) as received:
        _, err = proc.communicate()
    if proc.returncode != 0 or received:
        lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
        last = lines[-1] if lines else f"no message (exit status {proc.returncode})"
        what = "was stopped" if received else f"failed (exit status {proc.returncode})"
        raise ChildRunFailed(f"the run `{' '.join(cmd[3:8])} ...` {what}: {last}", 130 if received else proc.returncode)


def check_compare_arguments(algos: list[str], seeds: list[int], out_dir: str | Path | None) -> None:
    """Refuse, before any run, what would make a wrong table or lose files: no algorithm or seed, one
    repeated (a run done twice is not another seed), an ``out_dir`` that is a file, cannot be written,
    or holds files that are not a comparison's."""
    for name, values in (("algos", algos), ("seeds", seeds)):
        if not values:
            raise ValueError(f"{name} must name at least one, got none")
        twice = [v for v, n in Counter(values).items() if n > 1]
        if twice:
            raise ValueError(
                f"{name} must not repeat a value, got {list(values)} ({twice[0]} twice): a run done twice is "
                "the same run, not another seed"
            )
    if out_dir is None:
        return
    out = Path(out_dir)
    if out.is_dir() and any(out.iterdir()) and not (out / SUMMARY).exists():
        raise ValueError(
            f"out_dir {out} is a folder with other files in it (no {SUMMARY}), which compare would "
            "replace; give a new or empty folder"
        )
    check_output_folder(out, "out_dir")


def compare(
    algos: list[str],
    seeds: list[int],
    seconds: float | None = None,
    steps: int = 100000,
    eval_every: int = 20,
    n_eval: int = 1000,
    out_dir: str | Path | None = None,
    extra: list[str] | None = None,
    progress: Callable[[str], object] | None = print,
    max_samples: int | None = None,
    pass_k: int | None = None,
) -> dict:
    """Run every algorithm with every seed; return ``{"runs": {...}, "rows": [...], "table": str}``, also
    written to ``out_dir/summary.json``.

    ``seconds`` gives every run the same time budget, ``max_samples`` the same sample budget. A stop
    signal ends the running child after its step; the finished runs and their table are kept in
    ``out_dir`` (with ``"stopped": True``) and ``ChildRunFailed`` (exit status 130) says so."""
    check_compare_arguments(algos, seeds, out_dir)
    if out_dir is None:
        out = work = Path(tempfile.mkdtemp(prefix="grpo_lab_compare_"))
    else:
        out = Path(out_dir)
        work = out.parent / f".{out.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        work.mkdir()
    results: dict[str, list[dict]] = {algo: [] for algo in algos}
    done: dict[str, list[str]] = {algo: [] for algo in algos}
    try:
        # Seed-major order: a slow spell of the machine then falls on every algorithm, not on one.
        for seed in seeds:
            for algo in algos:
                name = f"{algo}-seed{seed}.json"
                kw = dict(extra=extra, max_samples=max_samples, pass_k=pass_k)
                s = run_one(algo, seed, seconds, steps, eval_every, n_eval, work / name, **kw)
                results[algo].append(s)
                done[algo].append(str(out / name))
                if progress:
                    progress(
                        f"{algo} seed {seed}: {s['before']['accuracy']:.3f} -> {final_accuracy(s):.3f} "
                        f"in {s['train_seconds']:.0f} s ({s['steps']} steps)"
                    )
    except ChildRunFailed as err:
        if err.returncode != 130:
            if work != out:
                shutil.rmtree(work, ignore_errors=True)
            raise
        # Stopped: keep what was measured, as `train` keeps its history (the stopped run's own JSON too).
        _finish(results, done, pass_k, work, out, stopped=True)
        n = sum(len(v) for v in results.values())
        runs = f"the {n} finished run with its table" if n == 1 else f"the {n} finished runs with their table"
        kept = [runs if n else "the table (no run had finished)"]
        kept += ["the stopped run's steps"] if (out / name).exists() else []
        are = "are" if n or len(kept) > 1 else "is"
        raise ChildRunFailed(
            f"stopped during the run of {algo} with seed {seed}; {' and '.join(kept)} {are} in {out}", 130
        ) from None
    return _finish(results, done, pass_k, work, out, stopped=False)


def _finish(results: dict, done: dict, pass_k: int | None, work: Path, out: Path, stopped: bool) -> dict:
    """The table of the finished runs, written with them; the folder then takes its name."""
    results = {a: runs for a, runs in results.items() if runs}
    metrics = tuple(m for m in RUN_METRICS if pass_k or not m.startswith("pass@"))
    rows = seed_table(results, metrics)
    result = {"runs": {a: done[a] for a in results}, "rows": rows, "table": format_seed_table(rows, metrics)}
    if stopped:
        result["stopped"] = True
    save_json(result, work / SUMMARY)
    if work != out:
        replace_folder(work, out)
    return result
