"""The README and docs/results.md quote figures computed from the committed JSON, exactly."""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_results_page_and_readme_block_match_the_committed_json():
    out = subprocess.run([sys.executable, "tools/results_page.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_check_fails_when_a_quoted_figure_drifts(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tools"))
    import results_page

    readme = tmp_path / "README.md"
    good = results_page._with_block((ROOT / "README.md").read_text())
    block = good.split(results_page.BEGIN, 1)[1].split(results_page.END, 1)[0]
    quoted = re.search(r"\d+\.\d+ ± \d+\.\d+", block)  # whichever figure the block quotes first
    assert quoted, "the README's results block quotes no mean ± spread"
    mean, spread = quoted.group().split(" ± ")
    drifted = f"{float(mean) + 0.01:.{len(mean.split('.')[1])}f} ± {spread}"
    readme.write_text(good.replace(quoted.group(), drifted, 1))
    results = tmp_path / "results.md"
    results.write_text(results_page.results_page())
    monkeypatch.setattr(results_page, "README", readme)
    monkeypatch.setattr(results_page, "RESULTS", results)
    guide = tmp_path / "guide.md"
    guide.write_text(results_page._guide((ROOT / "docs" / "instructors_guide.md").read_text()))
    monkeypatch.setattr(results_page, "GUIDE", guide)
    assert results_page.main(["--check"]) == 1


def test_the_syllabus_and_the_guide_quote_the_measured_notebook_runtimes():
    record = json.loads((ROOT / "assets" / "notebook_runtimes.json").read_text())["seconds"]
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| (\d\d) \| \[[^\]]+\]\(notebooks/([^)]+)\.ipynb\) \|.*\| (\d+) s \|$", readme, re.M)
    assert {stem for _, stem, _ in rows} == set(record), "every notebook has a row with its runtime"
    for _, stem, seconds in rows:
        assert int(seconds) == record[stem], f"{stem}: README says {seconds} s, measured {record[stem]} s"
    guide = (ROOT / "docs" / "instructors_guide.md").read_text()
    rows = re.findall(r"^\| (\d\d) \| [^|\[]+ \| (\d+) s \|", guide, re.M)
    by_number = {stem[:2]: s for stem, s in record.items()}
    assert {n for n, _ in rows} == set(by_number)
    for n, seconds in rows:
        assert int(seconds) == by_number[n], f"guide, notebook {n}: says {seconds} s, measured {by_number[n]} s"
