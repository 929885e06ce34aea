"""The course says only what it shows.

Every decimal number or percentage in a notebook's markdown must be computed by that notebook: it
appears (possibly with more digits, or as a fraction for a percentage) in a code cell or an output
of the same notebook. The exception is a cited constant: a sentence that names its source, a paper
as "Author et al. YEAR" / "Author YEAR", or the math sheet, "ALGORITHMS.md".

And no word of how the project organises its work reaches a learner: no issue numbers, "targets"
or "helpers" in the notebooks, the README or the docs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# 0.453, 24.2%, 5% (a bare integer is not checked: step counts, G, years and list numbers are too
# many to be useful; every claim with a decimal or a percentage is).
MD_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s?%|(?<![\w.])(\d*\.\d+)(?![\w.]*\d)")
ANY_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
CITATION = re.compile(r"[A-Z][A-Za-z'-]+(?: et al\.?)?,? \(?(?:19|20)\d\d|ALGORITHMS\.md")
# A software version is not a measurement: "TRL 1.16", "verl 0.9.1", "TRL `GRPOConfig` (1.16)".
VERSION = re.compile(r"(?:TRL|verl|torch|PyTorch|transformers|Python|vLLM)[^\d\n]{0,20}?\d+\.\d+(?:\.\d+)*")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(*`$])|\n\s*\n|\n(?=\s*[-|#*])")


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _computed_text(nb: dict) -> str:
    """The code and every text output of a notebook (images excluded)."""
    parts = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        parts.append(_text(cell["source"]))
        for out in cell.get("outputs", []):
            if "text" in out:
                parts.append(_text(out["text"]))
            for key in ("text/plain", "text/html", "text/markdown"):
                if key in out.get("data", {}):
                    parts.append(_text(out["data"][key]))
            if "evalue" in out:
                parts.append(str(out["evalue"]))
    return "\n".join(parts)


def _strip_markup(md: str) -> str:
    md = re.sub(r"<!--.*?-->", " ", md, flags=re.S)  # comments
    md = re.sub(r"\]\([^)]*\)", "]", md)  # link targets (file names, arXiv ids)
    md = re.sub(r"!\[[^\]]*\]", " ", md)  # image alt text
    return md


def _computed_values(text: str) -> list[tuple[str, float]]:
    values = []
    for m in ANY_NUMBER.finditer(text):
        try:
            values.append((m.group(0), float(m.group(0))))
        except ValueError:
            continue
    return values


def _is_shown(number: str, percent: bool, computed: list[tuple[str, float]]) -> bool:
    """True when some computed number, rounded to the quoted digits, reads as ``number``."""
    quoted = float(number)
    digits = len(number.split(".")[1]) if "." in number else 0
    for _, v in computed:
        candidates = (abs(v), abs(v) * 100) if percent else (abs(v),)
        for c in candidates:
            if round(c, digits) == round(quoted, digits) or f"{c:.{digits}f}" == f"{quoted:.{digits}f}":
                return True
    return False


def unshown_numbers(nb: dict) -> list[str]:
    """The decimal numbers and percentages of ``nb``'s markdown that nothing in it computes or cites."""
    computed = _computed_values(_computed_text(nb))
    problems = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        md = _strip_markup(_text(cell["source"]))
        for sentence in SENTENCE_END.split(md):
            if CITATION.search(sentence):
                continue
            sentence = VERSION.sub(" ", sentence)
            # Inside LaTeX only constants of the formula itself appear ($1 \pm 0.2$ is checked like prose).
            for m in MD_NUMBER.finditer(sentence):
                number, percent = (m.group(1), True) if m.group(1) else (m.group(2), False)
                if not _is_shown(number, percent, computed):
                    shown = sentence.strip().replace("\n", " ")
                    problems.append(f"cell [{i}]: {m.group(0).strip()!r} in: {shown[:160]}")
    return problems


def test_the_number_check_catches_an_unshown_number_and_passes_a_shown_or_cited_one():
    def nb(md, code="", out=""):
        outputs = [{"output_type": "stream", "name": "stdout", "text": out}] if out else []
        return {"cells": [{"cell_type": "markdown", "source": md},
                          {"cell_type": "code", "source": code, "outputs": outputs}]}  # fmt: skip

    assert unshown_numbers(nb("Accuracy rose to 0.55.", out="accuracy 0.453\n")) == [
        "cell [0]: '0.55' in: Accuracy rose to 0.55."
    ]
    assert unshown_numbers(nb("Accuracy rose to 0.45.", out="accuracy 0.453\n")) == []
    assert unshown_numbers(nb("GSPO clips 24.2% of tokens.", out="clip frac 0.2417\n")) == []
    assert unshown_numbers(nb("GSPO clips 30% of tokens.", out="clip frac 0.2417\n")) != []
    assert unshown_numbers(nb("DAPO's upper clip is 0.28 (Yu et al. 2025).")) == []
    assert unshown_numbers(nb("k3's std/KL is 1.42 (Schulman 2020).")) == []
    assert unshown_numbers(nb("Checked against TRL 1.16 and verl 0.9.1.")) == []
    assert (
        unshown_numbers(nb("The clip range is `clip_high=0.28`.", code="a = PRESETS['dapo'].clip_high  # 0.28")) == []
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_number_in_the_prose_is_computed_or_cited(path):
    problems = unshown_numbers(json.loads(path.read_text()))
    assert not problems, (
        f"{path.name}: numbers in markdown that no code or output of the notebook shows, and no source is cited "
        f"for (print it from a code cell, or name the paper in the same sentence):\n  " + "\n  ".join(problems)
    )


# --- words of the project's own process ------------------------------------------------------

PROCESS_WORDS = re.compile(
    r"\bissues? ?#?\d+|\bthe issue(?:'s)?\b|\bhelpers?\b|\btargets?\b|\bfiled\b|\bsession \d+|\bTODO\b",
    re.IGNORECASE,
)
# "target" in its technical senses: a KL target, a return or value target, an estimator that targets a KL.
TECHNICAL_TARGET = re.compile(
    r"KL[ _]target|target[ _]KL|target_kl|kl_target|return targets?|value targets?|"
    r"targets? (?:the|a) (?:reverse|forward)|"
    r"(?:its|the) target\b(?= (?:KL|of)|[,.)])|Target: KL|target \d",
    re.IGNORECASE,
)


def _product_texts():
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        for i, cell in enumerate(nb["cells"]):
            yield f"{path.name} cell [{i}]", _text(cell["source"])
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]:
        yield path.relative_to(ROOT).as_posix(), path.read_text()


def process_words(label: str, text: str) -> list[str]:
    cleaned = TECHNICAL_TARGET.sub(" ", text)
    return [f"{label}: {m.group(0)!r} in ...{cleaned[max(0, m.start() - 50): m.end() + 50]!r}..."
            for m in PROCESS_WORDS.finditer(cleaned)]  # fmt: skip


def test_the_process_word_check_catches_issue_talk_and_spares_the_kl_target():
    assert process_words("x", "as issue 3 found, the targets were met") != []
    assert process_words("x", "the helpers compute it") != []
    assert process_words("x", "the adaptive controller moves beta toward the KL target") == []


def test_no_word_of_the_project_process_reaches_the_learner():
    problems = [p for label, text in _product_texts() for p in process_words(label, text)]
    assert not problems, "words of how the project is run, in the product:\n  " + "\n  ".join(problems)
