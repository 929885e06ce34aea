"""grpo_lab.lab.memory: peak memory in MB whatever unit the platform reports it in.

getrusage(2) gives ``ru_maxrss`` in KiB on Linux and in bytes on macOS; Windows has no ``resource``.
A fake ``resource`` module reporting a known number pins each conversion (computed here by hand).
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from grpo_lab.lab import memory


def _fake_resource(maxrss: int) -> types.ModuleType:
    fake = types.ModuleType("resource")
    fake.RUSAGE_SELF = 0
    fake.getrusage = lambda who: types.SimpleNamespace(ru_maxrss=maxrss)
    return fake


@pytest.mark.parametrize(
    ("platform", "maxrss", "mb"),
    [("linux", 512 * 1024, 512.0), ("darwin", 512 * 1024 * 1024, 512.0)],  # 512 MB as each reports it
)
def test_peak_rss_is_in_mb_on_linux_and_macos(monkeypatch, platform, maxrss, mb):
    monkeypatch.setitem(sys.modules, "resource", _fake_resource(maxrss))
    monkeypatch.setattr(sys, "platform", platform)
    assert memory.peak_rss_mb() == mb


def test_without_resource_or_psutil_the_peak_is_unknown(monkeypatch):
    monkeypatch.setitem(sys.modules, "resource", None)  # as on Windows
    monkeypatch.setitem(sys.modules, "psutil", None)
    assert memory.peak_rss_mb() is None


def test_on_windows_psutil_reports_the_peak_working_set(monkeypatch):
    monkeypatch.setitem(sys.modules, "resource", None)
    fake = types.ModuleType("psutil")
    fake.Process = lambda: types.SimpleNamespace(memory_info=lambda: types.SimpleNamespace(peak_wset=3 * 2**20))
    monkeypatch.setitem(sys.modules, "psutil", fake)
    assert memory.peak_rss_mb() == 3.0


def test_the_real_reading_here_is_a_plausible_size():
    mb = memory.peak_memory_mb(torch.device("cpu"))
    # This process holds torch: tens of MB at least, and far less than a terabyte.
    assert 10 < mb < 1e6
