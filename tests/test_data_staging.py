"""Staged outputs on the data side: a killed build leaves only a stale stage that the next run removes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from hf_unified_embed.cli.main import main
from hf_unified_embed.curriculum.plan import CurriculumPlan
from hf_unified_embed.curriculum.plots import plot_task_similarity
from hf_unified_embed.curriculum.texts import save_shard
from hf_unified_embed.data import load_unified
from tests import _processes as processes

REPO = Path(__file__).resolve().parent.parent


def staging_folders(parent: Path, name: str) -> list[Path]:
    return sorted(parent.glob(f".{name}.staging-*"))


def write_pairs(path: Path, rows: int) -> None:
    with path.open("w") as handle:
        for i in range(rows):
            handle.write(f'{{"anchor": "question {i} about a topic", "positive": "an answer {i} to it"}}\n')


def test_kill_minus_9_mid_build_then_rerun_succeeds_and_cleans_up(tmp_path: Path):
    data = tmp_path / "pairs.jsonl"
    write_pairs(data, 1_000_000)  # a build of these takes seconds (it took minutes row by row)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {"sources": [{"name": "p", "format": "pairs", "data_files": "pairs.jsonl", "task_type": "retrieval"}]}
        )
    )
    out = tmp_path / "out"
    private_tmp = tmp_path / "tmp"  # the build's TMPDIR: a killed build must leave nothing there either
    private_tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(private_tmp)}
    process = subprocess.Popen(
        # One process: with several, multiprocessing's own socket folder (pymp-*) outlives a SIGKILL in TMPDIR.
        [sys.executable, "-m", "hf_unified_embed.cli.main", "build", str(recipe), "-o", str(out), "--num-proc", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + processes.time_limit(processes.Expected())
        # Mid-way: the stage exists and datasets has started writing Arrow files into its scratch folder.
        while not any(
            path.suffix == ".arrow" for stage in staging_folders(tmp_path, "out") for path in stage.rglob("*")
        ):
            assert process.poll() is None, "the build ended before it could be killed; make the input larger"
            assert time.monotonic() < deadline, "no staging folder appeared"
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    assert process.returncode == -signal.SIGKILL
    stale = staging_folders(tmp_path, "out")
    assert len(stale) == 1 and not out.exists()
    assert not list(private_tmp.iterdir()), "temporary files outside the staging folder"

    write_pairs(data, 1_000)  # the rerun need not be slow
    assert main(["build", str(recipe), "-o", str(out)]) == 0
    assert not staging_folders(tmp_path, "out") and not stale[0].exists()
    assert len(load_unified(out)["p"]) == 1_000


def test_single_file_writers_are_staged_and_leave_nothing_beside(tmp_path: Path):
    plan = CurriculumPlan(tasks=["a", "b"], order=["a", "b"], similarity=[[1.0, 0.5], [0.5, 1.0]], score=1.0)
    assert plan.save(tmp_path) == tmp_path / "curriculum_plan.json"
    plan.save(tmp_path)  # replaces the earlier file
    assert plot_task_similarity(plan, tmp_path / "sim.png").read_bytes()[:4] == b"\x89PNG"
    shard = save_shard(tmp_path / "shards", 0, 1, np.ones((2, 3), dtype=np.float32), "fp")
    assert shard.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curriculum_plan.json", "shards", "sim.png"]
    assert [p.name for p in (tmp_path / "shards").iterdir()] == [shard.name]


def test_curriculum_to_unwritable_output_fails_before_loading_the_teacher(tmp_path: Path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    # The data folder and the teacher do not exist either: the output is checked first.
    assert main(["curriculum", str(tmp_path / "no-data"), "--teacher", "no-model", "-o", str(blocker / "out")]) == 2
    assert "cannot write the output" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["./missing", "outputs/missing"])
def test_curriculum_of_a_missing_local_folder_is_not_a_hub_lookup(tmp_path: Path, monkeypatch, capsys, bad: str):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    assert main(["curriculum", bad, "--teacher", "no-model", "-o", str(tmp_path / "out")]) == 2
    assert f"dataset folder {bad} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not staging_folders(tmp_path, "out")
