"""Binder: a fresh environment built from exactly the files repo2docker reads (binder/) runs every notebook
under nbval, and each notebook's kernel stays under Binder's 2 GB (tools/binder_check.py prints the table)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))


def test_binder_builds_the_way_make_install_does():
    """repo2docker reads only binder/ when it exists: postBuild must install torch's build and then the
    requirements (with the lab itself), and runtime.txt name a Python the package accepts."""
    post = (ROOT / "binder" / "postBuild").read_text().splitlines()
    commands = [ln for ln in post if ln.strip() and not ln.startswith(("#", "set "))]
    assert commands == ["python tools/install_torch.py", "python -m pip install --no-cache-dir -r requirements.txt"]
    assert (ROOT / "binder" / "postBuild").stat().st_mode & 0o111
    assert "-e ." in (ROOT / "requirements.txt").read_text().splitlines()
    (runtime,) = (ROOT / "binder" / "runtime.txt").read_text().split()
    minimum = re.search(r'requires-python = ">=(\d+)\.(\d+)"', (ROOT / "pyproject.toml").read_text()).groups()
    assert re.fullmatch(r"python-\d+\.\d+", runtime)
    assert tuple(map(int, runtime[len("python-") :].split("."))) >= tuple(map(int, minimum))


def test_binder_start_gives_torch_one_thread_unless_told_otherwise():
    start = ROOT / "binder" / "start"
    probe = ["bash", str(start), "sh", "-c", "echo $OMP_NUM_THREADS"]
    env = {"PATH": "/usr/bin:/bin"}
    assert subprocess.run(probe, env=env, capture_output=True, text=True, check=True).stdout.strip() == "1"
    env["OMP_NUM_THREADS"] = "4"
    assert subprocess.run(probe, env=env, capture_output=True, text=True, check=True).stdout.strip() == "4"


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="Binder runs Linux; the measurement reads /proc")
@pytest.mark.skipif(
    not os.environ.get("GRPO_LAB_BINDER_CHECK"),
    reason="a fresh environment and every notebook again (about 15 minutes): `make binder-check`, or set "
    "GRPO_LAB_BINDER_CHECK=1",
)
def test_a_fresh_binder_environment_runs_every_notebook_under_2_gb(tmp_path):
    out = tmp_path / "binder_check.json"
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "binder_check.py"), "--json", str(out)],
                       capture_output=True, text=True, timeout=4 * 3600, check=False)  # fmt: skip
    print(p.stdout)
    r = json.loads(out.read_text())
    assert r["fresh"] and sorted(r["notebooks"]) == NOTEBOOKS
    for name, row in r["notebooks"].items():
        assert row["ok"], f"{name}:\n{row.get('output', '')}"
        assert row["kernels"] == 1 and 100 < row["kernel_peak_mb"] < 2048, (name, row)
    assert p.returncode == 0, p.stderr[-3000:]
