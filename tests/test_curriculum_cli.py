"""`hf-unified-embed curriculum` end to end on a tiny unified dataset with the tiny teacher."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _curriculum_helpers import tiny_tasks
from huggingface_hub import DatasetCard

from hf_unified_embed.cli.main import main
from hf_unified_embed.curriculum import CurriculumPlan
from hf_unified_embed.data import load_unified, save_unified

FAST = ["--iterations", "2000", "--n-samples", "4", "--batch-size", "8"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    notes = {"alpha": {"dataset": "org/alpha", "revision": "v1", "license": "MIT"}}
    return save_unified(tiny_tasks(), tmp_path_factory.mktemp("unified") / "data", notes=notes)


def test_curriculum_writes_dataset_plan_and_plots(data_dir: Path, tiny_model_path: str, tmp_path: Path) -> None:
    out = tmp_path / "curriculum"
    assert main(["curriculum", str(data_dir), "--teacher", tiny_model_path, "-o", str(out), *FAST]) == 0
    assert {"README.md", "data", "curriculum_plan.json", "task_similarity.png", "difficulty_histograms.png"} <= {
        p.name for p in out.iterdir()
    }
    scored = load_unified(out)
    plan = CurriculumPlan.load(out)
    assert sorted(plan.order) == sorted(scored) == ["alpha", "beta", "gamma"]
    for task, dataset in scored.items():
        assert dataset.features["difficulty"].dtype == "float32"
        assert plan.task_statistics[task].rows == len(dataset)
        assert plan.task_statistics[task].difficulty_mean == pytest.approx(np.mean(dataset["difficulty"]), abs=1e-6)
    assert plan.representation["teacher"] == Path(tiny_model_path).name  # by folder name, never by path
    # The input card's sources (a Hub id, its revision, the license) carry over to the new folder.
    notes = DatasetCard.load(out / "README.md").data.to_dict()["source_notes"]["alpha"]
    assert (notes["dataset"], notes["revision"], notes["license"]) == ("org/alpha", "v1", "MIT")
    assert not list(tmp_path.glob(".curriculum*")), "no staging folder may be left behind"

    # A non-empty output is refused (exit 2) unless --overwrite; the input may never be the output.
    assert main(["curriculum", str(data_dir), "--teacher", tiny_model_path, "-o", str(out), *FAST]) == 2
    assert main(["curriculum", str(data_dir), "--teacher", tiny_model_path, "-o", str(data_dir), "--overwrite"]) == 2
    args = [
        "curriculum",
        str(data_dir),
        "--teacher",
        tiny_model_path,
        "-o",
        str(out),
        "--overwrite",
        "--no-difficulty",
    ]
    assert main([*args, "--tasks", "alpha,beta", *FAST]) == 0
    assert sorted(load_unified(out)) == ["alpha", "beta"]
    assert "difficulty" not in load_unified(out)["alpha"].column_names
    assert not (out / "difficulty_histograms.png").exists()


def test_sharded_run_then_merge_equals_unsharded(
    data_dir: Path, tiny_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["curriculum", str(data_dir), "--teacher", tiny_model_path, *FAST]
    assert main([*common, "-o", str(tmp_path / "whole")]) == 0
    sharded = tmp_path / "sharded"
    assert main([*common, "-o", str(sharded), "--merge"]) != 0  # nothing encoded yet
    assert "no embedding shards" in capsys.readouterr().err
    for shard in ("0/2", "1/2"):
        assert main([*common, "-o", str(sharded), "--shard", shard]) == 0
    assert not sharded.exists() and len(list(tmp_path.glob("sharded.shards/*.safetensors"))) == 2
    assert main([*common, "-o", str(sharded), "--merge"]) == 0
    whole, merged = load_unified(tmp_path / "whole"), load_unified(sharded)
    for task in whole:
        np.testing.assert_allclose(merged[task]["difficulty"], whole[task]["difficulty"], atol=1e-5)
    assert CurriculumPlan.load(sharded).order == CurriculumPlan.load(tmp_path / "whole").order


@pytest.mark.parametrize("shard", ["2/2", "x", "1/0"])
def test_bad_shard_argument_is_a_user_error(
    data_dir: Path, shard: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["curriculum", str(data_dir), "--teacher", "unused", "-o", str(tmp_path / "o"), "--shard", shard]) == 2
    assert "--shard" in capsys.readouterr().err
