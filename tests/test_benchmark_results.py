"""A benchmark's printed figures land, dated, in benchmarks/results/<name>.md (benchmarks/recorded.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from benchmarks import recorded

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_a_benchmark_writes_what_it_printed_with_its_date(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(recorded, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", ["apply.py", "--runs", "3"])
    recorded.recorded(str(BENCHMARKS / "apply.py"), lambda: print("status  2.2x  (target <= 5x)"))
    text = (tmp_path / "apply.md").read_text()
    assert re.match(r"# apply: measured \d{4}-\d\d-\d\d \d\d:\d\d UTC\n", text)
    assert "`python benchmarks/apply.py --runs 3`" in text and "cores" in text
    assert "status  2.2x  (target <= 5x)" in text
    assert "status  2.2x" in capsys.readouterr().out  # still printed


def test_every_benchmark_records_its_figures():
    for script in sorted(BENCHMARKS.glob("*.py")):
        if script.name != "recorded.py":
            assert "recorded(__file__," in script.read_text(), f"{script.name}: run main through recorded()"
