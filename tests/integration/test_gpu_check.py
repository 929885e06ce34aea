"""``tools/gpu_check.sh``: the shortened CPU run (what CI runs so the GPU check cannot rot) writes one
JSON with every step passed and the figures the README quotes, each equal to what the step's own
output says; the full plan covers every notebook and algorithm at the gpu profile's sizes."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_check  # noqa: E402

from grpo_lab.algorithms import PRESETS  # noqa: E402
from grpo_lab.course.profile import PROFILES  # noqa: E402
from grpo_lab.lab.pretrain import GPU_MODEL_DIR  # noqa: E402


def _poisoned_path(folder: Path) -> str:
    """A PATH whose first `python` and `python3` fail loudly: the script must never run the PATH's Python
    (on a fresh machine it is the system's, without torch or the lab)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        shim = folder / name
        shim.write_text('#!/bin/sh\necho "the Python on PATH ran" >&2\nexit 97\n')
        shim.chmod(0o755)
    return f"{folder}:/usr/bin:/bin"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    env = {**os.environ, "PYTHON": sys.executable, "PATH": _poisoned_path(tmp_path_factory.mktemp("shims"))}
    p = subprocess.run(
        ["bash", str(ROOT / "tools" / "gpu_check.sh"), "--cpu-smoke", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return out, json.loads((out / "gpu_check.json").read_text())


def test_the_smoke_run_passes_every_step_and_says_what_it_skipped(smoke):
    _, r = smoke
    assert r["mode"] == "cpu-smoke" and r["ok"] is True
    assert r["steps_run"] == ["pretrain", "notebooks", "train", "bench"]
    assert r["notebooks"] == r["notebooks_hf"] == {} and "no notebook" in r["notebooks_skipped"]
    assert r["pretrain"]["ok"] and r["bench"]["ok"]
    assert set(r["train"]) == set(PRESETS) and all(t["ok"] for t in r["train"].values())
    assert {"device", "device_name", "torch"} <= set(r["machine"]) and r["seconds"] > 0


def test_the_pretrained_policy_is_the_size_asked_for(smoke):
    out, r = smoke
    # --hidden 32 --layers 1 --heads 2 --ffn 64, vocabulary 17, tied embeddings: by hand,
    # embeddings 17 * 32 + one layer (q, k, v, o: 4 * 32 * 32; gate, up, down: 3 * 32 * 64; two norms: 2 * 32)
    # + the final norm 32.
    assert r["pretrain"]["parameters"] == 17 * 32 + 4 * 32 * 32 + 3 * 32 * 64 + 2 * 32 + 32
    assert (out / "policy" / "config.json").exists() and r["policy"] == str(out / "policy")


@pytest.mark.parametrize("algo", sorted(PRESETS))
def test_each_training_run_reports_what_its_own_summary_says(smoke, algo):
    out, r = smoke
    t = r["train"][algo]
    s = json.loads((out / f"train_{algo}.json").read_text())
    assert t["steps"] == s["steps"] == 1
    assert t["seconds_per_step"] == pytest.approx(statistics.median(m["step_seconds"] for m in s["history"]))
    assert t["rollout_tokens_per_second"] == pytest.approx(
        statistics.median(m["tokens_per_second"] for m in s["history"])
    )
    assert t["accuracy_gain"] == pytest.approx(s["after"]["accuracy"] - s["before"]["accuracy"])
    assert 0.0 <= t["accuracy_before"] <= 1.0 and 0.0 <= t["accuracy_after"] <= 1.0
    assert t["peak_memory_mb"] == s["peak_memory_mb"] > 0
    assert s["config"]["model"] == r["policy"] and s["config"]["task"] == "sum3"
    if algo == "gfpo":
        assert s["algorithm"]["gfpo_group_size"] == 2 * s["config"]["group_size"]


def test_the_bench_figures_come_from_the_bench_json(smoke):
    out, r = smoke
    b, raw = r["bench"], json.loads((out / "bench.json").read_text())
    assert b["speedup"] == pytest.approx(raw["speedup"]) and b["same_prompts"] is True
    assert set(b["arms"]) == {"lab", "trl"}
    for arm, a in b["arms"].items():
        assert a["median_step_seconds"] == pytest.approx(raw["arms"][arm]["median_step_seconds"])
        assert a["tokens_per_second"] == pytest.approx(1 / raw["arms"][arm]["seconds_per_token"]["step"])


def test_the_full_plan_runs_every_notebook_and_algorithm_at_the_gpu_profile_sizes(tmp_path):
    p = gpu_check.plan(smoke=False, out=tmp_path, train_seconds=None)
    P = PROFILES["gpu"]
    assert p["policy"] == str(GPU_MODEL_DIR) == P["model"]
    assert p["notebooks"] == sorted(f"notebooks/{q.name}" for q in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
    # the second pass, on the hf profile's chat model: the notebooks whose live runs have train-it cells
    assert [Path(nb).name[:2] for nb in p["notebooks_hf"]] == ["03", "04", "05", "06", "07", "08", "09"]
    assert p["pretrain"][:5] == ["pretrain", "--size", "gpu", "--device", "cuda"]
    for argv in p["train"].values():
        opts = {
            name: argv[argv.index(name) + 1]
            for name in ("--device", "--model", "--task", "--prompts", "--group-size", "--seconds")
        }
        assert opts["--device"] == "cuda" and opts["--model"] == str(GPU_MODEL_DIR) and opts["--task"] == "sum3"
        assert int(opts["--prompts"]) == P["prompts"] and int(opts["--group-size"]) == P["group_size"]
        assert float(opts["--seconds"]) == P["train_seconds"]
    assert "--in-process" not in p["bench"] and p["bench"][p["bench"].index("--pairs") + 1] == "5"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_without_cuda_the_full_run_refuses_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        gpu_check.main([])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "no CUDA device here" in err and "--cpu-smoke" in err


def test_the_gpu_policy_size_has_34_million_parameters():
    from transformers import LlamaForCausalLM

    from grpo_lab.lab.models import tiny_llama_config
    from grpo_lab.lab.pretrain import SIZES

    s = SIZES["gpu"]
    with torch.device("meta"):
        model = LlamaForCausalLM(tiny_llama_config(17, s["hidden"], s["layers"], s["heads"], s["ffn"]))
    # by hand: embeddings 17 * 512 (tied with the head) + 8 layers of (4 * 512^2 attention + 3 * 512 * 2048 MLP
    # + 2 * 512 norms) + the final norm 512
    assert (
        sum(p.numel() for p in model.parameters())
        == 17 * 512 + 8 * (4 * 512**2 + 3 * 512 * 2048 + 2 * 512) + 512
        == 33_571_840
    )


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"size": "huge"}, "size must be one of"),
        ({"hidden": 30, "heads": 4}, "multiple of heads"),
        ({"layers": 0}, "layers must be a positive int"),
        ({"lr": float("nan")}, "lr must be"),
    ],
)
def test_pretrain_rejects_bad_sizes_naming_them(tmp_path, kwargs, needle):
    from grpo_lab.lab.pretrain import pretrain

    with pytest.raises(ValueError, match=needle):
        pretrain(out_dir=tmp_path, max_steps=1, progress=False, **kwargs)


