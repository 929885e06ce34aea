"""The register of exercises: for each, the cases a learner's function is run on, the package's answer
to them, a short reference solution and a hint. The exercises themselves are in ``bank_00_04.py`` and
``bank_05_10.py``, in notebook order.

Each exercise is four parts, ``_sol_*`` (shown by ``solution(name)``), ``_cases_*``, ``_ref_*`` (or a
lambda over the package) and its ``declare`` line. The expected values come from the package, which is
itself tested against the papers' numbers (``tests/``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple


class Exercise(NamedTuple):
    """One exercise: its cases, the package's answer to them, a reference solution, and a hint."""

    cases: Callable[[], list]
    """() -> [(label, args, kwargs), ...]: the inputs the learner's function is called with."""
    reference: Callable
    """The expected output for a case, from the package (itself tested against the papers)."""
    solution: Callable
    """A short reference solution, in the notebook's own terms (``solution(name)`` shows its source)."""
    hint: str


EXERCISES: dict[str, Exercise] = {}


def declare(name: str, cases: Callable[[], list], reference: Callable, solution: Callable, hint: str) -> None:
    """Register exercise ``name``; its parts in the order of ``Exercise``'s fields."""
    EXERCISES[name] = Exercise(cases, reference, solution, hint)
