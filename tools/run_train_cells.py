"""Run only the cells of the notebooks tagged "setup" and "train-it" (the live training and what it needs), under
the profile the environment sets: how the hf profile's chat model is checked without re-running the rest.

    GRPO_LAB_PROFILE=hf python tools/run_train_cells.py          # every notebook with train-it cells
    GRPO_LAB_PROFILE=hf python tools/run_train_cells.py 03 05    # some, by number

``GRPO_LAB_MODEL`` and ``GRPO_LAB_DATA_DIR`` point the profile at local files (grpo_lab/course/profile.py).
The cells run in a fresh kernel per notebook, in the notebook's folder; nothing is written back, the notebooks
keep their committed outputs. Exit status 1 when a cell fails (its error is printed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
TAGS = ("setup", "train-it")


def tagged_notebooks() -> list[Path]:
    """The notebooks with at least one train-it cell, in order."""
    return [
        p
        for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
        if any("train-it" in c.metadata.get("tags", []) for c in nbformat.read(p, as_version=4).cells)
    ]


def train_cells(path: Path, probe: str | None = None) -> nbformat.NotebookNode:
    """A notebook of ``path``'s code cells tagged setup or train-it, in their order, outputs cleared; ``probe``
    (code) runs after them as one more cell."""
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and set(TAGS) & set(c.metadata.get("tags", []))]
    for c in cells:
        c.outputs, c.execution_count = [], None
    if probe is not None:
        cells.append(nbformat.v4.new_code_cell(probe))
    nb.cells = cells
    return nb


def execute(nb: nbformat.NotebookNode, timeout: float = 1800) -> nbformat.NotebookNode:
    """Run ``nb`` in a fresh kernel that inherits this process's environment (so its profile variables) in the
    notebooks' folder; raises ``CellExecutionError`` on the first failing cell."""
    NotebookClient(nb, timeout=timeout, resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("numbers", nargs="*", help="notebook numbers (default: every notebook with train-it cells)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a cell may run")
    args = parser.parse_args(argv)
    notebooks = tagged_notebooks()
    if args.numbers:
        wanted = {n.zfill(2) for n in args.numbers}
        unknown = wanted - {p.name[:2] for p in notebooks}
        if unknown:
            parser.error(f"numbers must name notebooks with train-it cells, got {sorted(unknown)}")
        notebooks = [p for p in notebooks if p.name[:2] in wanted]
    failed = 0
    for path in notebooks:
        t0 = time.perf_counter()
        try:
            execute(train_cells(path), args.timeout)
            print(f"{path.name}: ok, {time.perf_counter() - t0:.0f} s", flush=True)
        except CellExecutionError as err:
            failed += 1
            print(f"{path.name}: failed after {time.perf_counter() - t0:.0f} s\n{str(err)[-3000:]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
