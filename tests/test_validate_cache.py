"""``validate`` reads the Parquet shards in place: nothing goes into the user's datasets cache, and its
summary is the one ``load_unified`` + ``task_summary`` give."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hf_unified_embed.cli.data import summary_table
from hf_unified_embed.cli.main import main
from hf_unified_embed.data import load_unified, task_summary
from hf_unified_embed.data.hub_layout import parquet_task_summary
from hf_unified_embed.data.layout_check import check_layout

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("validate") / "data"
    assert main(["build", str(SAMPLE_RECIPE), "-o", str(out), "--num-proc", "1"]) == 0
    return out


def _entries(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def test_validate_leaves_the_datasets_cache_untouched(folder: Path, tmp_path: Path):
    cache, home = tmp_path / "datasets-cache", tmp_path / "hf-home"
    cache.mkdir()
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "HF_HOME": str(home), "HF_DATASETS_OFFLINE": "1"}
    before = _entries(folder)
    run = subprocess.run(
        [sys.executable, "-m", "hf_unified_embed", "validate", str(folder)], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert "7 task(s) valid" in run.stdout
    assert _entries(cache) == []
    assert not (home / "datasets").exists()
    assert _entries(folder) == before  # nothing written beside the shards either


def test_summary_read_in_place_is_the_loaded_one(folder: Path, tmp_path: Path, capsys):
    layout = check_layout(folder)
    rows_in_place, rows_loaded = [], []
    for split in ("train", "test"):
        loaded = load_unified(folder, split=split, cache_dir=str(tmp_path / "cache"))
        for task, dataset in loaded.items():
            rows_loaded.append({"task": task, "split": split, **task_summary(dataset)})
            rows_in_place.append({"task": task, "split": split, **parquet_task_summary(layout.shards[task, split])})
    assert rows_in_place == rows_loaded
    assert main(["validate", str(folder)]) == 0
    assert summary_table(rows_loaded) in capsys.readouterr().out
