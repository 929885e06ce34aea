"""How much memory this process has used at its peak, the same way on Linux, macOS and Windows.

``resource`` is Unix-only, so it is imported where it is read, never at module level: the package
must import on Windows. Nor is torch imported at module level: ``doctor`` and the benchmark's timing
read the resident memory without it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def peak_rss_mb() -> float | None:
    """This process's peak resident memory in MB (2**20 bytes) since it started, or None where
    it cannot be read (Windows without ``psutil``)."""
    try:
        import resource  # Unix only
    except ImportError:
        return _windows_peak_mb()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # getrusage(2): Linux reports ru_maxrss in KiB, macOS in bytes.
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def _windows_peak_mb() -> float | None:
    try:
        import psutil  # optional; comes with ipykernel
    except ImportError:
        return None
    peak = getattr(psutil.Process().memory_info(), "peak_wset", None)  # Windows' peak working set, bytes
    return None if peak is None else peak / 2**20


def peak_memory_mb(device: torch.device) -> float | None:
    """The peak memory that matters for a run on ``device``, in MB: the most CUDA memory allocated
    on a GPU, this process's peak resident memory otherwise (None where that cannot be read)."""
    if device.type == "cuda":
        import torch  # slow; here torch is loaded already, since the caller holds a torch.device

        return torch.cuda.max_memory_allocated(device) / 2**20
    return peak_rss_mb()
