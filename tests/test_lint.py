"""Ruff, with the settings in pyproject.toml ([tool.ruff]), over the package, the tests and the tools."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_check_passes_on_the_package_and_the_tests():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install ruff, or pip install -r requirements.txt); lint not run")
    result = subprocess.run([ruff, "check", "grpo_lab", "tests", "tools"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
