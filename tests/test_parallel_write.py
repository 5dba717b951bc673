"""``write_unified`` / ``save_unified`` with ``num_proc`` (issue 38, item 2): each process writes its own shards.

The files (names, bytes, row groups) are the same for any number of processes, ``datasets`` loads them back
in a fresh process, and the row check before a write finds the problem ``validate_unified`` finds, with its
message, while reading the rows a shard at a time.
"""

from __future__ import annotations

import itertools
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from datasets import Dataset, DatasetDict, load_from_disk

from hf_unified_embed.data.check_record import CHECK_RECORD
from hf_unified_embed.data.hub_layout import save_unified, write_unified
from hf_unified_embed.data.shard_writer import MAX_ROW_GROUP_BYTES, plan_shards, writer_processes
from hf_unified_embed.errors import UnifiedSchemaError
from hf_unified_embed.schema import UNIFIED_FEATURES, validate_unified

PASSAGE = " ".join(f"word{index}" for index in range(60))


def _rows(task: str, count: int, task_type: str = "retrieval") -> list[dict[str, Any]]:
    return [
        {
            "task": task,
            "task_type": task_type,
            "query_instruction": "Represent the query: ",
            "document_instruction": "",
            "query": f"{task} query {index}",
            "positives": [f"{index} {PASSAGE}"],
            "negatives": [f"{index} other {PASSAGE}", f"{index} third {PASSAGE}"],
            "positive_scores": [1.0] if task_type == "sts" else [],
            "negative_scores": [],
        }
        for index in range(count)
    ]


def _mapped(tmp_path: Path, tasks: dict[str, list[dict[str, Any]]]) -> DatasetDict:
    """The tasks as memory-mapped Arrow, as ``build`` hands them to ``write_unified``."""
    data = DatasetDict({task: Dataset.from_list(rows, features=UNIFIED_FEATURES) for task, rows in tasks.items()})
    data.save_to_disk(tmp_path / "arrow")
    loaded = load_from_disk(str(tmp_path / "arrow"))
    assert isinstance(loaded, DatasetDict)
    return loaded


def _files(folder: Path) -> dict[str, Any]:
    """Each file's bytes; the check record without what only says when a shard was written (its time,
    and the record's digest over it), so that two builds of the same content compare equal."""
    files: dict[str, Any] = {
        str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()
    }
    if CHECK_RECORD in files:
        record = json.loads(files[CHECK_RECORD])
        record.pop("digest")
        for facts in record["files"].values():
            facts.pop("mtime_ns")
        files[CHECK_RECORD] = record
    return files


@pytest.fixture(scope="module")
def mapped(tmp_path_factory: pytest.TempPathFactory) -> DatasetDict:
    return _mapped(tmp_path_factory.mktemp("mapped"), {"qa": _rows("qa", 4000), "sts": _rows("sts", 1500, "sts")})


@pytest.mark.parametrize(
    ("jobs", "num_proc", "processes"),
    [(4, None, 1), (4, 1, 1), (1, 2, 1), (2, 2, 2), (3, 2, 3), (9, 2, 3), (9, 4, 5), (0, 2, 1)],
)
def test_one_more_writer_than_processes_when_shards_outnumber_them(jobs: int, num_proc: int | None, processes: int):
    # Uneven shards share the cores through the scheduler; one process asked for writes alone.
    assert writer_processes(jobs, num_proc) == processes


def test_files_are_byte_identical_for_one_and_two_processes(tmp_path: Path, mapped: DatasetDict) -> None:
    folders = {}
    for num_proc in (1, 2):
        folders[num_proc] = tmp_path / f"proc{num_proc}"
        folders[num_proc].mkdir()
        write_unified(mapped, folders[num_proc], max_shard_bytes=400_000, num_proc=num_proc)
    one, two = _files(folders[1]), _files(folders[2])
    shards = sorted(name for name in one if name.endswith(".parquet"))
    assert sum(name.startswith("data/qa/") for name in shards) > 3  # several shards, so both processes write
    assert list(one) == list(two) and one == two
    for name in shards:
        metadata = pq.ParquetFile(folders[2] / name).metadata
        assert all(
            metadata.row_group(i).total_byte_size <= MAX_ROW_GROUP_BYTES for i in range(metadata.num_row_groups)
        )


