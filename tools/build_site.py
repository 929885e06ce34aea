"""Build the course as a static website: ``python tools/build_site.py`` writes ``build/site/``.

The pages are the committed, executed notebooks (nothing is re-run: the site shows the outputs the
repository holds), the README as the home page with its pictures, and every page of ``docs/`` (the
results, the set-up, the command line, the package, the math, the instructor's guide) except
``docs/answers.md``, the instructor's answer key, kept out on purpose: the site is meant to be sent to
learners. ``mkdocs.yml``'s nav lists each page (``tests/course/test_readme.py`` checks it).

Tools, pinned, installed on first use into ``build/`` (git-ignored), from the package registries:

- ``build/site-env``: a virtual environment with mkdocs, mkdocs-material and mkdocs-jupyter
  (``docs/site/requirements.txt``), reinstalled when that file changes;
- ``build/site-node``: KaTeX from npm (``KATEX_VERSION``), so formulas render with no CDN and the
  site works offline.

Then ``build/site-src`` is staged with the repository's layout (so the README's relative links and
pictures resolve unchanged) and ``mkdocs build --strict`` turns it into ``build/site``; a link to a
page or file that is not in the site fails the build. Open ``build/site/index.html``, or serve the
folder: ``python -m http.server -d build/site``.

Options: ``--python PATH`` (the Python that creates the environment; default this one).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"
ENV = BUILD / "site-env"
NODE = BUILD / "site-node"
SRC = BUILD / "site-src"
SITE = BUILD / "site"
REQUIREMENTS = ROOT / "docs" / "site" / "requirements.txt"
KATEX_VERSION = "0.16.22"
LEGAL = ("LICENSE", "LICENSE-CONTENT", "CITATION.cff")
PRIVATE = {"answers.md"}  # the instructor's answer key: not on a site sent to learners
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = ("[An interactive slider: it moves in JupyterLab, with the notebook running "
               "(`make lab`). The page shows the notebook as it was committed.]")


def run(cmd: list[str], **kw) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kw)


def env_python() -> Path:
    return ENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_env(python: str) -> None:
    """build/site-env with the pinned requirements; reinstalled when docs/site/requirements.txt changes."""
    stamp = ENV / "requirements.sha256"
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if env_python().exists() and stamp.exists() and stamp.read_text() == want:
        return
    if python == sys.executable:
        venv.EnvBuilder(with_pip=True, clear=True).create(ENV)
    else:
        run([python, "-m", "venv", "--clear", ENV])
    run([env_python(), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", REQUIREMENTS])
    stamp.write_text(want)


def ensure_katex() -> Path:
    """KaTeX's dist folder from npm, pinned."""
    dist = NODE / "node_modules" / "katex" / "dist"
    package = NODE / "node_modules" / "katex" / "package.json"
    if package.exists() and json.loads(package.read_text())["version"] == KATEX_VERSION:
        return dist
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("build_site: npm not found; install Node.js (20 or later), which brings npm, to fetch KaTeX")
    NODE.mkdir(parents=True, exist_ok=True)
    run([npm, "install", "--prefix", NODE, "--no-audit", "--no-fund", "--no-save", f"katex@{KATEX_VERSION}"])
    return dist


def stage_notebook(source: Path, target: Path) -> None:
    """Copy a notebook, replacing the text a live widget leaves behind by a sentence for the reader."""
    nb = json.loads(source.read_text())
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_MIME in data:
                out["data"] = {"text/markdown": WIDGET_NOTE}
    nb["metadata"].pop("widgets", None)  # the saved widget state needs a running kernel to mean anything
    target.write_text(json.dumps(nb, indent=1, ensure_ascii=False))


def docs_pages() -> list[Path]:
    """Every page of docs/ but the answer key (``mkdocs.yml``'s nav must list each one)."""
    return sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in PRIVATE)


def stage(katex_dist: Path) -> None:
    """build/site-src in the repository's layout: index.md (the README), notebooks/, docs/, assets/figures/,
    the licences, the citation file and classroom/."""
    shutil.rmtree(SRC, ignore_errors=True)
    (SRC / "notebooks").mkdir(parents=True)
    shutil.copyfile(ROOT / "README.md", SRC / "index.md")
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        stage_notebook(nb, SRC / "notebooks" / nb.name)
    (SRC / "docs").mkdir()
    for page in docs_pages():
        shutil.copyfile(page, SRC / "docs" / page.name)
    shutil.copytree(ROOT / "assets" / "figures", SRC / "assets" / "figures")
    for name in LEGAL:  # each notebook's footer links them: the site carries them too
        shutil.copyfile(ROOT / name, SRC / name)
    shutil.copytree(ROOT / "classroom", SRC / "classroom")  # the README links the JupyterHub set-up
    js = SRC / "javascripts"
    shutil.copytree(katex_dist, js / "katex")
    for name in ("katex-init.js", "extra.css"):
        shutil.copyfile(ROOT / "docs" / "site" / name, js / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the course website into build/site.")
    parser.add_argument("--python", default=sys.executable,
                        help="the Python that creates build/site-env (default: this one)")
    args = parser.parse_args(argv)
    ensure_env(args.python)
    stage(ensure_katex())
    shutil.rmtree(SITE, ignore_errors=True)
    run([env_python(), "-m", "mkdocs", "build", "--strict", "--quiet", "-f", ROOT / "mkdocs.yml"],
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    pages = sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html"))
    print(f"build_site: {len(pages)} pages in {SITE.relative_to(ROOT)}/ (open {SITE.relative_to(ROOT)}/index.html)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
