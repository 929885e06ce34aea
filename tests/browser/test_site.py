"""The course website, read as a learner reads it: built, served on 127.0.0.1, opened in headless Chromium.

``python tools/build_site.py`` builds ``build/site`` from the committed notebooks (once per test run).
Then, in the real browser:

- every notebook page renders its notebook, and every plot the committed notebook holds is an image
  on the page that loaded (as many loaded images as the ``.ipynb`` has image outputs);
- the home page shows the README's pictures, loaded;
- every internal link of every page reached from the home page resolves (the page or file answers
  200, and a ``#fragment`` names an element of the page it points to);
- formulas are typeset: KaTeX elements on every page whose source has math (at least one display
  block per ``$$`` block of the source), no KaTeX error, and no TeX source left as text.

``test_the_checks_catch_a_broken_page`` runs the same checks on a small page made here with a
missing picture, a dead link and untypeset TeX, so each check is known to be able to fail.

Run: ``python -m pytest tests/browser/test_site.py -q -m browser`` (Chromium: ``make browser-deps``;
npm, from Node.js, fetches KaTeX on the first build).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "build" / "site"
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MATH_PAGES = ["docs/formulas.html", "docs/instructors_guide.html"]  # markdown pages with formulas
TEX_LEFT_AS_TEXT = r"\$\$|\\(?:frac|operatorname|mathbb|varepsilon|sum|pi_|big|nabla)"


# --- what the committed sources say the pages must hold (independent of the HTML) ---------------


def image_outputs(path: Path) -> int:
    """The plots a committed notebook shows: its image outputs."""
    nb = json.loads(path.read_text())
    return sum(
        1
        for cell in nb["cells"]
        if cell["cell_type"] == "code"
        for out in cell.get("outputs", [])
        if any(k.startswith("image/") for k in out.get("data", {}))
    )


def display_math_blocks(path: Path) -> int:
    """How many $$ ... $$ blocks the markdown of a notebook (or a .md page) holds."""
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text())
        text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    else:
        text = path.read_text()
    return text.count("$$") // 2


# --- the server and the build ---------------------------------------------------------------------


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test output stays readable
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # a tab closed mid-download is not an error of the site
        pass


def serve(folder: Path):
    """A static server for ``folder`` on 127.0.0.1 and a free port, in a thread; returns (server, base URL)."""
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


@pytest.fixture(scope="module")
def built_site():
    if shutil.which("npm") is None:
        msg = "npm not found (install Node.js 20 or later): the site build fetches KaTeX with it"
        if os.environ.get("CI"):
            pytest.fail(f"site build impossible under CI: {msg}", pytrace=False)
        pytest.skip(msg)
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "build_site.py")],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"tools/build_site.py failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return SITE


@pytest.fixture(scope="module")
def site_url(built_site):
    server, url = serve(built_site)
    yield url
    server.shutdown()


@pytest.fixture
def site_page(browser_context):
    """A fresh tab that records script errors and failed requests."""
    page = browser_context.new_page()
    page.set_default_timeout(60_000)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(f"script error: {err}"))
    page.on("response", lambda r: r.status >= 400 and page.errors.append(f"HTTP {r.status}: {r.url}"))
    yield page
    page.close()


# --- the checks, run in the page ------------------------------------------------------------------

IMAGES_JS = """sel => Array.from(document.querySelectorAll(sel)).map(i => ({
    src: i.currentSrc.slice(0, 80), ok: i.complete && i.naturalWidth > 0}))"""

MATH_JS = """pattern => {
    const re = new RegExp(pattern);
    const left = [];
    const roots = document.querySelectorAll('.jp-RenderedMarkdown, article.md-content__inner');
    for (const root of roots) {
        const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
        for (let n = walk.nextNode(); n; n = walk.nextNode()) {
            if (n.parentElement.closest('.katex, code, pre, script, style')) continue;
            if (re.test(n.textContent)) left.push(n.textContent.trim().slice(0, 80));
        }
    }
    return {katex: document.querySelectorAll('.katex').length,
            display: document.querySelectorAll('.katex-display').length,
            errors: document.querySelectorAll('.katex-error').length, left: left};
}"""

LINKS_JS = """() => ({links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
                     ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id)})"""


def open_page(page, url: str) -> None:
    """Load ``url`` (images included) and give late scripts a moment. Generous timeouts: on a shared
    CPU a page can take long to load, which is not what these tests are about."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.goto(url, wait_until="load", timeout=180_000)
    try:
        page.wait_for_load_state("networkidle", timeout=30_000)
    except PlaywrightTimeout:
        pass  # what must have loaded is checked by the caller


def unloaded_images(page, selector: str = "img") -> tuple[int, list[str]]:
    """(how many images ``selector`` matches, the ones that did not load)."""
    images = page.evaluate(IMAGES_JS, selector)
    return len(images), [i["src"] for i in images if not i["ok"]]


def math_problems(page, min_display: int) -> list[str]:
    m = page.evaluate(MATH_JS, TEX_LEFT_AS_TEXT)
    problems = []
    if m["katex"] == 0:
        problems.append("no formula typeset (no .katex element)")
    if m["display"] < min_display:
        problems.append(f"{m['display']} display formulas typeset, the source has {min_display}")
    if m["errors"]:
        problems.append(f"{m['errors']} KaTeX errors (.katex-error)")
    problems += [f"TeX left as text: {t!r}" for t in m["left"][:5]]
    return problems


