"""tools/kernel_usage.py measures a kernel's peak memory and CPU time: checked on a stand-in "kernel"
whose figures are known, a process with ``ipykernel`` in its command line that holds 300 MB and spins."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from kernel_usage import KernelWatch, descendants  # noqa: E402

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads Linux's /proc")

# Allocates and touches 300 MB, frees it (the peak must still be seen), then burns CPU for 1.5 s of its
# own time; the fake argument makes it look like a kernel to the watch.
STAND_IN = textwrap.dedent(
    """
    import sys, time
    block = bytearray(300 * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(0.6)
    del block
    t = time.process_time()
    while time.process_time() - t < 1.5:
        pass
    """
)


def test_the_watch_sees_a_freed_peak_and_the_cpu_time_of_a_kernel_under_the_root():
    # root: a shell, so the "kernel" is a grandchild, as under a Jupyter server
    # (the stand-in's code and name come through the environment: only the grandchild's command line has them)
    env = {"PY": sys.executable, "CODE": STAND_IN, "NAME": "ipykernel_stand_in"}
    root = subprocess.Popen(["sh", "-c", '"$PY" -c "$CODE" "$NAME"; exit $?'], env=env)
    with KernelWatch(root.pid, interval=0.1) as watch:
        root.wait(timeout=120)
    assert root.returncode == 0
    (k,) = watch.usage.kernels.values()
    assert 300 <= k.peak_mb < 300 + 150  # the block, plus the interpreter (about 10 MB) and slack
    assert 1.4 <= k.cpu_seconds <= 1.5 + 0.6 + 0.5  # the spin, plus start-up and the touching of the block
    assert watch.usage.tree_peak_mb >= 300


def test_descendants_are_found_through_their_parents():
    root = subprocess.Popen(["sh", "-c", "sleep 5 & sleep 5 & wait"])
    try:
        for _ in range(50):
            kids = descendants(root.pid)
            if len(kids) == 2:
                break
            subprocess.run(["sleep", "0.1"])
        assert len(kids) == 2 and root.pid not in kids
    finally:
        root.kill()
        root.wait()
