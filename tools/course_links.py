"""The three things every notebook carries for learners who start elsewhere than a checkout, written from
one place, the repository's address in CITATION.cff (``repository-code``):

- a line of links under the title: "Open in Colab" and "Launch on Binder" for that notebook;
- the first code cell: on Colab (or any Jupyter without the course) it fetches the course and installs it;
  where the course is installed, it does nothing;
- a licence footer as the last cell.

    python tools/course_links.py            # (re)write them in every notebook
    python tools/course_links.py --check    # exit 1, naming the notebooks, when one is out of date

After a fork: set ``repository-code`` in CITATION.cff to the fork's address, then run the first command.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
BRANCH = "main"  # the branch Colab opens

BADGE_START = "[Open in Colab]"
INSTALL_FIRST_LINE = "# On Colab, or any Jupyter without the course: fetch it and install it (about a minute)."
FOOTER_START = "---\n*grpo_lab:"

INSTALL = """{first}
# Where the course is installed (make lab, Binder, a classroom server) this cell does nothing.
import importlib.util, pathlib, subprocess, sys
if importlib.util.find_spec("grpo_lab") is None:
    course = pathlib.Path("grpo_lab-course").resolve()
    if not course.exists():
        subprocess.run(["git", "clone", "--depth", "1", "{url}", str(course)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "-e", str(course), "trl>=1.16,<2"], check=True)
    sys.path.insert(0, str(course))  # this kernel started before the install: show it the package"""

FOOTER = (
    FOOTER_START + " the text and figures of this notebook are under "
    "[CC BY 4.0](https://creativecommons.org/licenses/by/4.0/) ([LICENSE-CONTENT](../LICENSE-CONTENT)); its code "
    "under the [MIT licence](../LICENSE). To cite the course: [CITATION.cff](../CITATION.cff).*"
)


def repository() -> str:
    """``owner/name`` from CITATION.cff's ``repository-code`` (a GitHub address)."""
    url = yaml.safe_load((ROOT / "CITATION.cff").read_text())["repository-code"]
    m = re.fullmatch(r"https://github\.com/([^/\s]+/[^/\s]+?)/?", url)
    if not m:
        raise SystemExit(f"CITATION.cff: repository-code must be https://github.com/OWNER/NAME, got {url!r}")
    return m.group(1)


def links_line(repo: str, notebook: str) -> str:
    colab = f"https://colab.research.google.com/github/{repo}/blob/{BRANCH}/notebooks/{notebook}"
    binder = f"https://mybinder.org/v2/gh/{repo}/HEAD?urlpath=lab/tree/notebooks/{notebook}"
    # Text links, not badge images: an image served by Colab or Binder is a broken picture wherever the
    # course is read offline (a classroom's copy of the site, a laptop on a train).
    return f"{BADGE_START}({colab}) · [Launch on Binder]({binder})"


def apply(nb: nbformat.NotebookNode, repo: str, notebook: str) -> nbformat.NotebookNode:
    """The notebook with its links line, install cell and footer written for ``repo`` (in place)."""
    title = nb.cells[0]
    if title.cell_type != "markdown":
        raise SystemExit(f"notebooks/{notebook}: the first cell must be the title (markdown)")
    lines = title.source.split("\n")
    if len(lines) > 2 and lines[2].startswith((BADGE_START, "[![Open in Colab]")):
        del lines[1:3]  # the links written before, and the blank line above it
    title.source = "\n".join([lines[0], "", links_line(repo, notebook), *lines[1:]])

    source = INSTALL.format(first=INSTALL_FIRST_LINE, url=f"https://github.com/{repo}")
    install = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(INSTALL_FIRST_LINE)]
    if install:
        install[0].source = source
    else:
        cell = nbformat.v4.new_code_cell(source, id="install-course")
        cell.execution_count = 0  # committed as run: on an installed course it prints nothing
        nb.cells.insert(1, cell)

    last = nb.cells[-1]
    if last.cell_type == "markdown" and last.source.startswith(FOOTER_START):
        last.source = FOOTER
    else:
        nb.cells.append(nbformat.v4.new_markdown_cell(FOOTER, id="licence-footer"))
    return nb


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/course_links.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook is out of date")
    args = ap.parse_args(argv)
    repo = repository()
    stale = []
    for path in sorted(NOTEBOOKS.glob("[0-9]*.ipynb")):
        before = path.read_text()
        nb = apply(nbformat.read(path, as_version=4), repo, path.name)
        after = nbformat.writes(nb) + "\n"
        if after != before:
            stale.append(path.name)
            if not args.check:
                path.write_text(after)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}: run python tools/course_links.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