def crawl_links(page, start: str) -> tuple[list[str], list[str]]:
    """Visit every HTML page reachable from ``start`` on the same origin; returns (pages, broken links)."""
    origin = urllib.parse.urlsplit(start)[:2]
    seen, todo, ids, links = set(), [start], {}, []
    while todo:
        url = todo.pop()
        if url in seen:
            continue
        seen.add(url)
        open_page(page, url)
        found = page.evaluate(LINKS_JS)
        ids[url] = set(found["ids"])
        for href in found["links"]:
            target, _, fragment = href.partition("#")
            if urllib.parse.urlsplit(target)[:2] != origin:
                continue
            links.append((url, target, fragment))
            if target.endswith((".html", "/")):
                todo.append(target)
    broken = []
    for source, target, fragment in links:
        try:
            with urllib.request.urlopen(target, timeout=120) as r:
                status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
        if status != 200:
            broken.append(f"{source} -> {target}: HTTP {status}")
        elif fragment and target in ids and urllib.parse.unquote(fragment) not in ids[target]:
            broken.append(f"{source} -> {target}#{fragment}: no element with that id")
    return sorted(seen), sorted(set(broken))


# --- the tests ------------------------------------------------------------------------------------


def test_every_notebook_has_a_page_in_the_site(built_site):
    missing = [nb.name for nb in NOTEBOOKS if not (built_site / "notebooks" / f"{nb.stem}.html").exists()]
    assert NOTEBOOKS and not missing, f"notebooks without a page in {built_site}: {missing}"
    leaked = [p.name for p in built_site.rglob("answers*")]
    assert not leaked, f"the instructors' answer key must stay out of the site sent to learners: {leaked}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_page_renders_with_its_plots_and_formulas(notebook, site_url, site_page):
    open_page(site_page, f"{site_url}notebooks/{notebook.stem}.html")
    cells = site_page.locator(".jupyter-wrapper .jp-Cell").count()
    n_cells = len(json.loads(notebook.read_text())["cells"])
    assert cells >= n_cells, f"{notebook.stem}: {cells} cells on the page, the notebook has {n_cells}"
    n_images, broken = unloaded_images(site_page, ".jupyter-wrapper img")
    want = image_outputs(notebook)
    assert n_images >= want > 0, f"{notebook.stem}: {n_images} images on the page, the notebook has {want} plots"
    assert not broken, f"{notebook.stem}: images that did not load: {broken}"
    problems = math_problems(site_page, display_math_blocks(notebook)) if "$" in notebook.read_text() else []
    assert not problems, f"{notebook.stem}: " + "; ".join(problems)
    assert not site_page.errors, f"{notebook.stem}: " + "; ".join(site_page.errors)


def test_home_page_shows_the_readme_pictures(site_url, site_page):
    open_page(site_page, site_url)
    pictures = re.findall(r"!\[[^\]]*\]\((assets/figures/[^)]+)\)", (REPO / "README.md").read_text())
    n_images, broken = unloaded_images(site_page, "article img")
    assert pictures and n_images >= len(pictures), f"home page: {n_images} images, the README has {len(pictures)}"
    assert not broken, f"home page: pictures that did not load: {broken}"
    assert not site_page.errors, "home page: " + "; ".join(site_page.errors)


@pytest.mark.parametrize("page_path", MATH_PAGES)
def test_formulas_are_typeset(page_path, site_url, site_page):
    open_page(site_page, site_url + page_path)
    source = REPO / "docs" / Path(page_path).with_suffix(".md").name
    problems = math_problems(site_page, display_math_blocks(source))
    assert not problems, f"{page_path}: " + "; ".join(problems)


def test_no_broken_internal_link(site_url, site_page):
    pages, broken = crawl_links(site_page, site_url + "index.html")
    expected = {f"{site_url}notebooks/{nb.stem}.html" for nb in NOTEBOOKS} | {
        f"{site_url}docs/{p}.html" for p in ("instructors_guide", "formulas", "ALGORITHMS")
    }
    assert expected <= set(pages), f"pages not reachable from the home page: {sorted(expected - set(pages))}"
    assert not broken, f"broken internal links ({len(broken)}):\n  " + "\n  ".join(broken[:30])


def test_the_checks_catch_a_broken_page(tmp_path, browser_context, site_page):
    """A page with a missing picture, a dead link, a dead anchor and TeX nobody typeset: every check says so."""
    (tmp_path / "index.html").write_text(
        '<article class="md-content__inner"><p>The ratio $$\\frac{a}{b}$$ is not typeset.</p>'
        '<img src="missing.png"><a href="gone.html">dead</a><a href="index.html#nowhere">anchor</a></article>'
    )
    server, url = serve(tmp_path)
    try:
        open_page(site_page, url + "index.html")
        n_images, broken_images = unloaded_images(site_page)
        problems = math_problems(site_page, 1)
        _, broken_links = crawl_links(site_page, url + "index.html")
    finally:
        server.shutdown()
    assert n_images == 1 and broken_images, "a missing picture was not reported"
    assert any("no formula typeset" in p for p in problems), problems
    assert any("TeX left as text" in p for p in problems), problems
    assert any("gone.html: HTTP 404" in b for b in broken_links), broken_links
    assert any("#nowhere: no element" in b for b in broken_links), broken_links
    assert any("HTTP 404" in e for e in site_page.errors), site_page.errors
