"""The course on a GPU, run end to end and measured; one JSON of what it cost.

    tools/gpu_check.sh                      # on a GPU machine: the whole check (see --only to run parts)
    tools/gpu_check.sh --cpu-smoke          # the same steps, shortened, on the CPU (what CI runs)

Steps, in order (each one's result is recorded, and a failed step does not stop the others):

1. ``pretrain``: build the gpu profile's policy (``python -m grpo_lab pretrain --size gpu --device cuda``);
2. ``notebooks``: every notebook under nbval with ``GRPO_LAB_PROFILE=gpu``, then the "Train it" cells of
   notebooks 03 to 09 (``tools/run_train_cells.py``) with ``GRPO_LAB_PROFILE=hf``: a real chat model on GSM8K
   from the Hugging Face hub, or the local copies ``GRPO_LAB_MODEL`` and ``GRPO_LAB_DATA_DIR`` name;
3. ``train``: ``python -m grpo_lab train`` for each algorithm on that policy at the gpu profile's sizes;
4. ``bench``: ``python -m grpo_lab bench`` on the GPU with that policy.

The JSON (``--out``/gpu_check.json) holds, per step: whether it passed and its seconds; per training
run: seconds per step, rollout tokens per second, peak memory and the held-out accuracy before,
after and its gain; the bench's ratio with its interval, seconds per step and per token. Exit
status 1 when any step failed.

``--cpu-smoke`` runs a shortened version on the CPU so the script cannot rot: a tiny pretrain, one
short training step per algorithm, a one-step bench (lab and TRL, in one process), no notebooks.
Its steps run in this process (the same command-line entry point, without a new interpreter each).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's grpo_lab, wherever the script is started from

from run_train_cells import tagged_notebooks  # noqa: E402 - tools/, the script's own folder

STEPS = ("pretrain", "notebooks", "train", "bench")


def plan(smoke: bool, out: Path, train_seconds: float | None) -> dict:
    """The command lines of each step (argv after ``python -m grpo_lab``), sized for the mode."""
    from grpo_lab.algorithms import PRESETS
    from grpo_lab.course.profile import PROFILES
    from grpo_lab.lab.pretrain import GPU_MODEL_DIR

    if smoke:
        policy = out / "policy"
        sizes = {"prompts": 2, "group_size": 2, "steps": 1, "max_new_tokens": 8, "n_eval": 8, "train_seconds": None}
        pretrain = [
            "pretrain",
            "--out",
            str(policy),
            "--hidden",
            "32",
            "--layers",
            "1",
            "--heads",
            "2",
            "--ffn",
            "64",
            "--batch-size",
            "16",
            "--max-steps",
            "20",
            "--eval-from",
            "10",
            "--eval-every",
            "10",
            "--n-eval",
            "16",
            "--device",
            "cpu",
            "--quiet",
        ]
        device = "cpu"
        bench = ["--steps", "1", "--warmup", "0", "--pairs", "1", "--only", "lab", "trl", "--in-process"]
    else:
        policy = GPU_MODEL_DIR  # where the gpu profile (and so the notebooks) look for it
        P = PROFILES["gpu"]
        sizes = {
            "prompts": P["prompts"],
            "group_size": P["group_size"],
            "steps": P["steps"],
            "max_new_tokens": 32,
            "n_eval": P["n_eval"],
            "train_seconds": train_seconds or P["train_seconds"],
        }
        pretrain = ["pretrain", "--size", "gpu", "--device", "cuda", "--out", str(policy), "--quiet"]
        device = "cuda"
        bench = ["--steps", "5", "--warmup", "2", "--pairs", "5"]
    # The model and the batch, the same for every training run and the benchmark.
    shared = ["--model", str(policy), "--device", device, "--prompts", str(sizes["prompts"]),
              "--group-size", str(sizes["group_size"]), "--max-new-tokens", str(sizes["max_new_tokens"])]  # fmt: skip
    train = {}
    for algo in sorted(PRESETS):
        argv = ["train", "--algo", algo, "--task", "sum3", *shared, "--steps", str(sizes["steps"]),
                "--n-eval", str(sizes["n_eval"]), "--json", str(out / f"train_{algo}.json"), "--quiet"]  # fmt: skip
        if sizes["train_seconds"]:
            argv += ["--seconds", str(sizes["train_seconds"])]
        if PRESETS[algo].advantage == "gfpo":  # sample twice the group, keep the group's size: the filter has work
            argv += ["--set", f"gfpo_group_size={2 * sizes['group_size']}"]
        train[algo] = argv
    bench = ["bench", *shared, "--json", str(out / "bench.json"), *bench]
    notebooks = [] if smoke else sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
    notebooks_hf = [] if smoke else [str(p.relative_to(ROOT)) for p in tagged_notebooks()]
    return {
        "policy": str(policy),
        "sizes": sizes,
        "pretrain": pretrain,
        "train": train,
        "bench": bench,
        "notebooks": notebooks,
        "notebooks_hf": notebooks_hf,
    }


def run_cli(argv: list[str], in_process: bool, timeout: float | None = None) -> tuple[bool, str, float]:
    """``python -m grpo_lab ARGV``: ``(passed, the last lines of its output on failure, seconds)``. In a new
    interpreter (each run its own CUDA memory peak), or here (``in_process``, for the CPU smoke run)."""
    t = time.perf_counter()
    if in_process:
        from grpo_lab.cli.main import main

        try:
            code = main(argv)
            return code == 0, "" if code == 0 else f"exit status {code}", time.perf_counter() - t
        except SystemExit as e:
            return e.code == 0, f"exit status {e.code}", time.perf_counter() - t
        except Exception:  # noqa: BLE001 - recorded in the JSON; the other steps still run
            return False, traceback.format_exc()[-3000:], time.perf_counter() - t
    return _subprocess([sys.executable, "-m", "grpo_lab"] + argv, timeout=timeout, t=t)


def _subprocess(cmd: list[str], timeout: float | None, t: float, env: dict | None = None) -> tuple[bool, str, float]:
    try:
        p = subprocess.run(
            cmd,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        )
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout} s: {' '.join(cmd)}", time.perf_counter() - t
    tail = "" if p.returncode == 0 else (p.stdout + p.stderr)[-3000:]
    return p.returncode == 0, tail, time.perf_counter() - t


def train_figures(summary: dict) -> dict:
    """What the README quotes from one ``train --json`` summary."""
    h = summary["history"]
    steps = [m["step_seconds"] for m in h if "step_seconds" in m]
    tps = [m["tokens_per_second"] for m in h if m.get("tokens_per_second") is not None]
    before, after = summary["before"]["accuracy"], summary["after"]["accuracy"]
    return {
        "steps": summary["steps"],
        "train_seconds": summary["train_seconds"],
        "seconds_per_step": statistics.median(steps) if steps else None,
        "rollout_tokens_per_second": statistics.median(tps) if tps else None,
        "completions_sampled": h[-1].get("samples_generated") if h else 0,
        "peak_memory_mb": summary["peak_memory_mb"],
        "accuracy_before": before,
        "accuracy_after": after,
        "accuracy_gain": after - before,
        "n_eval": summary["after"]["n"],
        "stop_reason": summary["stop_reason"],
    }


def bench_figures(r: dict) -> dict:
    """What the README quotes from the bench's JSON."""
    out = {
        "speedup": r.get("speedup"),
        "speedup_interval": r.get("speedup_interval"),
        "same_prompts": r.get("same_prompts"),
        "device_name": r["machine"]["device_name"],
        "arms": {},
    }
    for name, a in r.get("arms", {}).items():
        out["arms"][name] = {
            "median_step_seconds": a["median_step_seconds"],
            "step_spread": a["step_spread"],
            "seconds_per_token": a["seconds_per_token"],
            "tokens_per_second": 1.0 / a["seconds_per_token"]["step"],
            "peak_memory_added_mb": a["peak_memory_added_mb"],
        }
    return out


