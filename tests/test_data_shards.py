"""Bounded shards and row groups (issue 38, item 3): ``build --max-shard-size`` and row groups bounded in bytes.

Before: a task's split was written as 500 MB shards in datasets' row groups of up to 100 MB (40,000 rows of
passages), which a stream or the Hub's viewer decodes whole.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from hf_unified_embed.cli.main import main
from hf_unified_embed.data.hub_layout import MAX_ROW_GROUP_BYTES


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    return code, err.getvalue()


def test_shards_are_bounded_and_hold_the_same_rows_in_the_same_order(tmp_path: Path) -> None:
    from hf_unified_embed.data import load_unified

    passage = " ".join(f"word{index}" for index in range(120))
    rows = [
        {"query": f"query {i}", "positives": [f"{i} {passage}"], "negatives": [f"{i} other {passage}"]}
        for i in range(3000)
    ]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    source = {"name": "qa", "format": "unified", "data_files": "rows.jsonl", "task_type": "retrieval"}
    (tmp_path / "build.yaml").write_text(yaml.safe_dump({"sources": [source]}))
    assert _run(["build", str(tmp_path / "build.yaml"), "-o", str(tmp_path / "one")])[0] == 0
    code, err = _run(["build", str(tmp_path / "build.yaml"), "-o", str(tmp_path / "small"), "--max-shard-size", "1MB"])
    assert code == 0, err
    shards = sorted((tmp_path / "small" / "data" / "qa").glob("train-*.parquet"))
    assert len(shards) > 3 and all(shard.stat().st_size <= 1_000_000 * 1.05 for shard in shards)
    for shard in shards:
        metadata = pq.ParquetFile(shard).metadata
        assert all(
            metadata.row_group(i).total_byte_size <= MAX_ROW_GROUP_BYTES * 1.1 for i in range(metadata.num_row_groups)
        )
    assert _run(["validate", str(tmp_path / "small")])[0] == 0
    one, small = load_unified(tmp_path / "one")["qa"], load_unified(tmp_path / "small")["qa"]
    assert one["query"] == small["query"] and one["positives"] == small["positives"]


def test_a_size_that_is_not_one_is_refused_naming_the_option(tmp_path: Path) -> None:
    code, err = _run(["build", "r.yaml", "-o", str(tmp_path / "x"), "--max-shard-size", "big"])
    assert code == 2 and err.strip().endswith(
        "argument --max-shard-size: expected a size such as 500MB or 1GB, got 'big'"
    )


def test_a_shard_written_through_fresh_mappings_is_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer takes a fresh mapping of the shard's rows every ``REMAP_BYTES`` it reads (so the pages it
    read leave its resident memory): with a fresh mapping for every row group, the same bytes."""
    from hf_unified_embed.data import shard_writer

    passage = " ".join(f"word{index}" for index in range(60))
    rows = [{"query": f"query {i}", "positives": [f"{i} {passage}"]} for i in range(2000)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    source = {"name": "qa", "format": "unified", "data_files": "rows.jsonl", "task_type": "retrieval"}
    (tmp_path / "build.yaml").write_text(yaml.safe_dump({"sources": [source]}))
    monkeypatch.setattr(shard_writer, "MAX_ROW_GROUP_BYTES", 64 * 1024)  # several row groups
    assert _run(["build", str(tmp_path / "build.yaml"), "-o", str(tmp_path / "once")])[0] == 0
    monkeypatch.setattr(shard_writer, "REMAP_BYTES", 1)
    assert _run(["build", str(tmp_path / "build.yaml"), "-o", str(tmp_path / "remapped")])[0] == 0
    files = sorted(path.relative_to(tmp_path / "once") for path in (tmp_path / "once" / "data").rglob("*.parquet"))
    assert files and pq.ParquetFile(tmp_path / "once" / files[0]).metadata.num_row_groups > 2
    for name in files:
        assert (tmp_path / "once" / name).read_bytes() == (tmp_path / "remapped" / name).read_bytes()
