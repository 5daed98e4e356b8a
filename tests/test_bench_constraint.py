"""`localspec bench constraint` runs end to end on SmolLM2 (nothing about time is asserted:
the figures are the bench's, not the test's)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_bench_constraint_reports_both_samplings(smollm2_path):
    r = subprocess.run([sys.executable, "-m", "localspec.cli", "bench", "constraint", "-m", str(smollm2_path),
                        "-L", "8", "-n", "48", "-t", "1", "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["L"] == 8 and out["answer_tokens"] > 8
    assert [row["sampling"] for row in out["rows"]] == ["greedy", "T=0.7"]
    for row in out["rows"]:
        assert row["iterations"] >= out["answer_tokens"] // 9 and 0 < row["median_ms"] <= row["p99_ms"] <= row["max_ms"]
