"""``bench/step.py --smoke``: the step benchmark runs end to end on the CPU and prints its three rows and the check."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_step_benchmark_runs_in_smoke_mode(tmp_path: Path) -> None:
    out = tmp_path / "step.json"
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "step.py"), "--smoke", "--device", "cpu", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    rows = [line for line in lines if line.startswith(("| float32 |", "| defaults |", "| stock |"))]
    assert len(rows) == 3, result.stdout
    assert any(line.startswith("bf16 vs float32 on one ") for line in lines), result.stdout
    import json

    figures = json.loads(out.read_text())
    assert [row["mode"] for row in figures["rows"]] == ["float32", "defaults", "stock"]
    assert all(row["steps_per_s"] > 0 and row["peak_mb"] > 0 for row in figures["rows"])
    assert 0.99 < figures["precision"]["grad_cosine"] <= 1.0 + 1e-9
    assert not list(REPO.glob("outputs/bench-step*")), "nothing written into the repository"
