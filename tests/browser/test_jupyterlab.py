"""The widgets, seen as a learner sees them: a real JupyterLab in headless Chromium.

nbval proves that the cells run; it cannot see a widget. For each notebook that shows one, this
opens a copy (outputs cleared) in JupyterLab served on 127.0.0.1, runs Run > Run All Cells, waits
for every code cell's execution count (failing at the first traceback), moves the first slider
of the first interactive widget one step with the keyboard, and checks that the plot it drives
came back as a different image. Screenshots of a failure are kept under runs/browser-failures/.

``test_checker_sees_whether_plot_changed`` runs the same check on small notebooks made here: one
whose slider really changes the plot (it must pass) and one whose slider is ignored by the drawing
function (the check must report "plot did not change"), so the check is known to be able to fail;
``test_run_all_fails_fast_on_traceback`` does the same for a cell that raises.

Run: ``GRPO_LAB_PROFILE=fast python -m pytest tests/browser -q -s`` (see conftest.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest

from .jupyterlab_driver import (
    PLOT_DID_NOT_CHANGE,
    BrowserCheckFailed,
    NotebookFailed,
    PlotDidNotChange,
    check_slider_redraws,
    copy_cleared,
    has_widget,
    open_notebook,
    run_all_cells,
    save_failure,
)

pytestmark = pytest.mark.browser

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
WIDGET_NOTEBOOKS = [p for p in sorted(NOTEBOOKS.glob("[0-9]*.ipynb")) if has_widget(p)]


def run_and_move_slider(page, lab, source: Path, failure_dir: Path, timeout: float):
    """Copy ``source`` into the server's folder, run it, move the slider. Returns the timings and
    the slider result; on any failure saves screenshots and raises with their paths."""
    name = source.name
    copy_cleared(source, lab.root / name)
    t0 = time.monotonic()
    try:
        open_notebook(page, lab, name)
        run_s = run_all_cells(page, name, timeout=timeout)
        t1 = time.monotonic()
        result = check_slider_redraws(page, name)
        return run_s, time.monotonic() - t1, time.monotonic() - t0, result
    except BrowserCheckFailed as e:
        e.screenshots = save_failure(page, failure_dir, source.stem)
        if isinstance(e, NotebookFailed):  # a kernel restart or a dropped connection shows in the log
            e.message += f"\nserver log tail:\n{lab.log_tail(1500)}"
        raise
    except Exception as e:  # playwright timeouts and the like: keep the pictures all the same
        shots = save_failure(page, failure_dir, source.stem)
        raise BrowserCheckFailed(
            f"{name}: {type(e).__name__}: {e}\nserver log tail:\n{lab.log_tail(1500)}", shots
        ) from e


def test_widget_notebooks_found():
    assert WIDGET_NOTEBOOKS, f"no notebook under {NOTEBOOKS} shows a widget: the browser test would check nothing"


@pytest.mark.parametrize("notebook", WIDGET_NOTEBOOKS, ids=[p.stem for p in WIDGET_NOTEBOOKS])
def test_slider_redraws_plot(
    notebook, page, lab, lab_profile, run_timeout, failure_dir, record_runtime, record_property
):
    failure = None
    try:
        run_s, slider_s, total_s, result = run_and_move_slider(page, lab, notebook, failure_dir, run_timeout)
    except BrowserCheckFailed as e:
        failure = str(e)
    if failure:
        record_runtime(notebook.stem, lab_profile, float("nan"), float("nan"), float("nan"), "FAILED")
        pytest.fail(failure, pytrace=False)
    record_runtime(notebook.stem, lab_profile, run_s, slider_s, total_s, "ok")
    record_property("run_all_seconds", round(run_s, 1))
    record_property("slider_seconds", round(slider_s, 1))
    print(
        f"\n[browser] {notebook.stem}: run all {run_s:.1f} s, slider {result.description!r} "
        f"{result.readout_before} -> {result.readout_after} redrew in {result.seconds:.1f} s, "
        f"total {total_s:.1f} s (profile {lab_profile})"
    )


# --- the check itself can fail -----------------------------------------------------------------


def _slider_notebook(path: Path, uses_value: bool) -> Path:
    """A notebook with one ``grpo_lab.course.widgets.explore`` slider whose plot depends on it or not."""
    y = "x" if uses_value else "0.5"  # the frozen one ignores the slider and draws the same figure
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import matplotlib.pyplot as plt\nimport ipywidgets as w\nfrom grpo_lab.course import widgets"
        ),
        nbformat.v4.new_code_cell(
            "def draw(x):\n"
            "    fig, ax = plt.subplots(figsize=(4, 2.5))\n"
            f"    ax.plot([0, 1], [0, {y}])\n"
            "    ax.set_ylim(0, 1)\n"
            "    ax.set_title('a line')\n\n"
            "widgets.explore(draw, x=w.FloatSlider(value=0.5, min=0.0, max=1.0, step=0.1, description='x',\n"
            "                                      continuous_update=False))"
        ),
    ]
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize("uses_value", [True, False], ids=["live", "frozen"])
def test_checker_sees_whether_plot_changed(uses_value, page, lab, run_timeout, tmp_path):
    source = _slider_notebook(tmp_path / f"zz_check_{'live' if uses_value else 'frozen'}.ipynb", uses_value)
    shots = tmp_path / "screenshots"  # expected failures: not under runs/browser-failures
    if uses_value:
        *_, result = run_and_move_slider(page, lab, source, shots, run_timeout)
        print(
            f"\n[browser] live control: {result.readout_before} -> {result.readout_after}, "
            f"image changed in {result.seconds:.1f} s"
        )
        return
    t0 = time.monotonic()
    with pytest.raises(PlotDidNotChange) as info:
        run_and_move_slider(page, lab, source, shots, run_timeout)
    message = str(info.value)
    assert PLOT_DID_NOT_CHANGE in message
    assert "screenshots:" in message and info.value.screenshots, "a failure must keep its screenshots"
    assert all(p.exists() for p in info.value.screenshots)
    print(f"\n[browser] frozen control reported in {time.monotonic() - t0:.1f} s: {info.value.message}")


def _code_notebook(path: Path, *sources: str) -> Path:
    """A notebook of code cells, written to ``path``."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
    nbformat.write(nb, path)
    return path


def test_run_all_fails_fast_on_traceback(page, lab, run_timeout, tmp_path):
    source = _code_notebook(tmp_path / "zz_check_raises.ipynb", "x = 1", "1 / 0", "import time\ntime.sleep(600)")
    t0 = time.monotonic()
    with pytest.raises(NotebookFailed, match=r"cell 1 raised(.|\n)*ZeroDivisionError"):
        run_and_move_slider(page, lab, source, tmp_path / "screenshots", run_timeout)
    assert time.monotonic() - t0 < 120, "a traceback must fail the run at once, not at the timeout"


def test_run_all_fails_when_kernel_dies(page, lab, run_timeout, tmp_path):
    """A notebook that stops Run All without a traceback (here its kernel dies) still fails, after
    the one Run All again that ``run_all_cells`` allows a dropped queue."""
    source = _code_notebook(tmp_path / "zz_check_dies.ipynb", "x = 1", "import os\nos._exit(1)", "y = 2")
    with pytest.raises(NotebookFailed, match=r"idle but code cells \[[\d, ]+\] have no execution"):
        run_and_move_slider(page, lab, source, tmp_path / "screenshots", run_timeout)
