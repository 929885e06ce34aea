"""Timing and memory tools for measuring a training step.

``Clock`` accumulates seconds per category (generation, reward, forward + backward, optimiser) from
hooks on a model, torch's backward and the optimiser step; ``StepLog`` cuts them per step; ``Memory``
reads the peak memory a phase adds. Their statistics live in ``study.stats``.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..lab.memory import peak_rss_mb

if TYPE_CHECKING:
    import torch

CATEGORIES = ("generation", "reward", "forward_backward", "optimizer")


class Clock:
    """Accumulates seconds per category: generation, reward, forward_backward, optimizer.

    ``install(model)`` adds the hooks; ``uninstall()`` removes them (in-process runs). The
    forward + backward of an update starts at the first forward with gradients and ends when
    ``torch.autograd.backward`` returns; the optimiser's time is between its global step hooks.
    """

    def __init__(self):
        self.totals: dict[str, float] = defaultdict(float)
        self._fb_start: float | None = None
        self._opt_start: float | None = None
        self._undo: list = []

    def install(self, model: torch.nn.Module) -> Clock:
        import torch

        def pre_forward(module, args, kwargs):
            if torch.is_grad_enabled() and self._fb_start is None:
                self._fb_start = time.perf_counter()

        self._undo.append(model.register_forward_pre_hook(pre_forward, with_kwargs=True).remove)
        orig_backward = torch.autograd.backward

        def timed_backward(*args, **kwargs):
            try:
                return orig_backward(*args, **kwargs)
            finally:
                if self._fb_start is not None:
                    self.add("forward_backward", time.perf_counter() - self._fb_start)
                    self._fb_start = None

        torch.autograd.backward = timed_backward
        self._undo.append(lambda: setattr(torch.autograd, "backward", orig_backward))
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        def opt_pre(opt, args, kwargs):
            self._opt_start = time.perf_counter()

        def opt_post(opt, args, kwargs):
            if self._opt_start is not None:
                self.add("optimizer", time.perf_counter() - self._opt_start)
                self._opt_start = None

        self._undo.append(register_optimizer_step_pre_hook(opt_pre).remove)
        self._undo.append(register_optimizer_step_post_hook(opt_post).remove)
        return self

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def add(self, what: str, seconds: float) -> None:
        self.totals[what] += seconds

    def wrap(self, what: str, fn: Callable, after: Callable | None = None) -> Callable:
        """``fn`` timed under ``what``; ``after(result, args, kwargs)`` sees each result (untimed)."""

        def timed(*args, **kwargs):
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            self.add(what, time.perf_counter() - t)
            if after is not None:
                after(out, args, kwargs)
            return out

        return timed

    def snapshot(self) -> dict[str, float]:
        return dict(self.totals)


class StepLog:
    """Per-step wall times (between consecutive step ends) and the clock's categories per step."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.steps: list[dict] = []
        self._t: float | None = None
        self._snap: dict = {}

    def start(self) -> None:
        self._t = time.perf_counter()
        self._snap = self.clock.snapshot()

    def end_step(self, **extra: float) -> None:
        now = time.perf_counter()
        snap = self.clock.snapshot()
        row = {"seconds": now - self._t}
        for c in CATEGORIES:
            row[c] = snap.get(c, 0.0) - self._snap.get(c, 0.0)
        row["other"] = row["seconds"] - sum(row[c] for c in CATEGORIES)
        row.update(extra)
        self.steps.append(row)
        self._t, self._snap = now, snap


def sync(device: torch.device) -> None:
    """Wait for the accelerator, so a wall-clock reading covers the work queued before it."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def rss_mb() -> float:
    """This process's resident set in MiB (Linux), NaN where /proc is not there."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class Memory:
    """Peak memory a phase adds over its start. CPU: the resident set's high-water mark, reset
    through ``/proc/self/clear_refs`` (Linux); CUDA: ``torch.cuda.max_memory_allocated``."""

    def __init__(self, device):
        self.device = device

    def start(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device) / 2**20
            self.hwm_reset = True
            return
        self.base = rss_mb()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset the peak RSS to the current RSS
            self.hwm_reset = True
        except OSError:
            self.hwm_reset = False  # then the peak is the process's lifetime peak

    def stop(self) -> dict:
        import torch

        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device) / 2**20
            kind = "cuda_allocated"
        else:
            peak = float("nan")
            try:
                with open("/proc/self/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak = int(line.split()[1]) / 1024
            except OSError:
                pass
            if math.isnan(peak):  # no /proc: the process's lifetime peak, NaN where even that is unknown
                lifetime = peak_rss_mb()
                peak = float("nan") if lifetime is None else lifetime
            kind = "cpu_rss"
        return {
            "kind": kind,
            "before_mb": round(self.base, 1),
            "peak_mb": round(peak, 1),
            "peak_added_mb": round(peak - self.base, 1),
            "peak_is_phase_only": self.hwm_reset,
        }
