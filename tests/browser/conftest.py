"""Fixtures for the browser tests: one JupyterLab server and one headless Chromium per session.

- Marker ``browser``: registered here, set on every test of the module; ``pytest -m "not browser"``
  leaves them out.
- Chromium or playwright missing: a skip that names ``make browser-deps``; under CI (``CI`` set),
  a failure instead, since CI must never pass by skipping the browser.
- ``GRPO_LAB_PROFILE``: passed to the server and so to its kernels; ``fast`` when unset (nbval
  runs the default profile already, the browser pass only needs the widgets).
- ``GRPO_LAB_BROWSER_TIMEOUT``: seconds one notebook's Run All may take (default 600).
- Screenshots of a failure go to ``runs/browser-failures/<test>/``; the message gives the paths.
- Each notebook's time in the browser is printed, and listed again in the terminal summary.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .jupyterlab_driver import CHROMIUM_ARGS, LabServer, find_chromium

REPO = Path(__file__).resolve().parents[2]
FAILURES = REPO / "runs" / "browser-failures"
RUNTIMES = pytest.StashKey[list]()


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives a real JupyterLab in headless Chromium (make browser-deps)")
    config.stash[RUNTIMES] = []


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    rows = config.stash.get(RUNTIMES, [])
    if not rows:
        return
    terminalreporter.section("browser: notebook runtimes in JupyterLab")
    for name, profile, run_s, slider_s, total_s, outcome in rows:
        terminalreporter.write_line(
            f"{name}: run all {run_s:.1f} s, slider check {slider_s:.1f} s, "
            f"total {total_s:.1f} s (profile {profile}) {outcome}"
        )


def _missing(what: str):
    msg = f"{what}; install the browser and its driver with `make browser-deps`"
    if os.environ.get("CI"):
        pytest.fail(f"browser missing under CI: {msg}", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def chromium_path():
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _missing("Python package playwright is not installed")
    path = find_chromium()
    if path is None:
        where = os.environ.get("GRPO_LAB_CHROMIUM") or "/usr/lib/chromium/chromium and chromium on PATH"
        _missing(f"Chromium not found (looked for {where})")
    return path


@pytest.fixture(scope="session")
def lab_profile():
    return os.environ.get("GRPO_LAB_PROFILE") or "fast"


@pytest.fixture(scope="session")
def run_timeout():
    return float(os.environ.get("GRPO_LAB_BROWSER_TIMEOUT", "600"))


@pytest.fixture(scope="session")
def lab(chromium_path, tmp_path_factory, lab_profile):
    """A JupyterLab server whose root is an empty temporary folder (tests copy notebooks in)."""
    root = tmp_path_factory.mktemp("lab-root")
    state = tmp_path_factory.mktemp("lab-state")
    server = LabServer(root, state, env={"GRPO_LAB_PROFILE": lab_profile})
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def browser_context(chromium_path, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    profile_dir = tmp_path_factory.mktemp("chromium-profile")
    pw = sync_playwright().start()
    try:
        context = pw.chromium.launch_persistent_context(
            str(profile_dir),
            executable_path=chromium_path,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000},
        )
    except Exception as e:
        pw.stop()
        if os.environ.get("CI"):
            pytest.fail(f"browser missing under CI: Chromium at {chromium_path} did not start: {e}", pytrace=False)
        pytest.skip(f"Chromium at {chromium_path} did not start ({e}); see `make browser-deps`")
    yield context
    context.close()
    pw.stop()


@pytest.fixture
def page(browser_context, lab):
    """A fresh tab; afterwards it is closed and every kernel shut down."""
    p = browser_context.new_page()
    p.set_default_timeout(60_000)
    yield p
    try:
        p.close()
    finally:
        lab.shutdown_sessions()


@pytest.fixture
def failure_dir(request):
    """runs/browser-failures/<test>/, emptied first so that it only ever shows this run's failure."""
    name = request.node.name.replace("/", "_").replace("[", "-").replace("]", "")
    folder = FAILURES / name
    shutil.rmtree(folder, ignore_errors=True)
    return folder


@pytest.fixture
def record_runtime(request):
    def record(*row):
        request.config.stash.setdefault(RUNTIMES, []).append(row)

    return record
