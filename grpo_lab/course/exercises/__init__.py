"""Self-checking exercises: a learner writes a function, ``check`` compares it with the package;
or predicts an outcome (or diagnoses a run) by letter, and ``ask`` replies to that choice.

    from grpo_lab.course.exercises import ask, check, solution
    def my_group_advantages(rewards, group_size): ...
    check("group_advantages", my_group_advantages)     # says which case failed and why
    solution("group_advantages")                       # the reference answer, when wanted
    ask("rare_success", "a")                           # a typical wrong letter gets its own reply

Every checker runs several cases, including the edge cases that bite (an all-equal group, a
clipped token, padding), and reports the first failure with the input, what was expected, what
came back, and a hint. The exercises are in ``bank_00_04.py`` and ``bank_05_10.py`` (registered in
``bank.py``), the lettered questions in ``questions.py``; this file is what a learner calls.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import bank_00_04, bank_05_10  # noqa: F401  (importing them registers their exercises)
from .bank import EXERCISES, Exercise
from .questions import QUESTIONS, Question, mystery_token_weights

__all__ = [
    "EXERCISES",
    "QUESTIONS",
    "Exercise",
    "Question",
    "Result",
    "ask",
    "check",
    "mystery_token_weights",
    "solution",
]


@dataclass
class Result:
    """What ``check`` found; shows itself as a short verdict in a notebook."""

    name: str
    ok: bool
    passed: int
    total: int
    message: str
    kind: str = "exercise"
    """"exercise" (a function run on cases) or "question" (a letter chosen)."""

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        mark = "PASS" if self.ok else "FAIL"
        if self.kind == "question":
            return f"[{mark}] {self.name}: {self.message}"
        return f"[{mark}] {self.name}: {self.passed}/{self.total} cases. {self.message}"

    def _repr_markdown_(self) -> str:
        icon = "✅" if self.ok else "❌"
        if self.kind == "question":
            return f"{icon} **{self.name}**: {self.message}"
        return f"{icon} **{self.name}**: {self.passed}/{self.total} cases pass. {self.message}"


# Between letters: commas, spaces and the like, and the words people write between choices.
_SEPARATOR = re.compile(r"[\s,;/+&]+")
_JOINING_WORDS = ("and", "or")


def _picked_letters(answer: object) -> set[str] | None:
    """The letters of a learner's answer ("b", "B", "b, c", "(b)", "b.", "b and c", ["b", "c"], "none"),
    or None if unreadable. Letters written together ("bc") are several letters."""
    if isinstance(answer, str):
        text = answer.strip().lower()
        if text in ("none", "-"):
            return set()
        letters: set[str] = set()
        for word in _SEPARATOR.split(text):
            if word in _JOINING_WORDS:
                continue
            word = word.strip("()[].:")  # "(a)", "a.", "a)", "[a]", "a:"
            if not re.fullmatch(r"[a-z]+", word):
                return None
            letters |= set(word)
        return letters or None
    if isinstance(answer, (list, tuple, set, frozenset)) and all(isinstance(x, str) for x in answer):
        return {x.strip().lower() for x in answer}
    return None


def ask(name: str, answer: object) -> Result:
    """Check a prediction or diagnosis: ``answer`` is a letter, or letters when several apply ("bc")."""
    if name not in QUESTIONS:
        raise ValueError(f"name must be one of {', '.join(sorted(QUESTIONS))}; got {name!r}")
    q = QUESTIONS[name]
    letters = ", ".join(sorted(q.choices))
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        where = "replace None with" if answer is None else "write between the quotes"
        return Result(name, False, 0, 1, f"No answer yet: {where} your letter(s), from {letters}.", "question")
    picked = _picked_letters(answer)
    if picked is None or picked - set(q.choices):
        return Result(name, False, 0, 1, f"{answer!r} is not a choice: answer with letters from {letters}.", "question")
    key = "".join(sorted(picked))
    if key == "".join(sorted(q.answer)):
        return Result(name, True, 1, 1, f"Right. {q.why}", "question")
    reply = q.replies.get(key)
    if reply is not None:
        return Result(name, False, 0, 1, f"Not quite. {reply}", "question")
    return Result(name, False, 0, 1, f"Not quite. Hint: {q.hint}", "question")


def _as_tensor(x: object) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to(torch.float64)
    return torch.as_tensor(x, dtype=torch.float64)


def _fail(name: str, i: int, total: int, message: str) -> Result:
    return Result(name, False, i, total, message)


def check(name: str, fn: Callable[..., object]) -> Result:
    """Run exercise ``name`` against ``fn``; the verdict names the first failing case and why."""
    if name not in EXERCISES:
        raise ValueError(f"name must be one of {', '.join(sorted(EXERCISES))}; got {name!r}")
    if not callable(fn):
        raise ValueError(f"fn must be a function, got {type(fn).__name__}")
    cases_fn, reference, _, hint = EXERCISES[name]
    cases = cases_fn()
    n = len(cases)
    for i, (label, args, kwargs) in enumerate(cases):
        expected = _as_tensor(reference(*args, **kwargs))
        try:
            got_raw = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
        except Exception as err:  # the learner's code raised: report it as this case's failure
            return _fail(name, i, n, f"Case '{label}' raised {type(err).__name__}: {err}. Hint: {hint}")
        if got_raw is None:
            return _fail(name, i, n, f"Case '{label}': your function returned None (a missing return?). Hint: {hint}")
        try:
            got = _as_tensor(got_raw)
        except Exception:
            return _fail(name, i, n, f"Case '{label}': could not read {type(got_raw).__name__} as numbers.")
        if got.shape != expected.shape:
            return _fail(
                name,
                i,
                n,
                f"Case '{label}': expected shape {tuple(expected.shape)}, got {tuple(got.shape)}. Hint: {hint}",
            )
        if not torch.isfinite(got).all():
            return _fail(name, i, n, f"Case '{label}': your result has NaN or infinity: {got.tolist()}. Hint: {hint}")
        if not torch.allclose(got, expected, atol=1e-4, rtol=1e-4):
            return _fail(name, i, n, f"Case '{label}': expected {_fmt(expected)}, got {_fmt(got)}. Hint: {hint}")
    return Result(name, True, n, n, "Well done.")


def _fmt(t: torch.Tensor) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in t.flatten().tolist()) + "]"


def solution(name: str) -> str:
    """The reference solution's source, to read when stuck (display it; nothing is printed here)."""
    if name not in EXERCISES:
        raise ValueError(f"name must be one of {', '.join(sorted(EXERCISES))}; got {name!r}")
    return textwrap.dedent(inspect.getsource(EXERCISES[name].solution))
