"""The instructor's answer key, ``docs/answers.md``, covers the notebooks and its code answers pass.

What counts as an exercise or a question is read from the notebooks, not from the key:

- an exercise: every ``check("name", ...)`` call in a notebook's code (``grpo_lab.course.exercises``), and
  every markdown heading that says "Exercise";
- a prediction or diagnosis: every ``ask("name", ...)`` call;
- an open question: every markdown heading that ends with "?" or says "Question", and every question
  of a notebook's goal (its first cell).

The key has a section per notebook (``## NN · ...``); an exercise's entry is a heading
``### Exercise `name` `` in that section, a question's entry a heading ``### Question: ...`` that contains
the question's text, a prediction's entry a heading ``### Prediction `name` `` whose "**Answer: b.**" passes the
same ``ask`` the learners use. Each entry must say why (a paragraph that starts "**Why"), and each exercise's
``python`` code block, run through the same ``check`` the learners use, must pass. Every exercise and question
the package defines (``exercises.EXERCISES``, ``exercises.QUESTIONS``) must be used by some notebook, and a
notebook that asks a question must show all its choices, word for word.

``test_the_coverage_check_finds_a_missing_entry`` shows the check failing on a key with a gap.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grpo_lab.course import exercises

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ANSWERS = ROOT / "docs" / "answers.md"

CHECK_CALL = re.compile(r"""\bcheck\(\s*["']([A-Za-z0-9_]+)["']""")
ASK_CALL = re.compile(r"""\bask\(\s*["']([A-Za-z0-9_]+)["']""")
ANSWER = re.compile(r"\*\*Answer: ([a-e](?:, [a-e])*)\.?\*\*")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)
CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _normalise(text: str) -> str:
    """Lower case, markup and quotes dropped, spaces collapsed: how a question is matched."""
    text = re.sub(r"[*_`\"()]", "", text)
    return re.sub(r"\s+", " ", text).strip().lower()


def notebook_items(nb: dict) -> tuple[list[str], list[str]]:
    """(exercise names, questions) of one notebook, in order."""
    names, questions = [], []
    for i, cell in enumerate(nb["cells"]):
        source = _text(cell["source"])
        if cell["cell_type"] == "code":
            names += [n for n in CHECK_CALL.findall(source) if n not in names]
            continue
        for heading in HEADING.findall(source):
            if re.search(r"\bexercise\b", heading, re.IGNORECASE):
                raise AssertionError(f"an 'Exercise' heading without a check(...) call is not handled: {heading!r}")
            if heading.endswith("?") or re.search(r"\bquestion\b", heading, re.IGNORECASE):
                questions.append(heading)
        if i == 0:  # the goal's own question, e.g. "...: do wrong answers really grow longer under GRPO?"
            body = re.sub(r"\]\([^)\s]*\)", "]", HEADING.sub(" ", source)).replace("*", "")  # a link's URL asks nothing
            questions += [q.strip() for q in re.findall(r"([^.:!?\n]+(?:\n[^.:!?\n]+)*\?)", body)]
    return names, questions


def notebook_predictions(nb: dict) -> list[str]:
    """The names of the ``ask("name", ...)`` predictions and diagnoses of one notebook, in order."""
    names: list[str] = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            names += [n for n in ASK_CALL.findall(_text(cell["source"])) if n not in names]
    return names


def key_sections(markdown: str) -> dict[str, str]:
    """The key's text per notebook number ("00" ... "10")."""
    parts = re.split(r"^## (\d\d) ", markdown, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def key_entries(section: str) -> dict[str, str]:
    """Each ``### `` heading of a section and its body."""
    parts = re.split(r"^### (.+)$", section, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def missing_entries(nb_number: str, nb: dict, markdown: str) -> list[str]:
    names, questions = notebook_items(nb)
    entries = key_entries(key_sections(markdown).get(nb_number, ""))
    problems = []
    for name in names:
        if f"Exercise `{name}`" not in entries:
            problems.append(f"exercise {name!r}: no '### Exercise `{name}`' in section {nb_number}")
    for name in notebook_predictions(nb):
        if f"Prediction `{name}`" not in entries:
            problems.append(f"prediction {name!r}: no '### Prediction `{name}`' in section {nb_number}")
    asked = [_normalise(h.removeprefix("Question:")) for h in entries if h.startswith("Question:")]
    for q in questions:
        if not any(_normalise(q) in a for a in asked):
            problems.append(f"question {q!r}: no '### Question: ...' containing it in section {nb_number}")
    for heading, body in entries.items():
        if "**Why" not in body:
            problems.append(f"{nb_number} {heading!r}: no '**Why...**' paragraph")
    return problems


def test_the_notebooks_have_exercises_and_questions():
    names = [n for p in NOTEBOOKS for n in notebook_items(json.loads(p.read_text()))[0]]
    questions = [q for p in NOTEBOOKS for q in notebook_items(json.loads(p.read_text()))[1]]
    predictions = [n for p in NOTEBOOKS for n in notebook_predictions(json.loads(p.read_text()))]
    assert len(NOTEBOOKS) == 11 and len(names) >= 20 and len(predictions) >= 8 and questions, (
        len(NOTEBOOKS),
        names,
        predictions,
        questions,
    )
    assert "why is my loss about zero?" in [_normalise(q) for q in questions]  # the goal of notebook 01


def test_every_package_exercise_is_used_by_a_notebook():
    used = {n for p in NOTEBOOKS for n in notebook_items(json.loads(p.read_text()))[0]}
    assert set(exercises.EXERCISES) == used, (
        f"in exercises.EXERCISES but in no notebook: {sorted(set(exercises.EXERCISES) - used)}; "
        f"checked in a notebook but not defined: {sorted(used - set(exercises.EXERCISES))}"
    )


def test_every_package_question_is_asked_by_a_notebook():
    used = [n for p in NOTEBOOKS for n in notebook_predictions(json.loads(p.read_text()))]
    assert len(used) == len(set(used)) and set(exercises.QUESTIONS) == set(used), (
        f"asked twice: {sorted({n for n in used if used.count(n) > 1})}; in exercises.QUESTIONS but asked by no "
        f"notebook: {sorted(set(exercises.QUESTIONS) - set(used))}; asked but not defined: "
        f"{sorted(set(used) - set(exercises.QUESTIONS))}"
    )


@pytest.mark.parametrize(
    "path", [p for p in NOTEBOOKS if notebook_predictions(json.loads(p.read_text()))], ids=lambda p: p.stem
)
def test_a_notebook_shows_every_choice_of_its_questions(path):
    nb = json.loads(path.read_text())
    shown = _normalise(" ".join(_text(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"))
    for name in notebook_predictions(nb):
        for letter, text in exercises.QUESTIONS[name].choices.items():
            choice = _normalise(f"- **{letter}** {text}")
            assert choice in shown, f"{path.name}: {name} choice {letter} {text!r} is not shown"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_exercise_and_question_has_an_answer(path):
    problems = missing_entries(path.name[:2], json.loads(path.read_text()), ANSWERS.read_text())
    assert not problems, f"{path.name}: docs/answers.md lacks:\n  " + "\n  ".join(problems)


def _key_entries(kind: str):
    """(name, body) of every ``### {kind} `name` `` entry of the key, as test parameters."""
    for number, section in key_sections(ANSWERS.read_text()).items():
        for heading, body in key_entries(section).items():
            m = re.fullmatch(kind + r" `(\w+)`", heading)
            if m:
                yield pytest.param(m.group(1), body, id=f"{number}-{m.group(1)}")


@pytest.mark.parametrize("name, body", list(_key_entries("Exercise")))
def test_each_answer_passes_the_learners_check(name, body):
    blocks = CODE_BLOCK.findall(body)
    assert len(blocks) == 1, f"answer to {name!r}: expected one ```python block, found {len(blocks)}"
    namespace: dict = {}
    exec(compile(blocks[0], f"docs/answers.md:{name}", "exec"), namespace)  # noqa: S102 (the key's own code)
    functions = [v for k, v in namespace.items() if k.startswith("my_") and callable(v)]
    assert len(functions) == 1, f"answer to {name!r}: expected one function named my_..., found {len(functions)}"
    result = exercises.check(name, functions[0])
    assert result.ok, f"the answer key's {name!r} fails the learners' check: {result!r}"


@pytest.mark.parametrize("name, body", list(_key_entries("Prediction")))
def test_each_prediction_answer_passes_the_learners_ask(name, body):
    found = ANSWER.findall(body)
    assert len(found) == 1, f"answer to {name!r}: expected one '**Answer: b.**', found {found}"
    result = exercises.ask(name, found[0])
    assert result.ok, f"the answer key's {name!r} fails the learners' ask: {result!r}"


def test_the_coverage_check_finds_a_missing_entry():
    nb = {
        "cells": [
            {"cell_type": "markdown", "source": "# 99 · x\n\n**Goal.** Look at it: does the loss fall?"},
            {"cell_type": "markdown", "source": "## Why is it zero?"},
            {"cell_type": "code", "source": 'check("k3", my_k3)\ncheck("gae", my_gae)', "outputs": []},
        ]
    }
    full = (
        "## 99 · x\n\n### Exercise `k3`\n\n**Why.** a\n\n### Exercise `gae`\n\n**Why.** b\n\n"
        "### Question: Why is it zero?\n\n**Why.** c\n\n### Question: does the loss fall?\n\n**Why.** d\n"
    )
    assert missing_entries("99", nb, full) == []
    assert missing_entries("99", nb, full.replace("### Exercise `gae`", "### Exercise `gea`")) == [
        "exercise 'gae': no '### Exercise `gae`' in section 99"
    ]
    gap = missing_entries("99", nb, full.replace("### Question: does the loss fall?", "### Question: other"))
    assert gap == ["question 'does the loss fall?': no '### Question: ...' containing it in section 99"]
    assert missing_entries("99", nb, full.replace("**Why.** c", "c")) == [
        "99 'Question: Why is it zero?': no '**Why...**' paragraph"
    ]
    assert missing_entries("98", nb, full) != []  # the entries must sit in the notebook's own section
    nb["cells"].append({"cell_type": "code", "source": 'ask("std_scale", my_answer)', "outputs": []})
    assert missing_entries("99", nb, full) == ["prediction 'std_scale': no '### Prediction `std_scale`' in section 99"]
    assert missing_entries("99", nb, full + "\n### Prediction `std_scale`\n\n**Answer: c.**\n\n**Why.** e\n") == []
