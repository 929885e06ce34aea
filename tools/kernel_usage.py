"""What Jupyter kernels cost while they run: peak memory and CPU time, read from Linux's /proc.

``KernelWatch(root_pid)`` polls, in a thread, every process under ``root_pid`` whose command line runs
``ipykernel``: its peak resident memory (``VmHWM`` in /proc/PID/status, the kernel's own high-water mark, so
no peak between two polls is missed) and its CPU seconds (user + system, /proc/PID/stat). The CPU time of
the poll after a kernel's last one is lost: at most ``interval`` seconds per kernel. It also records the
peak of the summed resident memory of the whole tree (the server or test runner and its kernels), sampled.

Used by tools/binder_check.py (one nbval run per notebook) and the classroom test (one server per learner).
Linux only: Binder and the classroom server run Linux.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class KernelUsage:
    pid: int
    environ_home: str = ""  # the kernel's HOME: which learner it belongs to on a shared server
    peak_mb: float = 0.0
    cpu_seconds: float = 0.0


@dataclass
class Usage:
    kernels: dict[int, KernelUsage] = field(default_factory=dict)
    tree_peak_mb: float = 0.0

    @property
    def kernel_peak_mb(self) -> float:
        return max((k.peak_mb for k in self.kernels.values()), default=0.0)

    @property
    def kernel_cpu_seconds(self) -> float:
        return sum(k.cpu_seconds for k in self.kernels.values())


def _stat(pid: int) -> list[str] | None:
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields after the command name, from field 3 (state)


def descendants(root: int) -> list[int]:
    """The processes under ``root`` (not ``root`` itself), from their parent ids."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _status_kb(pid: int, key: str) -> int:
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _is_kernel(pid: int) -> bool:
    try:
        return b"ipykernel" in (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False


def _home(pid: int) -> str:
    try:
        env = (PROC / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return ""
    return next((e[5:].decode() for e in env if e.startswith(b"HOME=")), "")


class KernelWatch:
    """``with KernelWatch(pid) as w: ...``; then ``w.usage``."""

    def __init__(self, root_pid: int, interval: float = 0.25):
        self.root, self.interval, self.usage = root_pid, interval, Usage()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def poll(self) -> None:
        tree = [self.root, *descendants(self.root)]
        self.usage.tree_peak_mb = max(self.usage.tree_peak_mb, sum(_status_kb(p, "VmRSS") for p in tree) / 1024)
        for pid in tree:
            if not _is_kernel(pid):
                continue
            fields, hwm = _stat(pid), _status_kb(pid, "VmHWM")
            if fields is None or hwm == 0:
                continue
            k = self.usage.kernels.setdefault(pid, KernelUsage(pid, _home(pid)))
            k.peak_mb = max(k.peak_mb, hwm / 1024)
            k.cpu_seconds = max(k.cpu_seconds, (int(fields[11]) + int(fields[12])) / TICKS)  # utime + stime

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.interval)

    def __enter__(self) -> KernelWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

