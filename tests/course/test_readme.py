"""The README is a front page: short, each section once, every link to a file that is there; and each docs
page it sends a reader to is on the course website too (in ``mkdocs.yml``'s nav, and staged by
``tools/build_site.py``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_BYTES = 12 * 1024
# The pages the README sends readers to, each link checked from the folder of the page that holds it.
PAGES = [
    README,
    *(ROOT / "docs" / name for name in ("setup.md", "cli.md", "promises.md", "package.md", "model_and_task.md")),
]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _visible(text: str) -> str:
    """The markdown a reader sees: no HTML comments, no fenced code blocks."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.S | re.M)


def headings(text: str) -> list[str]:
    return [line.strip() for line in _visible(text).splitlines() if re.match(r"#{1,6} ", line)]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and the site's table of contents both write it."""
    text = heading.lstrip("#").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def relative_links(text: str) -> list[str]:
    return [t for t in LINK.findall(_visible(text)) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_the_readme_is_at_most_12_kb():
    size = len(README.read_bytes())
    assert size <= MAX_BYTES, f"README.md is {size} bytes, more than {MAX_BYTES}: move detail to a page of docs/"


def test_no_readme_heading_appears_twice():
    seen = headings(README.read_text())
    repeated = sorted({h for h in seen if seen.count(h) > 1})
    assert not repeated, f"README.md repeats these headings: {repeated}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves_to_a_file_and_its_anchor(page):
    links = relative_links(page.read_text())
    assert links or page is not README, "README.md has no link: the reader has nowhere to go"
    for target in links:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.is_file(), f"{page.name}: the link {target!r} points to no file"
        if anchor and file.suffix == ".md":
            anchors = {slug(h) for h in headings(file.read_text())}
            assert anchor in anchors, f"{page.name}: {target!r}: no heading with anchor #{anchor} in {file.name}"


def test_the_checks_can_fail():
    text = "# a\n## b\n<!-- [x](nowhere.md) -->\n```\n## b\n```\n## b\n[y](gone.md#z)\n"
    assert headings(text) == ["# a", "## b", "## b"]
    assert relative_links(text) == ["gone.md#z"]
    assert slug("## Speed: `bench`") == "speed-bench" and slug("## What the lab learns") == "what-the-lab-learns"


def _nav_pages(nav: list) -> list[str]:
    out = []
    for item in nav:
        for value in item.values() if isinstance(item, dict) else [item]:
            out += _nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_every_docs_page_is_on_the_website_but_the_answer_key():
    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    missing = [p for p in nav if not (ROOT / p).is_file() and p != "index.md"]
    assert not missing, f"mkdocs.yml's nav names pages that are not there: {missing}"
    sys.path.insert(0, str(ROOT / "tools"))
    import build_site

    pages = {f"docs/{p.name}" for p in build_site.docs_pages()}
    assert "docs/answers.md" not in pages  # the answer key stays off the site meant for learners
    assert pages == {p for p in nav if p.startswith("docs/")}, "each page of docs/ staged and in the nav, once"
    linked = {
        f"docs/{Path(t.partition('#')[0]).name}" for t in relative_links(README.read_text()) if t.startswith("docs/")
    }
    assert linked <= pages, f"the README links pages the website lacks: {sorted(linked - pages)}"
