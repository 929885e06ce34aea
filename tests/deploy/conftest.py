"""Deployment checks: Binder, a classroom JupyterHub, Colab's install cell. Each builds what it tests from
PyPI and npm into build/ and runs notebooks, so they take minutes.

- Marker ``slow``: registered here, set on every test that builds or runs notebooks (CI runs them; a quick
  local pass leaves them out with ``-m "not slow"``).
"""

from __future__ import annotations


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: builds an environment from PyPI/npm and runs notebooks (minutes)")
