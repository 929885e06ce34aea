"""Run summaries committed under ``assets/histories`` by the command line, read back for the notebooks."""

from __future__ import annotations

import json

from ..lab.models import ASSETS

HISTORIES = ASSETS / "histories"


def load_history(name: str) -> dict:
    """A run summary committed under ``assets/histories/NAME.json`` by the command line."""
    path = HISTORIES / f"{name}.json"
    if not path.exists():
        available = sorted(p.stem for p in HISTORIES.glob("*.json"))
        raise ValueError(f"name must be one of the committed histories {available}; got {name!r}")
    return json.loads(path.read_text())
