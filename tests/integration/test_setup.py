"""Set-up: the torch build chosen for the machine, the Makefile's project environment made with the
system Python (externally managed on Debian), installs from a wheelhouse with no index, and the
README's commands for machines without make being the ones the Makefile runs.

The full install is what CI's `make test` itself does; these tests check the paths around it
cheaply: a wheelhouse of two tiny wheels made here, pip with no index and no configuration.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = Path("/usr/bin/python3")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyTorch's install selector, "CPU" row


def _load_install_torch():
    spec = importlib.util.spec_from_file_location("install_torch", ROOT / "tools" / "install_torch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


it = _load_install_torch()


def _unreachable():
    return False


def _reachable():
    return True


# --- which torch build ---------------------------------------------------------------------------


def test_linux_without_gpu_gets_the_cpu_build():
    args, why = it.pip_args("2.13.0", system="Linux", gpu=False, cpu_index_reachable=_reachable)
    assert args[:3] == ["torch==2.13.0", "--index-url", CPU_INDEX] and "CPU build" in why
    # Where PyTorch's index does not answer (a local mirror, as on the course's CI machine), the
    # CPU build by its local version label, so pip cannot fall back to PyPI's CUDA build.
    args, why = it.pip_args("2.13.0", system="Linux", gpu=False, cpu_index_reachable=_unreachable)
    assert args == ["torch==2.13.0+cpu"] and "does not answer" in why


def test_gpu_macos_and_windows_get_pypis_build():
    def never():
        raise AssertionError("the CPU index is only asked about on Linux without a GPU")

    assert it.pip_args("2.13.0", system="Linux", gpu=True, cpu_index_reachable=never)[0] == ["torch==2.13.0"]
    assert it.pip_args("2.13.0", system="Darwin", cpu_index_reachable=never)[0] == ["torch==2.13.0"]
    assert it.pip_args("2.13.0", system="Windows", cpu_index_reachable=never)[0] == ["torch==2.13.0"]


def test_torch_index_and_wheelhouse_override_the_choice():
    args, _ = it.pip_args("2.13.0", index="https://example.org/simple", system="Linux", gpu=False)
    assert args[:3] == ["torch==2.13.0", "--index-url", "https://example.org/simple"]
    args, _ = it.pip_args("2.13.0", wheelhouse="/media/usb/w", system="Linux", gpu=False)
    assert args == ["--no-index", "--find-links", "/media/usb/w", "torch==2.13.0"]
    with pytest.raises(ValueError, match="not both"):
        it.pip_args("2.13.0", index="https://example.org/simple", wheelhouse="/media/usb/w")


def test_gpu_detection(tmp_path):
    absent = tmp_path / "absent"
    assert not it.has_nvidia_gpu(absent, absent, which=lambda name: None)
    assert it.has_nvidia_gpu(tmp_path, absent, which=lambda name: None)  # /proc/driver/nvidia exists
    assert it.has_nvidia_gpu(absent, absent, which=lambda name: "/usr/bin/nvidia-smi")
    wsl = tmp_path / "nvidia-smi"
    wsl.write_text("")
    assert it.has_nvidia_gpu(absent, wsl, which=lambda name: None)


def test_missing_wheelhouse_is_one_clear_line(tmp_path):
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools/install_torch.py"), "--wheelhouse", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "make wheelhouse" in r.stderr


@pytest.mark.skipif(sys.platform != "linux" or it.has_nvidia_gpu(), reason="the CPU choice is for Linux without a GPU")
def test_automatic_choice_resolves_to_a_cpu_wheel_here(tmp_path):
    """What pip would install with the printed arguments, asked of pip itself (nothing installed)."""
    printed = subprocess.run(
        [sys.executable, str(ROOT / "tools/install_torch.py"), "--print"], capture_output=True, text=True, check=True
    ).stdout.split()
    report = tmp_path / "report.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--no-deps",
            "--quiet",
            "--report",
            str(report),
            *printed,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (torch,) = json.loads(report.read_text())["install"]
    assert torch["metadata"]["name"] == "torch"
    assert torch["metadata"]["version"] == f"{it.TORCH_VERSION}+cpu", torch["download_info"]["url"]


# --- the Makefile's environment, made with the system Python -----------------------------------


def _wheel(folder: Path, name: str, version: str, module_source: str) -> Path:
    """A minimal pure-Python wheel (PEP 427), written by hand: no build tool, no network."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": module_source,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    out = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
        z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return out


