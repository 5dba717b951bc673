"""``bench/step.py --smoke``: the step benchmark runs end to end on the CPU and prints its rows (the three, and a
candidate for the defaults), the check and the profile of one step."""

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
        [
            *(sys.executable, str(REPO / "bench" / "step.py"), "--smoke", "--device", "cpu", "--json", str(out)),
            "--profile",
            *("--candidate", "logging_nan_inf_filter=false,max_grad_norm=0.5"),
        ],
        capture_output=True,
        text=True,
        # A hang guard: six processes (the sample's build, four rows, the check) of a tiny model's few steps take
        # one to two minutes on a quiet two-core machine, six at a load of five per core.
        timeout=2400,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    candidate = "defaults+logging_nan_inf_filter=false,max_grad_norm=0.5"
    rows = [
        line for line in lines if line.startswith(("| float32 |", "| defaults |", "| stock |", f"| {candidate} |"))
    ]
    assert len(rows) == 4, result.stdout
    assert any(line.startswith("bf16 vs float32 on one ") for line in lines), result.stdout
    import json

    figures = json.loads(out.read_text())
    assert [row["mode"] for row in figures["rows"]] == ["float32", "defaults", "stock", candidate]
    assert all(row["steps_per_s"] > 0 and row["peak_mb"] > 0 and row["median_step_ms"] > 0 for row in figures["rows"])
    assert 0.99 < figures["precision"]["grad_cosine"] <= 1.0 + 1e-9
    assert figures["complete"] is True
    # The profile: one step of the defaults row after its timed ones, which stay as many as asked.
    assert figures["profile"].startswith("one step: host ") and "one step: host " in result.stdout
    assert [bool(row["profile"]) for row in figures["rounds"][0]] == [False, True, False, False]
    assert all(len(row["waits_ms"]) == 1 for row in figures["rounds"][0])  # --smoke: 2 timed steps, 1 wait
    for row in figures["rounds"][0]:  # where each row's process spent its time, said as the row ended
        phases = row["phases_s"]
        assert min(phases.values()) >= 0 and phases["process"] == pytest.approx(
            phases["start"] + phases["train"] + phases["exit"]
        )
        assert any(line.startswith(f"row {row['mode']}: ") for line in lines), result.stdout
    assert not list(REPO.glob("outputs/bench-step*")), "nothing written into the repository"


def test_a_candidate_row_is_the_defaults_with_its_settings(tmp_path: Path) -> None:
    """``--candidate`` rows train the defaults' recipe with the given training arguments on top (YAML values)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import step
    finally:
        sys.path.remove(str(REPO / "bench"))
    options = step.argparse.Namespace(
        tasks=None, max_rows_per_task=None, batch_size=None, warmup=1, steps=1, set=[], workers=None, device="cpu"
    )
    defaults = step.recipe_for("defaults", options, tmp_path, None, tmp_path)
    candidate = step.recipe_for(
        step.CANDIDATE + "torch_compile=true,max_grad_norm=0.5", options, tmp_path, None, tmp_path
    )
    assert candidate["training_args"] == {**defaults["training_args"], "torch_compile": True, "max_grad_norm": 0.5}
    assert candidate["losses"] == defaults["losses"] and candidate["sampler"] == defaults["sampler"]


def test_a_run_cut_short_keeps_the_rows_it_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JSON is rewritten after every row: a time limit that ends the run leaves the rows measured so far,
    marked incomplete."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import step
    finally:
        sys.path.remove(str(REPO / "bench"))
    out = tmp_path / "step.json"

    def run_row(mode: str, *args: object) -> dict[str, object]:
        if mode != "float32":
            raise KeyboardInterrupt  # the limit's signal, after the first row
        return {"mode": mode, "steps_per_s": 10.0, "phases_s": {"process": 3.0}}

    monkeypatch.setattr(step, "run_row", run_row)
    arguments = ["--data", str(tmp_path), "--model", "m", "--device", "cpu", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", ["step.py", *arguments])
    with pytest.raises(KeyboardInterrupt):
        step.main()
    import json

    figures = json.loads(out.read_text())
    assert figures["complete"] is False
    assert [[row["mode"] for row in round_] for round_ in figures["rounds"]] == [["float32"]]


@pytest.mark.parametrize("profile", [True, False], ids=["profile", "no-profile"])
def test_a_failed_candidate_row_leaves_the_table_and_the_profile(
    profile: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A candidate row whose process fails (a compiler missing, say) is reported as NaN; the three rows, the
    check and the defaults row's profile still print."""
    import json
    import time

    sys.path.insert(0, str(REPO / "bench"))
    try:
        import step
    finally:
        sys.path.remove(str(REPO / "bench"))

    def row_process(command: list[str], check: bool) -> subprocess.CompletedProcess[str]:
        row = json.loads(command[command.index("--row") + 1])
        if row["mode"].startswith(step.CANDIDATE):
            return subprocess.CompletedProcess(command, 1)
        figures = {
            "mode": row["mode"],
            **dict.fromkeys(("steps_per_s", "samples_per_s", "peak_mb", "data_wait_ms", "median_step_ms"), 10.0),
            "waits_ms": [1.0],
            "profile": "one step: host 12.0 ms" if row["profiled"] else "",
            "train_begun": time.time(),
            "train_ended": time.time(),
        }
        Path(row["result"]).write_text(json.dumps(figures))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(step.subprocess, "run", row_process)
    check = {"task": "stsb", "loss_fp32": 1.0, "loss_bf16": 1.0, "loss_rel_diff": 0.0, "grad_cosine": 1.0}
    monkeypatch.setattr(step, "precision_check", lambda *args: check)
    arguments = ["--data", str(tmp_path), "--model", "m", "--device", "cpu", "--candidate", "x=1"]
    monkeypatch.setattr(sys, "argv", ["step.py", *arguments, *(["--profile"] if profile else [])])
    step.main()
    out = capsys.readouterr().out
    assert "| defaults+x=1 | nan |" in out and "| stock | 10.00 |" in out
    assert out.count("one step: host 12.0 ms") == int(profile)