@pytest.mark.parametrize("cuts", [(), (1,), (137, 138, 2500), (999, 1000, 1001)])
def test_a_shard_is_the_same_bytes_however_its_rows_are_chunked(tmp_path: Path, cuts: tuple[int, ...]) -> None:
    """The rows of a source read in parts arrive as Arrow chunks cut where the parts meet; the file must not
    depend on that (``build --num-proc``), and is what ``datasets`` writes from one chunk."""
    import pyarrow as pa
    from datasets.table import InMemoryTable

    from hf_unified_embed.data.shard_writer import ShardJob, write_shard

    table = Dataset.from_list(_rows("qa", 3000), features=UNIFIED_FEATURES).data.table.combine_chunks()
    bounds = [0, *cuts, len(table)]
    chunked = pa.concat_tables([table.slice(start, end - start) for start, end in itertools.pairwise(bounds)])
    assert chunked.column("query").num_chunks == len(cuts) + 1
    whole, parts = Dataset(InMemoryTable(table)), Dataset(InMemoryTable(chunked))
    whole.to_parquet(str(tmp_path / "datasets.parquet"), batch_size=700)
    write_shard(ShardJob(whole, tmp_path / "whole.parquet", 700))
    write_shard(ShardJob(parts, tmp_path / "parts.parquet", 700))
    expected = (tmp_path / "datasets.parquet").read_bytes()
    assert (tmp_path / "whole.parquet").read_bytes() == expected
    assert (tmp_path / "parts.parquet").read_bytes() == expected


def test_datasets_loads_a_parallel_write_back_in_a_fresh_process(tmp_path: Path, mapped: DatasetDict) -> None:
    folder = save_unified(mapped, tmp_path / "out", max_shard_bytes=400_000, num_proc=2)
    script = (
        "import json, sys; from datasets import load_dataset\n"
        "rows = {t: load_dataset(sys.argv[1], t, split='train')[:] for t in ('qa', 'sts')}\n"
        "print(json.dumps({t: [r['query'], r['positives'], r['positive_scores']] for t, r in rows.items()}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(folder)], capture_output=True, text=True, check=True, timeout=300
    )
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    for task in ("qa", "sts"):
        assert loaded[task] == [mapped[task]["query"], mapped[task]["positives"], mapped[task]["positive_scores"]]


def test_a_shard_job_pickles_as_file_references(mapped: DatasetDict, tmp_path: Path) -> None:
    """What a worker receives is the shard's cache files and slice, not its rows."""
    jobs = plan_shards({"train": dict(mapped)}, tmp_path, max_shard_bytes=400_000)
    assert len(jobs) > 4
    assert all(len(pickle.dumps(job)) < 20_000 for job in jobs)
    assert sum(len(job.dataset) for job in jobs) == sum(len(dataset) for dataset in mapped.values())


def _bad_rows() -> list[tuple[str, int, dict[str, Any]]]:
    """(what, row, change) of rows that break a rule."""
    return [
        ("blank query", 2100, {"query": " \u3000 "}),
        ("score out of range", 3999, {"negative_scores": [0.5, 1.5]}),
        ("instruction differs", 1, {"query_instruction": "other"}),
        ("empty positive", 17, {"positives": [""]}),
    ]


@pytest.mark.parametrize(("what", "row", "change"), _bad_rows(), ids=[bad[0] for bad in _bad_rows()])
def test_the_row_check_before_a_write_reports_what_validate_unified_reports(
    tmp_path: Path, what: str, row: int, change: dict[str, Any]
) -> None:
    rows = _rows("qa", 4000)
    rows[row] = {**rows[row], **change}
    data = _mapped(tmp_path, {"qa": rows})
    with pytest.raises(UnifiedSchemaError) as expected:
        validate_unified(data["qa"], source="qa", task="qa")
    with pytest.raises(UnifiedSchemaError) as raised:
        save_unified(data, tmp_path / "out", max_shard_bytes=200_000, num_proc=2)
    assert str(raised.value) == str(expected.value)
    assert f"row {row}" in str(raised.value)
    assert not (tmp_path / "out").exists()


def test_columns_the_scans_cannot_read_are_checked_row_by_row(tmp_path: Path) -> None:
    rows = [{**row, "negatives": "not a list"} for row in _rows("qa", 3)]
    data = DatasetDict({"qa": Dataset.from_list(rows)})  # a string column where the schema has a list
    with pytest.raises(UnifiedSchemaError) as expected:
        validate_unified(data["qa"], source="qa", task="qa")
    with pytest.raises(UnifiedSchemaError) as raised:
        save_unified(data, tmp_path / "out")
    assert str(raised.value) == str(expected.value)


def test_a_failing_shard_write_raises_its_error_in_the_caller(tmp_path: Path, mapped: DatasetDict) -> None:
    folder = tmp_path / "out"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "sts").write_text("a file where the task folder goes")
    with pytest.raises((FileExistsError, NotADirectoryError)):
        write_unified(mapped, folder, max_shard_bytes=400_000, num_proc=2)
