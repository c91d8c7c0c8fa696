"""The benchmarks run and report every case (quick sizes). Their figures are not asserted
here: this machine is noisy; `python -m tests.bench` prints them."""

from __future__ import annotations

import pytest

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.run import all_cases

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_every_benchmark_case_runs_and_reports_its_figures(tmp_path, home):
    out = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, "-m", "tests.bench", "--quick", "--repeat", "2",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["failed"] == {}
    assert {f["id"] for f in result["figures"]} == set(all_cases())
    for figure in result["figures"]:
        assert figure["min"] <= figure["median"] <= figure["max"], figure
        assert figure["unit"] and figure["case"] and figure["size"]
    table = proc.stdout.splitlines()
    assert table[0].split()[:3] == ["case", "size", "median"]
    assert json.loads(table[-1]) == result  # the last line is the same JSON object
