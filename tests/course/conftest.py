"""The course tier checks committed artefacts (executed notebooks, run histories, the README, the results
page), not code: when one fails, the artefact is stale. The failure report says how to regenerate it."""

from __future__ import annotations

import pytest

REGENERATE = (
    "This test reads a committed artefact, not the code under test: regenerate it and commit the result. "
    "Notebooks: make execute-notebooks. Results page and README blocks: python tools/results_page.py. "
    "A committed run: the command in its notebook's 'How this was measured'."
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when == "call":
        report.sections.append(("a committed artefact is stale", REGENERATE))
