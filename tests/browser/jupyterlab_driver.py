"""Drive a real JupyterLab in headless Chromium: run a notebook's cells, move a widget's slider,
and tell whether the plot it drives was drawn again with a different image.

Used by ``test_jupyterlab.py``; kept apart so that the checks return or raise results a test can
assert on (the negative test runs the same check on a notebook whose slider changes nothing).

- ``find_chromium()``: the Chromium binary (Debian's ``chromium`` package), or None.
- ``LabServer``: a JupyterLab on 127.0.0.1 with a random token, a throw-away settings folder (no
  news prompt, no toasts, ``windowingMode: none`` so every cell stays on the page), its own
  process group, stopped by that group's id.
- ``copy_cleared(src, dst)``: a copy of a notebook without outputs and execution counts, so that
  "every cell has an execution count" means "every cell ran here", and the source is never
  rewritten.
- ``open_notebook``, ``run_all_cells``, ``check_slider_redraws``, ``save_failure``.

Failures raise ``BrowserCheckFailed`` (an AssertionError) or one of its kinds: ``NotebookFailed``
(a traceback, cells left unrun, a timeout) and ``PlotDidNotChange``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

# Debian's /usr/bin/chromium is a shell wrapper; the binary proper lives under /usr/lib.
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/lib/chromium-browser/chromium-browser")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

PLOT_DID_NOT_CHANGE = "plot did not change"


class BrowserCheckFailed(AssertionError):
    """A browser check failed; ``screenshots`` lists what was saved for it."""

    def __init__(self, message: str, screenshots: list[Path] | None = None):
        super().__init__(message)
        self.message = message
        self.screenshots = list(screenshots or [])

    def __str__(self) -> str:
        if not self.screenshots:
            return self.message
        return f"{self.message}\nscreenshots: " + ", ".join(str(p) for p in self.screenshots)


class NotebookFailed(BrowserCheckFailed):
    """Run All did not finish: a traceback, cells left without an execution count, or a timeout."""


class PlotDidNotChange(BrowserCheckFailed):
    """The slider moved but the image in its output area stayed the same (or never came back)."""


def find_chromium() -> str | None:
    """The Chromium binary: ``$GRPO_LAB_CHROMIUM``, Debian's path, or ``chromium`` on PATH."""
    env = os.environ.get("GRPO_LAB_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for path in CHROMIUM_CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


class LabServer:
    """``with LabServer(root, env) as lab:`` JupyterLab serving ``root`` on 127.0.0.1.

    ``env`` adds to the server's environment (and so to its kernels'), e.g. GRPO_LAB_PROFILE.
    """

    def __init__(self, root: Path, state_dir: Path, env: dict[str, str] | None = None, start_timeout: float = 120):
        self.root = Path(root)
        self.state_dir = Path(state_dir)
        self.extra_env = dict(env or {})
        self.start_timeout = start_timeout
        self.token = secrets.token_hex(24)
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.state_dir / "jupyterlab.log"
        self.proc: subprocess.Popen | None = None

    def _settings(self) -> Path:
        settings = self.state_dir / "lab-settings"
        _write_json(
            settings / "@jupyterlab/apputils-extension/notification.jupyterlab-settings",
            {"fetchNews": "false", "checkForUpdates": False, "doNotDisturbMode": True},
        )
        _write_json(
            settings / "@jupyterlab/notebook-extension/tracker.jupyterlab-settings",
            {"windowingMode": "none", "autoStartDefaultKernel": True},
        )
        _write_json(settings / "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings", {"autosave": False})
        return settings

    def start(self) -> LabServer:
        env = {**os.environ, **self.extra_env}
        env["JUPYTERLAB_SETTINGS_DIR"] = str(self._settings())
        env["JUPYTERLAB_WORKSPACES_DIR"] = str(self.state_dir / "workspaces")
        env["JUPYTER_RUNTIME_DIR"] = str(self.state_dir / "runtime")
        env["JUPYTER_CONFIG_DIR"] = str(self.state_dir / "config")
        env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
        cmd = [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")
        # Its own process group (session): stop() ends the server and its kernels by that id.
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            try:
                self.api("GET", "/api/status")
                return self
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"JupyterLab did not answer within {self.start_timeout:.0f} s; log:\n{self.log_tail()}")

    def api(self, method: str, path: str):
        req = urllib.request.Request(
            self.base_url + path, method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def shutdown_sessions(self) -> None:
        """Shut down every kernel session, so a finished notebook stops using CPU and memory."""
        try:
            for session in self.api("GET", "/api/sessions") or []:
                self.api("DELETE", f"/api/sessions/{session['id']}")
        except (urllib.error.URLError, OSError):
            pass

    def url(self, notebook: str) -> str:
        # ?reset: an empty workspace, so no earlier notebook's tab is restored beside this one.
        return f"{self.base_url}/lab/tree/{notebook}?reset&token={self.token}"

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = self.proc.pid  # start_new_session: the group id is the server's pid
        for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # Kernels are in the same group: make sure none outlives the server.
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self) -> LabServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def copy_cleared(src: Path, dst: Path) -> Path:
    """Copy a notebook without outputs, execution counts or saved widget state."""
    nb = json.loads(Path(src).read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    nb.get("metadata", {}).pop("widgets", None)
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    Path(dst).write_text(json.dumps(nb, indent=1))
    return Path(dst)


WIDGET_SOURCE = re.compile(r"\bipywidgets\b|\bwidgets\.\w+\(|\binteractive?\(")
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def has_widget(path: Path) -> bool:
    """Whether a notebook shows a widget: its code builds one, or its saved outputs hold one."""
    nb = json.loads(Path(path).read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        if WIDGET_SOURCE.search("".join(cell["source"])):
            return True
        if any(WIDGET_MIME in out.get("data", {}) for out in cell.get("outputs", [])):
            return True
    return False


# --- in the page ------------------------------------------------------------------------------

PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
IDLE = f'{PANEL} .jp-Notebook-ExecutionIndicator[data-status="idle"]'

# One poll of the notebook: each code cell's prompt, and any traceback text in an output.
_CELL_STATE_JS = """(panel) => {
  const root = document.querySelector(panel);
  if (!root) return null;
  const cells = [...root.querySelectorAll('.jp-Notebook .jp-CodeCell')];
  const prompts = cells.map(c => {
    const p = c.querySelector('.jp-InputArea-prompt');
    return p ? p.textContent.trim() : '';
  });
  const tracebacks = [];
  cells.forEach((c, i) => {
    for (const o of c.querySelectorAll('.jp-OutputArea-output')) {
      const t = o.textContent || '';
      if (/Traceback \\(most recent call last\\)/.test(t) || o.getAttribute('data-mime-type') === 'application/vnd.jupyter.error') {
        tracebacks.push({cell: i, text: t.slice(-1500)});
      }
    }
  });
  const ind = root.querySelector('.jp-Notebook-ExecutionIndicator');
  return {prompts, tracebacks, status: ind ? ind.getAttribute('data-status') : null};
}"""


def open_notebook(page, lab: LabServer, notebook: str, timeout: float = 120) -> None:
    """Load JupyterLab on ``notebook`` and wait for its kernel's idle indicator."""
    page.goto(lab.url(notebook), wait_until="domcontentloaded", timeout=timeout * 1000)
    page.wait_for_selector(f"{PANEL} .jp-Notebook .jp-Cell", timeout=timeout * 1000)
    deadline = time.monotonic() + timeout
    while True:
        # A "Select Kernel" dialog (should autoStartDefaultKernel not apply): take the preferred one.
        accept = page.locator(".jp-Dialog .jp-mod-accept")
        if accept.count():
            accept.first.click()
        if page.locator(IDLE).count() and not page.locator(".jp-Dialog").count():
            return
        if time.monotonic() > deadline:
            raise NotebookFailed(f"{notebook}: the kernel never showed idle within {timeout:.0f} s")
        time.sleep(0.25)


def _click_menu(page, menu: str, item: str) -> None:
    page.locator(".lm-MenuBar-item", has_text=re.compile(rf"^{re.escape(menu)}$")).first.click()
    entry = page.locator(
        ".lm-Menu .lm-Menu-item:not(.lm-mod-disabled) .lm-Menu-itemLabel", has_text=re.compile(rf"^{re.escape(item)}$")
    ).first
    entry.wait_for(state="visible")
    time.sleep(0.5)  # let the menu finish opening
    entry.click()


def run_all_cells(page, notebook: str, timeout: float = 600, reissues: int = 1) -> float:
    """Run > Run All Cells, then wait until every code cell has an execution count.

    Returns the seconds it took. Raises ``NotebookFailed`` at the first traceback, if the kernel goes
    idle with cells left unrun (after ``reissues`` more Run Alls), or after ``timeout``.
    """
    start = time.monotonic()
    _start_run_all(page, notebook)
    idle_unfinished_since = None
    state = None
    while True:
        elapsed = time.monotonic() - start
        state = page.evaluate(_CELL_STATE_JS, PANEL)
        if state is None:
            raise NotebookFailed(f"{notebook}: the notebook panel went away")
        if state["tracebacks"]:
            tb = state["tracebacks"][0]
            raise NotebookFailed(f"{notebook}: cell {tb['cell']} raised after {elapsed:.0f} s:\n{tb['text']}")
        prompts = state["prompts"]
        done = [bool(re.fullmatch(r"\[\d+\]:?", p)) for p in prompts]
        if prompts and all(done):
            return elapsed
        # Run All stops at an error and leaves later cells as [ ]; an idle kernel then means stuck.
        if state["status"] == "idle" and not any("*" in p for p in prompts) and elapsed > 5:
            idle_unfinished_since = idle_unfinished_since or time.monotonic()
            if time.monotonic() - idle_unfinished_since > 10:
                unrun = [i for i, d in enumerate(done) if not d]
                if reissues > 0:
                    # No traceback, yet Run All stopped: its queue was dropped (seen once, on the
                    # first notebook of a cold, loaded server). Running all again is what a learner
                    # would do; a notebook that really stops fails the second time.
                    reissues -= 1
                    print(f"\n[browser] {notebook}: idle with cells {unrun} unrun and no traceback; Run All again")
                    _dismiss_dialogs(page)
                    _start_run_all(page, notebook, before=prompts)
                    idle_unfinished_since = None
                    continue
                raise NotebookFailed(
                    f"{notebook}: the kernel is idle but code cells {unrun} have no execution "
                    f"count after {elapsed:.0f} s (prompts {prompts})"
                )
        else:
            idle_unfinished_since = None
        if elapsed > timeout:
            raise NotebookFailed(f"{notebook}: Run All Cells did not finish within {timeout:.0f} s (prompts {prompts})")
        time.sleep(0.5)


def _dismiss_dialogs(page) -> None:
    """Close a dialog (e.g. "kernel restarting") that would swallow the next menu click."""
    for _ in range(3):
        if not page.locator(".jp-Dialog").count():
            return
        page.keyboard.press("Escape")
        time.sleep(0.5)


def _start_run_all(page, notebook: str, before: list[str] | None = None) -> None:
    """Click Run > Run All Cells until a prompt shows it started: one not ``[ ]``, or, when
    ``before`` (the prompts seen earlier) is given, one that changed."""
    for attempt in range(3):
        _click_menu(page, "Run", "Run All Cells")
        # A click that lands while the menu is still opening does nothing: see a cell start, or retry.
        try:
            page.wait_for_function(
                "([panel, before]) => {"
                " const ps = [...document.querySelectorAll(panel + ' .jp-CodeCell .jp-InputArea-prompt')]"
                "   .map(p => p.textContent.trim());"
                " return before ? ps.some((p, i) => p !== before[i])"
                "               : ps.some(p => !/^\\[ \\]:?$/.test(p)); }",
                arg=[PANEL, before],
                timeout=5_000,
            )
            break
        except Exception:
            page.keyboard.press("Escape")
    else:
        raise NotebookFailed(f"{notebook}: Run > Run All Cells started no cell (tried 3 times)")


@dataclass
class SliderResult:
    description: str
    readout_before: str
    readout_after: str
    seconds: float
    src_before_len: int
    src_after_len: int


# Install a watcher on the output area of the widget, counting <img> elements put in it.
_WATCH_JS = """(out) => {
  out.__grpoImgs = 0;
  if (out.__grpoObserver) out.__grpoObserver.disconnect();
  out.__grpoObserver = new MutationObserver(records => {
    for (const r of records) for (const n of r.addedNodes) {
      if (n.nodeType === 1 && (n.tagName === 'IMG' || n.querySelector('img'))) out.__grpoImgs += 1;
    }
  });
  out.__grpoObserver.observe(out, {childList: true, subtree: true});
}"""

_OUT_STATE_JS = """(out) => {
  const img = out.querySelector('img');
  const tb = [...out.querySelectorAll('.jp-OutputArea-output')].map(o => o.textContent || '')
                 .find(t => /Traceback \\(most recent call last\\)/.test(t));
  return {src: img ? img.getAttribute('src') : null, added: out.__grpoImgs || 0, traceback: tb || null};
}"""


def check_slider_redraws(
    page, label: str, widget_index: int = 0, timeout: float = 120, settle: float = 3.0
) -> SliderResult:
    """Move the first slider of the ``widget_index``-th interactive widget one step right and check
    that the image in its output area is replaced by a different one.

    Raises ``PlotDidNotChange`` (message starts with "plot did not change") when the image is
    redrawn identical, or no new image arrives within ``timeout``; ``BrowserCheckFailed`` when
    there is no such widget, slider or image, or the redraw raised.
    """
    boxes = page.locator(f"{PANEL} .jp-OutputArea-output .widget-interact")
    n = boxes.count()
    if n <= widget_index:
        raise BrowserCheckFailed(f"{label}: expected an interactive widget #{widget_index}, found {n} on the page")
    box = boxes.nth(widget_index)
    box.scroll_into_view_if_needed()
    sliders = box.locator(".widget-slider")
    if sliders.count() == 0:
        raise BrowserCheckFailed(f"{label}: interactive widget #{widget_index} has no slider")
    slider = sliders.first
    handle = slider.locator(".noUi-handle").first
    readout = slider.locator(".widget-readout").first
    description = (slider.locator(".widget-label").first.text_content() or "").strip()
    out = box.locator(".widget-output").last
    try:
        out.locator("img").first.wait_for(state="attached", timeout=timeout * 1000)
    except Exception as e:
        raise BrowserCheckFailed(f"{label}: the widget's output area shows no image ({e})") from e
    out_el = out.element_handle()
    before = out_el.evaluate(_OUT_STATE_JS)
    readout_before = (readout.text_content() or "").strip()
    out_el.evaluate(_WATCH_JS)

    # A slider that starts at its maximum (e.g. G = 16 of 16) can only move left.
    now, top = handle.get_attribute("aria-valuenow"), handle.get_attribute("aria-valuemax")
    key = "ArrowLeft" if now is not None and top is not None and float(now) >= float(top) else "ArrowRight"
    handle.focus()
    page.keyboard.press(key)
    start = time.monotonic()
    try:
        page.wait_for_function(
            "([el, v]) => el.textContent.trim() !== v", arg=[readout.element_handle(), readout_before], timeout=10_000
        )
    except Exception as e:
        raise BrowserCheckFailed(
            f"{label}: slider {description!r} did not move on {key} (readout stayed {readout_before!r})"
        ) from e
    readout_after = (readout.text_content() or "").strip()

    same_since = None
    while True:
        elapsed = time.monotonic() - start
        state = out_el.evaluate(_OUT_STATE_JS)
        if state["traceback"]:
            raise BrowserCheckFailed(
                f"{label}: moving {description!r} raised in the widget:\n{state['traceback'][-1500:]}"
            )
        if state["src"] and state["src"] != before["src"]:
            return SliderResult(
                description, readout_before, readout_after, elapsed, len(before["src"]), len(state["src"])
            )
        # A new <img> arrived with the very same data URL: redrawn, unchanged. Give it a moment
        # (and an idle kernel) in case a second draw is on its way, then say so.
        idle = page.locator(IDLE).count() > 0
        if state["added"] and state["src"] and idle:
            same_since = same_since or time.monotonic()
            if time.monotonic() - same_since > settle:
                raise PlotDidNotChange(
                    f"{label}: {PLOT_DID_NOT_CHANGE}: moving {description!r} {readout_before} -> {readout_after} "
                    f"redrew the image {state['added']} time(s), identical to before"
                )
        else:
            same_since = None
        if elapsed > timeout:
            what = "no new image arrived" if not state["added"] else "the image stayed the same"
            raise PlotDidNotChange(
                f"{label}: {PLOT_DID_NOT_CHANGE} within {timeout:.0f} s of moving "
                f"{description!r} {readout_before} -> {readout_after}: {what}"
            )
        time.sleep(0.25)


def save_failure(page, folder: Path, label: str) -> list[Path]:
    """Screenshots of the page and of each interactive widget, into ``folder``; their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    saved = []
    try:
        path = folder / f"{stem}-page.png"
        page.screenshot(path=str(path), full_page=True, timeout=30_000)
        saved.append(path)
        boxes = page.locator(f"{PANEL} .jp-OutputArea-output .widget-interact")
        for i in range(min(boxes.count(), 5)):
            path = folder / f"{stem}-widget{i}.png"
            boxes.nth(i).screenshot(path=str(path), timeout=30_000)
            saved.append(path)
    except Exception as e:  # a screenshot must not hide the failure it documents
        (folder / f"{stem}-screenshot-error.txt").write_text(repr(e))
    try:
        path = folder / f"{stem}-page.html"
        path.write_text(page.content())
        saved.append(path)
    except Exception:
        pass
    return saved
