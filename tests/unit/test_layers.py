"""The package's layers are its folders, enforced: a module may import only from its own folder and the
folders before it in ``LAYERS`` (the order ``grpo_lab/__init__.py`` describes).

Imports are read from the source (every ``import``, also those inside functions, since a lazy import
is still a dependency), so a new upward arrow fails here before anyone runs it. Within a folder, the
module graph must have no cycle. A last check imports the plotting modules in a fresh interpreter and
looks at what came with them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "grpo_lab"
# A folder (or top-level module) may import from itself and from those before it.
LAYERS = ("core", "io", "lab", "algorithms", "train", "study", "scale", "bench", "course", "cli")
RANK = {layer: rank for rank, layer in enumerate(LAYERS)}
MODULES = sorted(
    ".".join(p.relative_to(PACKAGE).with_suffix("").parts)
    for p in PACKAGE.rglob("*.py")
    if p.name != "__init__.py" and p.relative_to(PACKAGE).parts != ("__main__.py",)
)


def layer(module: str) -> str:
    """``"train.trainer"`` -> ``"train"``; ``"algorithms"`` -> ``"algorithms"``."""
    return module.split(".")[0]


def imports(module: str) -> tuple[set[str], set[str]]:
    """``(package modules as dotted paths, outside top-level packages)`` that ``module`` imports anywhere."""
    path = PACKAGE / (module.replace(".", "/") + ".py")
    here = module.split(".")[:-1]
    inside, outside = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level > 0:
                base = here[: len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("grpo_lab"):
                target = node.module.removeprefix("grpo_lab").lstrip(".")
            else:
                outside.add(node.module.split(".")[0])
                continue
            for alias in node.names:  # `from . import viz` names a module; `from .x import f` a name in x
                as_module = f"{target}.{alias.name}" if target else alias.name
                inside.add(as_module if as_module in MODULES else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("grpo_lab."):
                    inside.add(alias.name.removeprefix("grpo_lab."))
                else:
                    outside.add(alias.name.split(".")[0])
    return {m for m in inside if m}, outside


def test_every_module_sits_in_a_layer():
    assert {layer(m) for m in MODULES} <= set(RANK), sorted({layer(m) for m in MODULES} - set(RANK))


@pytest.mark.parametrize("module", MODULES)
def test_no_module_imports_a_layer_after_its_own(module):
    inside, _ = imports(module)
    upward = sorted(m for m in inside if RANK[layer(m)] > RANK[layer(module)])
    assert not upward, f"{module} (layer {layer(module)}) imports {upward}"


def test_no_cycle_between_modules():
    graph = {m: {t for t in imports(m)[0] if t in MODULES} for m in MODULES}
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            raise AssertionError(f"import cycle: {' -> '.join(path[path.index(m) :] + [m])}")
        if m in done:
            return
        for t in sorted(graph[m]):
            visit(t, path + [m])
        done.add(m)

    for m in MODULES:
        visit(m, [])


@pytest.mark.parametrize("module", [m for m in MODULES if layer(m) == "core"])
def test_the_formulas_import_only_torch_the_standard_library_and_each_other(module):
    inside, outside = imports(module)
    assert {layer(m) for m in inside} <= {"core"}, sorted(inside)
    third_party = sorted(m for m in outside if m not in sys.stdlib_module_names and m != "__future__")
    assert third_party in ([], ["torch"]), third_party


@pytest.mark.parametrize("module", ["course.viz", "course.widgets"])
def test_plots_never_import_the_trainer(module):
    inside, _ = imports(module)
    assert not {m for m in inside if layer(m) == "train"}, sorted(inside)


def test_the_training_loop_never_draws():
    for module in (m for m in MODULES if layer(m) == "train"):
        inside, outside = imports(module)
        assert not {m for m in inside if layer(m) == "course"}, module
        assert not outside & {"matplotlib", "ipywidgets"}, module


def test_importing_the_plots_loads_no_trainer_and_the_trainer_loads_no_plots():
    code = (
        "import sys\n"
        "import grpo_lab.course.viz, grpo_lab.course.widgets\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('grpo_lab.'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent
    ).stdout.split()
    assert not [m for m in out if m.startswith("grpo_lab.train")], out
    code = (
        "import sys, grpo_lab.train.trainer\nprint('matplotlib' in sys.modules, 'grpo_lab.course.viz' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
    assert out.stdout.split() == ["False", "False"]


def test_the_import_rule_can_fail():
    """The reader above must see a real upward import, or every test here passes vacuously."""
    inside, _ = imports("train.trainer")
    assert "core.losses" in inside and "lab.rollout" in inside, sorted(inside)
