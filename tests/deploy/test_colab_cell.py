"""The install cell every notebook starts with (tools/course_links.py writes it), run in a fresh environment
that has torch and nothing of the course, as on Colab: it clones the course, installs it, and the lab
imports and loads its model in the same kernel (no restart) and in a new process. The clone comes from this
checkout instead of GitHub (the only change to the cell's text), so the test needs no address."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import course_links  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform != "linux", reason="a Linux venv")]

AFTER = """
import grpo_lab, pathlib
from grpo_lab.lab.models import load_policy
model, tokenizer = load_policy("tiny-sum3", device="cpu")
print(pathlib.Path(grpo_lab.__file__).parents[1].name, sum(p.numel() for p in model.parameters()) > 100_000)
"""


def _run(cmd, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=1800, check=False, **kw)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return p.stdout


def test_the_first_cell_installs_the_course_where_it_is_missing(tmp_path):
    nb = nbformat.read(ROOT / "notebooks" / "00_tour.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    url = f"https://github.com/{course_links.repository()}"
    assert cell.source.count(url) == 1
    source = cell.source.replace(url, str(ROOT))
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv])
    py = venv / "bin" / "python"
    _run([py, ROOT / "tools" / "install_torch.py"])  # Colab comes with torch
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(Path.home()), "PYTHONNOUSERSITE": "1"}
    probe = "import importlib.util; print(importlib.util.find_spec('grpo_lab'))"
    missing = _run([py, "-c", probe], env=env, cwd=tmp_path)
    assert missing.split() == ["None"]  # (run outside the checkout: a Python finds the package in its folder)
    work = tmp_path / "content"
    work.mkdir()
    same_kernel = _run([py, "-c", source + "\n" + AFTER], cwd=work, env=env).split()
    assert same_kernel == ["grpo_lab-course", "True"]
    new_process = _run([py, "-c", AFTER], cwd=tmp_path, env=env).split()
    assert new_process == ["grpo_lab-course", "True"]
    # run again, with the course in place: nothing to do, nothing printed
    assert _run([py, "-c", source], cwd=work, env=env) == ""