def _offline_env() -> dict:
    """pip with no configuration (no find-links, no extra index) and an index that cannot answer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_INDEX_URL="http://127.0.0.1:9/simple",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        MAKEFLAGS="",
    )
    return env


def _externally_managed(python: Path) -> bool:
    r = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return r.returncode == 0 and (Path(r.stdout.strip()) / "EXTERNALLY-MANAGED").exists()


needs_system_python = pytest.mark.skipif(
    not (SYSTEM_PYTHON.exists() and shutil.which("make") and _externally_managed(SYSTEM_PYTHON)),
    reason="needs make and an externally managed /usr/bin/python3 (Debian/Ubuntu)",
)


@needs_system_python
def test_make_install_with_the_system_python_from_a_wheelhouse(tmp_path):
    """`make install PYTHON=/usr/bin/python3 WHEELHOUSE=...`: the venv, torch, the requirements, no index."""
    # The system Python itself refuses pip (PEP 668): that is why the Makefile makes .venv.
    refused = subprocess.run(
        [str(SYSTEM_PYTHON), "-m", "pip", "install", "--dry-run", "--no-index", "anything"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stdout + refused.stderr

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "torch", "2.13.0", "__version__ = '2.13.0'  # a stand-in, installed only in this test's venv\n")
    _wheel(wheels, "grpo_lab_probe", "1.0", "OK = True\n")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("grpo_lab_probe==1.0\n")
    venv = tmp_path / "venv"
    r = subprocess.run(
        [
            "make",
            "-C",
            str(ROOT),
            "install",
            f"PYTHON={SYSTEM_PYTHON}",
            f"VENV={venv}",
            f"WHEELHOUSE={wheels}",
            f"REQUIREMENTS={requirements}",
        ],
        capture_output=True,
        text=True,
        env=_offline_env(),
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{SYSTEM_PYTHON} -m venv {venv}" in r.stdout
    cfg = (venv / "pyvenv.cfg").read_text()
    assert re.search(r"^home = /usr/bin$", cfg, re.MULTILINE), cfg
    probe = subprocess.run(
        [
            str(venv / "bin/python"),
            "-c",
            "import sys, torch, grpo_lab_probe; print(sys.prefix, torch.__version__, grpo_lab_probe.OK)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.split() == [str(venv), "2.13.0", "True"]

    # The lab itself into the same environment as requirements.txt's `-e .` puts it, without its
    # dependencies (the full install is CI's `make test`); pip may fetch setuptools to build it.
    r = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "--no-deps", "-e", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    where = subprocess.run(
        [str(venv / "bin/python"), "-c", "import grpo_lab; print(grpo_lab.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.strip()
    assert Path(where) == ROOT / "grpo_lab" / "__init__.py"


@needs_system_python
def test_a_python_without_venv_stops_with_one_line_naming_the_package(tmp_path):
    """Debian without python3-venv has no ensurepip module: shadow it to be that machine."""
    shadow = tmp_path / "shadow" / "ensurepip"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'ensurepip'\")\n")
    venv = tmp_path / "venv"
    r = subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(ROOT),
            "venv",
            f"PYTHON=env PYTHONPATH={shadow.parent} {SYSTEM_PYTHON}",
            f"VENV={venv}",
        ],
        capture_output=True,
        text=True,
        env=_offline_env(),
        check=False,
    )
    assert r.returncode != 0
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 and "python3-venv" in lines[0], r.stdout
    assert not venv.exists()


# --- the commands for machines without make ------------------------------------------------------


def _make_dry_run(venv: Path, *targets: str) -> list[str]:
    """What `make -n` would run where ``venv`` does not exist yet, less the checks that only guard
    (`|| { echo ...; exit 1; }`), with ``venv`` written as .venv."""
    assert not venv.exists()
    r = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(ROOT), *targets, f"VENV={venv}"],
        capture_output=True,
        text=True,
        check=True,
        env={**_offline_env(), "TORCH_INDEX": ""},
    )
    return [
        " ".join(line.split()).replace(str(venv), ".venv")
        for line in r.stdout.splitlines()
        if line.strip() and "|| {" not in line and not line.startswith("touch ")
    ]


@pytest.mark.skipif(not shutil.which("make"), reason="needs make")
def test_make_lab_on_a_fresh_machine_runs_four_commands(tmp_path):
    assert _make_dry_run(tmp_path / "venv", "lab") == [
        "python3 -m venv .venv",
        f".venv/bin/python tools/install_torch.py --version {it.TORCH_VERSION}",
        ".venv/bin/python -m pip install -r requirements.txt",
        ".venv/bin/python -m jupyterlab notebooks/",
    ]
    offline = _make_dry_run(tmp_path / "venv", "lab", "WHEELHOUSE=/media/usb/w")
    assert offline[1:3] == [
        f".venv/bin/python tools/install_torch.py --version {it.TORCH_VERSION} --wheelhouse /media/usb/w",
        ".venv/bin/python -m pip install --no-index --find-links /media/usb/w -r requirements.txt",
    ]


def _readme_commands(text: str, label: str) -> list[str] | None:
    """The commands in the README's fenced block that follows the line holding ``label``."""
    m = re.search(re.escape(label) + r".*?\n```[a-z]*\n(.*?)```", text, re.DOTALL)
    if not m:
        return None
    return [" ".join(line.split("#")[0].split()) for line in m.group(1).splitlines() if line.split("#")[0].strip()]


README_POSIX = "Without make, on macOS or Linux"
README_WINDOWS = "Without make, on Windows"


@pytest.mark.skipif(not shutil.which("make"), reason="needs make")
def test_readme_commands_without_make_are_the_makefiles():
    readme = (ROOT / "README.md").read_text()
    posix = _readme_commands(readme, README_POSIX)
    if posix is None:
        pytest.skip(f"README.md has no '{README_POSIX}' block yet")
    expected = _make_dry_run(ROOT / ".venv-not-made", "lab")
    assert posix == expected
    windows = _readme_commands(readme, README_WINDOWS)
    assert windows is not None, f"README.md: no '{README_WINDOWS}' block"
    as_windows = [
        c.replace("python3 -m venv", "py -m venv")
        .replace(".venv/bin/python", r".venv\Scripts\python")
        .replace("tools/", "tools\\")
        for c in expected
    ]
    assert windows == as_windows
