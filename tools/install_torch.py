"""Install the right torch build for this machine, before the rest of requirements.txt.

    python tools/install_torch.py --version 2.13.0            # choose, then pip install
    python tools/install_torch.py --version 2.13.0 --print    # only print pip's arguments

PyPI's torch for Linux x86_64 is the CUDA build (several GB of NVIDIA libraries); a laptop without
an NVIDIA GPU wants the CPU build (about 200 MB) from PyTorch's CPU index. So:

- ``--index URL`` (the Makefile's TORCH_INDEX): torch from that index, nothing guessed.
  ``--index https://pypi.org/simple`` forces PyPI's default build.
- ``--wheelhouse DIR``: the build that ``make wheelhouse`` saved there, with no network.
- Linux without an NVIDIA GPU (no ``nvidia-smi``, no ``/proc/driver/nvidia``): the CPU build,
  from PyTorch's CPU index when it answers, else ``torch==VERSION+cpu`` from the indexes and
  folders pip is configured with (a local mirror or wheel folder).
- Anywhere else (an NVIDIA GPU, macOS, Windows): PyPI's default build, which is the right one there.

Standard library only: it runs in a fresh virtual environment, before anything is installed.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

TORCH_VERSION = "2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PYPI = "https://pypi.org/simple"


def has_nvidia_gpu(
    driver_dir: Path = Path("/proc/driver/nvidia"),
    wsl_smi: Path = Path("/usr/lib/wsl/lib/nvidia-smi"),
    which=shutil.which,
) -> bool:
    """An NVIDIA driver is present: its kernel module, or nvidia-smi (on PATH, or where WSL puts it)."""
    return driver_dir.exists() or which("nvidia-smi") is not None or wsl_smi.exists()


def index_reachable(url: str = CPU_INDEX, timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/torch/", timeout=timeout) as r:
            return r.status == 200
    except (OSError, ValueError):
        return False


def pip_args(
    version: str,
    index: str | None = None,
    wheelhouse: str | None = None,
    system: str | None = None,
    gpu: bool | None = None,
    cpu_index_reachable=index_reachable,
) -> tuple[list[str], str]:
    """The arguments after ``pip install`` and one line saying which build and why.

    ``system`` and ``gpu`` default to this machine (tests pass them).
    """
    if index and wheelhouse:
        raise ValueError(f"give --index or --wheelhouse, not both; got {index!r} and {wheelhouse!r}")
    if wheelhouse:
        return [
            "--no-index",
            "--find-links",
            wheelhouse,
            f"torch=={version}",
        ], f"torch {version}: from {wheelhouse}, no network"
    if index:
        return [
            f"torch=={version}",
            "--index-url",
            index,
            "--extra-index-url",
            PYPI,
        ], f"torch {version}: from {index} (TORCH_INDEX)"
    system = system or platform.system()
    if system != "Linux":
        return [f"torch=={version}"], f"torch {version}: PyPI's build for {system}"
    if has_nvidia_gpu() if gpu is None else gpu:
        return [f"torch=={version}"], f"torch {version}: PyPI's default build (CUDA), an NVIDIA GPU was found"
    if cpu_index_reachable():
        return (
            [f"torch=={version}", "--index-url", CPU_INDEX, "--extra-index-url", PYPI],
            f"torch {version}: the CPU build from {CPU_INDEX}, no NVIDIA GPU found",
        )
    return (
        [f"torch=={version}+cpu"],
        (
            f"torch {version}+cpu: no NVIDIA GPU found and {CPU_INDEX} does not answer; "
            "looking in the indexes and folders pip is configured with"
        ),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools/install_torch.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", default=TORCH_VERSION, help=f"torch version (default {TORCH_VERSION})")
    p.add_argument(
        "--index",
        default=os.environ.get("TORCH_INDEX") or None,
        help="install torch from this index (default: $TORCH_INDEX, else chosen for this machine)",
    )
    p.add_argument(
        "--wheelhouse", default=None, help="install from this folder (made by `make wheelhouse`), no network"
    )
    p.add_argument("--print", action="store_true", help="print pip's arguments and install nothing")
    args = p.parse_args(argv)
    if args.wheelhouse and not Path(args.wheelhouse).is_dir():
        p.exit(
            2, f"{p.prog}: error: --wheelhouse: {args.wheelhouse} is not a folder (make one with `make wheelhouse`)\n"
        )
    try:
        pip, why = pip_args(args.version, args.index, args.wheelhouse)
    except ValueError as err:
        p.exit(2, f"{p.prog}: error: {err}\n")
    print(why, file=sys.stderr, flush=True)
    if args.print:
        print(" ".join(pip))
        return 0
    rc = subprocess.call([sys.executable, "-m", "pip", "install", *pip])
    if rc != 0:
        print(
            f"{p.prog}: pip could not install {' '.join(pip)}; choose the build yourself with "
            f"TORCH_INDEX (make) or --index (this script): {CPU_INDEX} for the CPU build, "
            f"{PYPI} for the default one",
            file=sys.stderr,
        )
    return rc


if __name__ == "__main__":
    sys.exit(main())