def _script_in(tmp_path: Path) -> Path:
    """tools/gpu_check.sh in a stand-in checkout whose tools/gpu_check.py prints the Python that runs it."""
    (tmp_path / "tools").mkdir()
    script = tmp_path / "tools" / "gpu_check.sh"
    shutil.copy(ROOT / "tools" / "gpu_check.sh", script)
    (tmp_path / "tools" / "gpu_check.py").write_text("import sys\nprint(sys.executable, *sys.argv[1:])\n")
    return script


def test_the_script_runs_the_project_environment_not_the_python_on_path(tmp_path):
    script = _script_in(tmp_path)
    venv_python = tmp_path / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["PATH"] = _poisoned_path(tmp_path / "shims")
    p = subprocess.run(["bash", str(script), "--x"], cwd="/", env=env, capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [str(venv_python), "--x"]


def test_without_the_project_environment_the_script_stops_in_one_line(tmp_path):
    script = _script_in(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["PATH"] = _poisoned_path(tmp_path / "shims")
    p = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=False)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, p.stderr
    assert ".venv/bin/python" in p.stderr and "make install" in p.stderr
    env["PYTHON"] = str(tmp_path / "nowhere" / "python")
    p = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=False)
    assert p.returncode == 2 and f"no Python at {tmp_path / 'nowhere' / 'python'}:" in p.stderr
