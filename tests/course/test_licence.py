"""The course may be reused: a code licence (MIT, as pyproject.toml says), a content licence (CC BY 4.0) for
the text and figures, a CITATION.cff valid against the Citation File Format 1.2.0 schema, and in every notebook
the footer, the Colab and Binder links and the install cell that tools/course_links.py writes from CITATION.cff.

tests/data/citation-cff-1.2.0.schema.json is the format's own schema, as the ``cffconvert`` 2.0.0 wheel ships it
(``cffconvert/schemas/1.2.0/schema.json``, https://citation-file-format.github.io/1.2.0/schema.json)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jsonschema
import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import course_links  # noqa: E402

PYPROJECT = (ROOT / "pyproject.toml").read_text()  # read as text: tomllib needs Python 3.11
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
SCHEMA = json.loads((ROOT / "tests" / "data" / "citation-cff-1.2.0.schema.json").read_text())


def _citation() -> dict:
    # CFF dates are YAML dates; the schema wants the text, as cffconvert reads it.
    return yaml.load((ROOT / "CITATION.cff").read_text(), Loader=yaml.BaseLoader)


def test_citation_cff_is_valid_cff_1_2_0():
    cff = _citation()
    jsonschema.validate(cff, SCHEMA)
    assert cff["cff-version"] == "1.2.0"
    assert f'\nversion = "{cff["version"]}"\n' in PYPROJECT


def test_the_schema_rejects_what_cff_forbids():
    """The check has teeth: a CFF without authors, or with a field the format does not know, fails."""
    cff = _citation()
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({k: v for k, v in cff.items() if k != "authors"}, SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**cff, "licence": "MIT"}, SCHEMA)


def test_the_code_licence_is_mit_everywhere_it_is_named():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n") and "Permission is hereby granted, free of charge" in text
    assert '\nlicense = { text = "MIT" }\n' in PYPROJECT
    assert _citation()["license"] == "MIT"


def test_the_content_licence_is_cc_by_4_0_with_its_legal_code():
    text = (ROOT / "LICENSE-CONTENT").read_text()
    assert "https://creativecommons.org/licenses/by/4.0/" in text
    assert "Creative Commons Attribution 4.0 International Public License" in text
    # the legal code's ten sections end with its last paragraph
    assert "Section 8 -- Interpretation." in text and text.rstrip().endswith("creativecommons.org.")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_ends_with_the_licence_footer(path):
    last = nbformat.read(path, as_version=4).cells[-1]
    assert last.cell_type == "markdown"
    assert "CC BY 4.0" in last.source and "../LICENSE-CONTENT" in last.source and "../LICENSE)" in last.source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_opens_in_colab_and_binder_from_the_cited_repository(path):
    repo = re.fullmatch(r"https://github\.com/(.+)", _citation()["repository-code"]).group(1)
    nb = nbformat.read(path, as_version=4)
    badge = [ln for ln in nb.cells[0].source.splitlines() if ln.startswith("[Open in Colab](")]
    assert badge, "no Colab and Binder links under the title"
    links = re.findall(r"\]\((https://[^)]+)\)", badge[0])
    assert f"https://colab.research.google.com/github/{repo}/blob/main/notebooks/{path.name}" in links
    assert f"https://mybinder.org/v2/gh/{repo}/HEAD?urlpath=lab/tree/notebooks/{path.name}" in links
    assert "![" not in badge[0], "a badge image from Colab or Binder is a broken picture offline: use a text link"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert f'"https://github.com/{repo}"' in first_code.source
    assert 'find_spec("grpo_lab") is None' in first_code.source
    assert first_code.outputs == []


def test_the_notebooks_are_up_to_date_with_course_links():
    assert course_links.main(["--check"]) == 0
