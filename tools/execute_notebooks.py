"""Re-execute every notebook in place, timing each, and record the times in
`assets/notebook_runtimes.json` (the README's syllabus quotes them; a test checks it does so exactly).

    python tools/execute_notebooks.py              # all of them
    python tools/execute_notebooks.py 03 05        # some, by number

Time them on a quiet machine: a notebook's runtime is mostly its live training, which shares the CPU
with anything else running.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIMES = ROOT / "assets" / "notebook_runtimes.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("numbers", nargs="*", help="notebook numbers (default: all)")
    args = parser.parse_args(argv)
    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if args.numbers:
        wanted = {n.zfill(2) for n in args.numbers}
        unknown = wanted - {p.name[:2] for p in notebooks}
        if unknown:
            parser.error(f"numbers must name notebooks in notebooks/, got {sorted(unknown)}")
        notebooks = [p for p in notebooks if p.name[:2] in wanted]
    record = json.loads(RUNTIMES.read_text()) if RUNTIMES.exists() else {"seconds": {}}
    record["machine"] = f"{os.cpu_count()} CPU cores, {platform.machine()}, Python {platform.python_version()}"
    record["command"] = "python tools/execute_notebooks.py"
    for nb in notebooks:
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute", "--inplace",
               "--ExecutePreprocessor.timeout=600", str(nb)]
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:
            print(f"{nb.name}: failed", file=sys.stderr)
            return 1
        seconds = time.perf_counter() - t0
        record["seconds"][nb.stem] = round(seconds)
        print(f"{nb.name}: {seconds:.0f} s")
        # After each notebook, so that a failure later keeps the times already measured.
        RUNTIMES.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
