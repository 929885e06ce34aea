"""Every notebook keeps the course's rules (nbval proves they run; this checks they are complete):
committed executed without errors, at least one widget, a training run or a live experiment, two or
more self-checking exercises, pinned outputs for nbval, and a picture for the README."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9]*.ipynb"))


def test_there_are_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(11)]  # the syllabus: 00 to 10


@pytest.fixture(params=NOTEBOOKS, ids=lambda p: p.stem)
def nb(request):
    return nbformat.read(request.param, as_version=4)


def _code(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_committed_executed_without_errors(nb):
    for cell in _code(nb):
        assert cell.execution_count is not None, f"not executed: {cell.source[:60]!r}"
        assert not any(o.output_type == "error" for o in cell.outputs), f"error output in {cell.source[:60]!r}"


def test_has_a_widget(nb):
    assert any("explorer(" in c.source or "widgets.explore(" in c.source for c in _code(nb))


def test_has_two_self_checking_exercises(nb):
    # a function to write (check) or an outcome to predict or a run to diagnose (ask): both check themselves
    assert sum('check("' in c.source or 'ask("' in c.source for c in _code(nb)) >= 2


def test_pins_some_outputs_for_nbval_but_never_a_widget(nb):
    pinned = [c for c in _code(nb) if "# NBVAL_CHECK_OUTPUT" in c.source]
    assert pinned
    assert not any("explorer(" in c.source or "widgets." in c.source for c in pinned)


def test_has_a_picture_for_the_readme(nb):
    assert any("readme-figure" in c.metadata.get("tags", []) for c in _code(nb))


def test_imports_the_package_not_a_copy(nb):
    assert any("from grpo_lab" in c.source for c in _code(nb))
