"""The course on Binder, checked here: a fresh environment built from exactly the files repo2docker reads,
then every notebook under nbval in it, with each kernel's peak memory against Binder's 2 GB.

    python tools/binder_check.py                     # build build/binder/venv afresh, run every notebook
    python tools/binder_check.py --notebooks 00 03   # only these notebooks
    python tools/binder_check.py --reuse             # keep an environment built before (faster; not fresh)

The build follows repo2docker's order for a binder/ folder: ``binder/requirements.txt`` (if any) with pip,
then ``binder/postBuild``, run from the repository's root with the environment's ``python`` first on PATH;
each notebook runs through ``binder/start`` when there is one, as the session's server does.
Everything runs in a scrubbed environment (no PYTHONPATH, no user site-packages), so nothing installed
elsewhere on this machine can help. Prints one row per notebook (passed, seconds, the kernel's peak
resident memory, its CPU seconds, the peak of the whole nbval process tree) and writes them as JSON.
Exit status 1 when a notebook fails or a kernel's peak reaches the limit.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from kernel_usage import KernelWatch  # noqa: E402

BINDER = ROOT / "binder"
LIMIT_MB = 2048  # mybinder.org's memory limit per session: 2 GB (its documentation's "user memory limits")


def scrubbed_env(venv: Path) -> dict:
    """The environment the build and the notebooks see: the venv first on the system's PATH, nothing else
    that points Python at packages (PYTHONPATH, a virtualenv, conda, user site-packages)."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONSTARTUP")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = f"{venv / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env["PYTHONNOUSERSITE"] = "1"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def build(venv: Path, python: str, say=print) -> float:
    """A fresh ``venv`` from the binder files, in repo2docker's order; the seconds it took."""
    t = time.perf_counter()
    if venv.exists():
        shutil.rmtree(venv)
    env = scrubbed_env(venv)
    subprocess.run([python, "-m", "venv", str(venv)], check=True, env=env)
    steps = []
    if (BINDER / "requirements.txt").exists():
        steps.append([str(venv / "bin" / "python"), "-m", "pip", "install", "-r", str(BINDER / "requirements.txt")])
    if (BINDER / "postBuild").exists():
        steps.append(["bash", str(BINDER / "postBuild")])
    if not steps:
        raise SystemExit("binder/: neither requirements.txt nor postBuild: nothing tells Binder what to install")
    for cmd in steps:
        say("+ " + " ".join(cmd))
        subprocess.run(cmd, check=True, cwd=ROOT, env=env)
    return time.perf_counter() - t


def run_notebook(venv: Path, notebook: Path, timeout: float) -> dict:
    """nbval on one notebook in ``venv``, its kernel watched."""
    cmd = [str(venv / "bin" / "python"), "-m", "pytest", "--nbval-lax", str(notebook.relative_to(ROOT)), "-q",
           "-p", "no:cacheprovider"]  # fmt: skip
    if (BINDER / "start").exists():  # repo2docker runs the server (and so each kernel) through it
        cmd = ["bash", str(BINDER / "start"), *cmd]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=scrubbed_env(venv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
    with KernelWatch(proc.pid) as watch:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            out += f"\ntimed out after {timeout} s"
    u = watch.usage
    row = {
        "ok": proc.returncode == 0,
        "seconds": round(time.perf_counter() - t, 1),
        "kernel_peak_mb": round(u.kernel_peak_mb),
        "kernel_cpu_seconds": round(u.kernel_cpu_seconds, 1),
        "tree_peak_mb": round(u.tree_peak_mb),
        "kernels": len(u.kernels),
    }
    if proc.returncode != 0:
        row["output"] = out[-3000:]
    return row


def table(rows: dict) -> str:
    lines = [f"{'notebook':<28} {'nbval':>6} {'seconds':>8} {'kernel peak MB':>15} {'kernel CPU s':>13} "
             f"{'tree peak MB':>13}"]  # fmt: skip
    for name, r in rows.items():
        lines.append(f"{name:<28} {'pass' if r['ok'] else 'FAIL':>6} {r['seconds']:>8.0f} {r['kernel_peak_mb']:>15} "
                     f"{r['kernel_cpu_seconds']:>13.0f} {r['tree_peak_mb']:>13}")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/binder_check.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", default=str(ROOT / "build" / "binder" / "venv"), help="where to build the environment")
    ap.add_argument("--python", default=sys.executable, help="the Python to build it with (3.10+)")
    ap.add_argument("--reuse", action="store_true", help="use the environment already at --venv, do not rebuild")
    ap.add_argument("--notebooks", nargs="+", default=None, help="numbers of the notebooks to run (default: all)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per notebook before it counts as failed")
    ap.add_argument("--json", default=str(ROOT / "build" / "binder" / "binder_check.json"), help="where to write")
    args = ap.parse_args(argv)
    venv = Path(args.venv).resolve()
    notebooks = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    if args.notebooks:
        unknown = set(args.notebooks) - {p.name[:2] for p in notebooks}
        if unknown:
            ap.error(f"--notebooks must name notebooks in notebooks/ by number, got {sorted(unknown)}")
        notebooks = [p for p in notebooks if p.name[:2] in args.notebooks]
    if args.reuse and not (venv / "bin" / "python").exists():
        ap.error(f"--reuse: no environment at {venv}; leave out --reuse to build it")
    result: dict = {"machine": f"{os.cpu_count()} CPU cores, {platform.machine()}", "limit_mb": LIMIT_MB}
    if not args.reuse:
        result["build_seconds"] = round(build(venv, args.python, say=lambda s: print(s, file=sys.stderr)))
    result["fresh"] = not args.reuse
    rows = result["notebooks"] = {}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    for nb in notebooks:
        print(f"binder_check: nbval {nb.name} ...", file=sys.stderr, flush=True)
        rows[nb.name] = run_notebook(venv, nb, args.timeout)
        result["ok"] = all(r["ok"] and r["kernel_peak_mb"] < LIMIT_MB for r in rows.values())
        # after each notebook, so that an interrupted run keeps what it measured
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(table(rows))
    for name, r in rows.items():
        if not r["ok"]:
            print(f"\n{name} failed:\n{r['output']}", file=sys.stderr)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
