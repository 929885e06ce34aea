"""The separate virtual environment with verl 0.9.1 (verl pins transformers < 5.11; the lab needs >= 5.24), made on
first use in .venv-verl/ (git-ignored), and verl's own Hydra composition run inside it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-verl"
_NETWORK = (
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Could not fetch URL",
    "No matching distribution found",
    "Connection refused",
    "Read timed out",
)
_COMPOSE = r"""
import importlib.util, json, os, sys
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
spec = importlib.util.find_spec("verl")
config_dir = os.path.join(os.path.dirname(spec.origin), "trainer", "config")
with initialize_config_dir(config_dir=config_dir, version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=json.loads(sys.argv[1]))
print(json.dumps({"verl_imported": "verl" in sys.modules, "root": os.path.dirname(spec.origin),
                  "config": OmegaConf.to_container(cfg, resolve=False)}))
"""


@pytest.fixture(scope="session")
def verl_python() -> str:
    """The Python of a virtual environment with verl 0.9.1 (no dependencies), hydra-core and omegaconf. Skipped only
    when the package registry cannot be reached."""
    py = VENV / "bin" / "python"
    probe = [str(py), "-c", "import importlib.metadata as m, hydra, omegaconf; assert m.version('verl') == '0.9.1'"]
    if not (py.exists() and subprocess.run(probe, capture_output=True, check=False).returncode == 0):
        steps = [
            [sys.executable, "-m", "venv", str(VENV)],
            [str(py), "-m", "pip", "install", "--quiet", "--no-deps", "verl==0.9.1"],
            [str(py), "-m", "pip", "install", "--quiet", "hydra-core", "omegaconf"],
        ]
        for cmd in steps:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
            if proc.returncode != 0:
                text = proc.stdout + proc.stderr
                if any(s in text for s in _NETWORK):
                    pytest.skip(
                        f"the package registry is unreachable, so verl 0.9.1 cannot be installed: {text.strip()[-300:]}"
                    )
                raise AssertionError(f"{' '.join(cmd)} failed:\n{text[-3000:]}")
        assert subprocess.run(probe, capture_output=True, check=False).returncode == 0
    return str(py)


def compose_verl(python: str, overrides: list[str]) -> subprocess.CompletedProcess:
    """verl's ``ppo_trainer`` config composed with ``overrides`` by Hydra, in the verl environment."""
    return subprocess.run(
        [python, "-c", _COMPOSE, json.dumps(overrides)], capture_output=True, text=True, timeout=300, check=False
    )


def get(cfg: dict, dotted: str) -> object:
    """The value at ``dotted`` (a leading ``+`` dropped) in a composed config; KeyError when absent."""
    for part in dotted.lstrip("+").split("."):
        cfg = cfg[part]
    return cfg
