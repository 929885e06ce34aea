"""The package's layers, enforced: a module may import only modules of its own layer or below.

    math        checks, advantages, losses, kl, rewards   (torch and the standard library only)
    core        algorithms, models, tasks, rollout
    measure     timing, metrics, course, pretrain
    train       trainer
    experiment  experiments, trl_bridge, export, bench, exercises, doctor
    show        viz, widgets                              (never the trainer: plots do not train)
    cli         __main__

Imports are read from the source (every ``import``, also those inside functions, since a lazy import
is still a dependency), so a new upward arrow fails here before anyone runs it. A second check
imports the bottom layers in a fresh interpreter and looks at what came with them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "grpo_lab"
LAYERS = {
    "math": ("checks", "advantages", "losses", "kl", "rewards"),
    "core": ("algorithms", "models", "tasks", "rollout"),
    "measure": ("timing", "metrics", "course", "pretrain"),
    "train": ("trainer",),
    "experiment": ("experiments", "trl_bridge", "export", "bench", "exercises", "doctor"),
    "show": ("viz", "widgets"),
    "cli": ("__main__",),
}
RANK = {module: rank for rank, modules in enumerate(LAYERS.values()) for module in modules}
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def imports(module: str) -> tuple[set[str], set[str]]:
    """``(package modules, outside top-level packages)`` that ``module`` imports anywhere in its source."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    inside, outside = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level > 0 or (node.module or "").startswith("grpo_lab"):
                name = (node.module or "").removeprefix("grpo_lab").lstrip(".")
                if name:
                    inside.add(name.split(".")[0])
                else:  # from . import viz
                    inside.update(a.name for a in node.names)
            else:
                outside.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                (inside if top == "grpo_lab" else outside).add(top)
    return inside, outside


def test_every_module_has_a_layer():
    assert set(MODULES) == set(RANK), f"add new modules to LAYERS: {sorted(set(MODULES) ^ set(RANK))}"


@pytest.mark.parametrize("module", MODULES)
def test_no_module_imports_a_layer_above_its_own(module):
    inside, _ = imports(module)
    upward = sorted(m for m in inside if RANK[m] > RANK[module])
    assert not upward, f"{module} ({_layer(module)}) imports {[(m, _layer(m)) for m in upward]}"


@pytest.mark.parametrize("module", LAYERS["math"])
def test_the_math_layer_imports_only_torch_the_standard_library_and_itself(module):
    inside, outside = imports(module)
    assert inside <= set(LAYERS["math"]), sorted(inside - set(LAYERS["math"]))
    third_party = sorted(m for m in outside if m not in sys.stdlib_module_names and m != "__future__")
    assert third_party in ([], ["torch"]), third_party


@pytest.mark.parametrize("module", LAYERS["show"])
def test_plots_never_import_the_trainer(module):
    inside, _ = imports(module)
    assert "trainer" not in inside


def test_the_trainer_never_draws():
    inside, outside = imports("trainer")
    assert not inside & set(LAYERS["show"])
    assert not outside & {"matplotlib", "ipywidgets"}


def test_importing_the_bottom_layers_loads_nothing_above_them():
    code = (
        "import sys\n"
        "import grpo_lab.viz, grpo_lab.widgets\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('grpo_lab.'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent
    ).stdout.split()
    assert "grpo_lab.trainer" not in out, out
    code = "import sys, grpo_lab.trainer\nprint('matplotlib' in sys.modules, 'grpo_lab.viz' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
    assert out.stdout.split() == ["False", "False"]


def _layer(module: str) -> str:
    return next(name for name, modules in LAYERS.items() if module in modules)
