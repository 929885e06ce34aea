"""Ruff, with the settings in pyproject.toml ([tool.ruff]), over the package, the tests and the tools."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


def _unhinted(source: str, name: str = "<source>") -> list[str]:
    """``name:line:function`` for each public module-level function or method (of a module-level class)
    in ``source`` that lacks a parameter annotation (self and cls excepted) or a return annotation."""
    import ast

    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            fns = [node]
        elif isinstance(node, ast.ClassDef):
            fns = [n for n in node.body if isinstance(n, ast.FunctionDef)]
        else:
            fns = []
        for f in fns:
            if f.name.startswith("_"):
                continue
            a = f.args
            params = [p for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")]
            params += [p for p in (a.vararg, a.kwarg) if p is not None]
            if f.returns is None or any(p.annotation is None for p in params):
                out.append(f"{name}:{f.lineno}:{f.name}")
    return out


def test_every_public_function_is_type_hinted():
    # The checker itself: it flags what lacks a hint and passes what has them all.
    flagged = _unhinted(
        "def ok(x: int, *a: int, **k: str) -> int: ...\n"
        "def no_return(x: int): ...\n"
        "def no_param(x) -> int: ...\n"
        "def no_kwargs(**k) -> None: ...\n"
        "def _private(x): ...\n"
        "class C:\n"
        "    def m(self, y: int) -> int: ...\n"
        "    def n(self, y): ...\n"
        "    def _p(self, y): ...\n"
    )
    assert flagged == ["<source>:2:no_return", "<source>:3:no_param", "<source>:4:no_kwargs", "<source>:8:n"]

    offenders = []
    for path in sorted((ROOT / "grpo_lab").glob("*.py")):
        offenders += _unhinted(path.read_text(), path.name)
    assert not offenders, "public functions without full type hints:\n" + "\n".join(offenders)
