"""Save the README's picture of each notebook: the image output of its cell tagged ``readme-figure``.

    python tools/export_figures.py        # after `make execute-notebooks`
"""

import base64
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    out = ROOT / "assets" / "figures"
    out.mkdir(parents=True, exist_ok=True)
    missing = []
    for path in sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        images = [
            o["data"]["image/png"]
            for c in nb.cells
            if c.cell_type == "code" and "readme-figure" in c.metadata.get("tags", [])
            for o in c.get("outputs", [])
            if "image/png" in o.get("data", {})
        ]
        if not images:
            missing.append(path.name)
            continue
        (out / f"{path.stem}.png").write_bytes(base64.b64decode(images[-1]))
    if missing:
        print(f"no executed cell tagged readme-figure in: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