def machine() -> dict:
    import torch

    cuda = torch.cuda.is_available()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": "cuda" if cuda else "cpu",
        "device_name": torch.cuda.get_device_name() if cuda else platform.machine(),
        "cpu_count": os.cpu_count(),
    }


def check(
    smoke: bool,
    out: Path,
    only: tuple = STEPS,
    train_seconds: float | None = None,
    notebook_timeout: float = 1200,
    say=print,
) -> dict:
    """Run the steps in ``only`` and return the JSON's content (also written to ``out/gpu_check.json``)."""
    out.mkdir(parents=True, exist_ok=True)
    p = plan(smoke, out, train_seconds)
    result: dict = {
        "mode": "cpu-smoke" if smoke else "gpu",
        "policy": p["policy"],
        "sizes": p["sizes"],
        "steps_run": list(only),
    }
    t0 = time.perf_counter()
    in_process = smoke
    if "pretrain" in only:
        say("gpu_check: pretrain ...")
        ok, err, secs = run_cli(p["pretrain"], in_process)
        r = {"ok": ok, "seconds": secs, "command": "python -m grpo_lab " + " ".join(p["pretrain"])}
        summary_path = Path(p["policy"]) / "pretrain_summary.json"
        if ok and summary_path.exists():
            s = json.loads(summary_path.read_text())
            r.update(
                {
                    k: s[k]
                    for k in (
                        "parameters",
                        "steps",
                        "reached_target",
                        "held_out_greedy_accuracy",
                        "held_out_sampled_accuracy_t1",
                        "seconds",
                        "device",
                    )
                }
            )
        if err:
            r["error"] = err
        result["pretrain"] = r
    if "notebooks" in only:
        result["notebooks"] = {}
        for nb in p["notebooks"]:
            say(f"gpu_check: nbval {nb} ...")
            t = time.perf_counter()
            ok, err, secs = _subprocess(
                [sys.executable, "-m", "pytest", "--nbval-lax", nb, "-q", "-p", "no:cacheprovider"],
                timeout=notebook_timeout,
                t=t,
                env={"GRPO_LAB_PROFILE": "gpu"},
            )
            result["notebooks"][nb] = {"ok": ok, "seconds": secs, **({"error": err} if err else {})}
        result["notebooks_hf"] = {}
        for nb in p["notebooks_hf"]:  # the second pass: the train-it cells on the hf profile's chat model
            say(f"gpu_check: train-it cells of {nb} on the hf profile ...")
            t = time.perf_counter()
            ok, err, secs = _subprocess(
                [sys.executable, "tools/run_train_cells.py", Path(nb).name[:2]],
                timeout=notebook_timeout,
                t=t,
                env={"GRPO_LAB_PROFILE": "hf"},
            )
            result["notebooks_hf"][nb] = {"ok": ok, "seconds": secs, **({"error": err} if err else {})}
        if smoke:
            result["notebooks_skipped"] = "the CPU smoke run executes no notebook"
    if "train" in only:
        result["train"] = {}
        for algo, argv in p["train"].items():
            say(f"gpu_check: train {algo} ...")
            ok, err, secs = run_cli(argv, in_process)
            r = {"ok": ok, "seconds": secs, "command": "python -m grpo_lab " + " ".join(argv)}
            if ok:
                r.update(train_figures(json.loads((out / f"train_{algo}.json").read_text())))
            if err:
                r["error"] = err
            result["train"][algo] = r
    if "bench" in only:
        say("gpu_check: bench ...")
        ok, err, secs = run_cli(p["bench"], in_process)
        r = {"ok": ok, "seconds": secs, "command": "python -m grpo_lab " + " ".join(p["bench"])}
        if ok:
            r.update(bench_figures(json.loads((out / "bench.json").read_text())))
        if err:
            r["error"] = err
        result["bench"] = r
    result["machine"] = machine()
    result["seconds"] = time.perf_counter() - t0
    parts = [result[k] for k in ("pretrain", "bench") if k in result]
    parts += list(result.get("train", {}).values()) + list(result.get("notebooks", {}).values())
    parts += list(result.get("notebooks_hf", {}).values())
    result["ok"] = all(x["ok"] for x in parts)
    from grpo_lab.io import save_json

    save_json(result, out / "gpu_check.json")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/gpu_check.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--cpu-smoke",
        action="store_true",
        default=os.environ.get("GPU_CHECK_SMOKE") == "1",
        help="a shortened run on the CPU (also: GPU_CHECK_SMOKE=1)",
    )
    ap.add_argument("--out", default="runs/gpu_check", help="folder for the JSON and each step's files")
    ap.add_argument(
        "--only", nargs="+", choices=STEPS, default=list(STEPS), help="run only these steps (in the usual order)"
    )
    ap.add_argument(
        "--train-seconds", type=float, default=None, help="training time per algorithm (default: the gpu profile's)"
    )
    ap.add_argument(
        "--notebook-timeout", type=float, default=1200, help="seconds per notebook before it counts as failed"
    )
    args = ap.parse_args(argv)
    if args.train_seconds is not None and not args.train_seconds > 0:
        ap.error(f"--train-seconds must be > 0, got {args.train_seconds}")
    if not args.cpu_smoke:
        import torch

        if not torch.cuda.is_available():
            ap.error("no CUDA device here: run it on a GPU machine, or pass --cpu-smoke for the shortened CPU run")
    out = Path(args.out)
    if not out.is_absolute():
        out = ROOT / out
    r = check(
        args.cpu_smoke,
        out,
        tuple(s for s in STEPS if s in args.only),
        args.train_seconds,
        args.notebook_timeout,
        say=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(json.dumps({k: r[k] for k in ("mode", "ok", "seconds")}), f"-> {out / 'gpu_check.json'}")
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
