"""Ruff, with the settings in pyproject.toml ([tool.ruff]), over the package, the tests and the tools."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_check_passes_on_the_package_and_the_tests():
    # This Python's ruff first: `make test` runs .venv's Python without .venv/bin on PATH.
    if importlib.util.find_spec("ruff") is not None:
        ruff = [sys.executable, "-m", "ruff"]
    elif shutil.which("ruff"):
        ruff = [shutil.which("ruff")]
    else:
        pytest.skip("ruff is not installed (pip install ruff, or pip install -r requirements.txt); lint not run")
    result = subprocess.run([*ruff, "check", "grpo_lab", "tests", "tools"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
