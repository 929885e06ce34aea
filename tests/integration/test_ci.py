"""CI's `.ci/run`: `make test` in a scrubbed environment, so that nothing installed by hand (a PYTHONPATH,
a virtualenv on PATH, user site-packages, another `python3` first on PATH) can make it pass; and in that
environment make still finds what `make test` needs: a python3 of 3.10 or newer, node and npm."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A make target, given to .ci/run instead of `test`, that reports the environment make runs its recipes in.
PROBE = (
    "ci-env: ; @python3 -c 'import json, os, site, sys; print(json.dumps({"
    '"env": dict(os.environ), "python": sys.executable, "version": list(sys.version_info[:2]), '
    '"user_site": site.ENABLE_USER_SITE, "torch_from": [p for p in sys.path if "fake-site" in p]}))'
    "'; command -v node; command -v npm"
)


@pytest.fixture(scope="module")
def inside(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ci")
    fake_site = tmp / "fake-site"
    (fake_site / "torch").mkdir(parents=True)
    (fake_site / "torch" / "__init__.py").write_text("raise SystemExit('a torch installed by hand was imported')\n")
    shims = tmp / "shims"
    shims.mkdir()
    for name in ("python", "python3"):
        (shims / name).write_text("#!/bin/sh\necho 'the PATH given to CI leaked in' >&2\nexit 97\n")
        (shims / name).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{shims}:{os.environ['PATH']}",
        "PYTHONPATH": str(fake_site),
        "VIRTUAL_ENV": str(tmp / "venv"),
        "CONDA_PREFIX": str(tmp / "conda"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    p = subprocess.run(
        ["bash", str(ROOT / ".ci" / "run"), "--no-print-directory", f"--eval={PROBE}", "ci-env"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    first, *tools = p.stdout.splitlines()
    return json.loads(first), tools


@pytest.mark.skipif(not shutil.which("make") or sys.platform != "linux", reason="CI runs on Linux with make")
def test_ci_scrubs_what_was_installed_by_hand(inside):
    info, _ = inside
    env = info["env"]
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX"):
        assert name not in env, name
    assert env["PYTHONNOUSERSITE"] == "1" and info["user_site"] is False
    assert info["torch_from"] == []
    # pip's settings (where packages come from) and HOME (its configuration) stay.
    assert env["PIP_DISABLE_PIP_VERSION_CHECK"] == "1" and env["HOME"] == os.environ["HOME"]


@pytest.mark.skipif(not shutil.which("make") or sys.platform != "linux", reason="CI runs on Linux with make")
def test_ci_still_finds_a_system_python_of_3_10_or_newer_and_node(inside):
    info, tools = inside
    assert Path(info["python"]).parent in {Path(p) for p in info["env"]["PATH"].split(":")}
    assert tuple(info["version"]) >= (3, 10), info
    assert [Path(t).name for t in tools] == ["node", "npm"], tools
