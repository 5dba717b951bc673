"""A unified folder knows what was checked: the rows are checked once per content, not once per reader.

``build`` (and every writer through ``write_unified``: ``mine-negatives``, ``curriculum``) and ``validate``
leave a check record in the folder (each shard's name, size, modification time, footer digest and rows, and
the check's version), listed in the folder's manifest as the tool's. ``stream_unified`` and ``load_unified``
of an unchanged folder do not read its rows again; a task with a shard that changed or is not recorded is
checked in full before its rows are used, with the same located error. Before, every reader checked every
row (9-10 s before the first batch of a 1M-row folder, a minute at 5M).
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from huggingface_hub.utils import filter_repo_objects
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import load_unified, row_check, stream_unified
from hf_unified_embed.data.check_record import CHECK_RECORD, CHECK_VERSION, read_record
from hf_unified_embed.errors import UnifiedSchemaError
from hf_unified_embed.hub.publishing import IGNORE_PATTERNS
from hf_unified_embed.utils.outputs import MARKER, not_written_by_tool

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("record") / "data"
    assert main(["build", str(SAMPLE_RECIPE), "-o", str(out), "--num-proc", "1"]) == 0
    return out


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """The tasks whose rows a reader checks (counted by task), through the one row check."""
    tasks: Counter[str] = Counter()
    original = row_check.check_task_rows

    def counting(batches: Any, task: str) -> int:
        tasks[task] += 1
        return original(batches, task)

    monkeypatch.setattr(row_check, "check_task_rows", counting)
    yield tasks


def _copy(folder: Path, root: Path) -> Path:
    target = root / "copy"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(folder, target)  # copy2 keeps sizes and modification times: the record still holds
    return target


def _shards(folder: Path) -> list[Path]:
    return sorted(folder.glob("data/*/*.parquet"))


def test_build_records_every_shard_and_the_folder_stays_the_tool_s(built: Path) -> None:
    record = read_record(built)
    assert sorted(record) == sorted(path.relative_to(built).as_posix() for path in _shards(built))
    for path in _shards(built):
        assert record[path.relative_to(built).as_posix()].rows == pq.read_metadata(path).num_rows
    data = json.loads((built / CHECK_RECORD).read_text())
    assert data["version"] == CHECK_VERSION and data["written_by"] == "hf-unified-embed"
    assert CHECK_RECORD in json.loads((built / MARKER).read_text())["files"]
    assert not_written_by_tool(built) is None  # --overwrite may still replace it
    # The record speaks of local files: push leaves it out, as it leaves out the manifest.
    assert list(filter_repo_objects([CHECK_RECORD, "README.md"], ignore_patterns=IGNORE_PATTERNS)) == ["README.md"]
    assert main(["validate", str(built)]) == 0  # the strict root check allows the record
    assert not_written_by_tool(built) is None


def test_readers_of_an_unchanged_folder_do_not_read_its_rows_again(
    built: Path, tmp_path: Path, checked: Counter[str]
) -> None:
    streams = stream_unified(built)
    loaded = load_unified(built, cache_dir=str(tmp_path / "cache"))
    assert checked == Counter()
    assert {task: stream.info.splits["train"].num_examples for task, stream in streams.items()} == {
        task: len(dataset) for task, dataset in loaded.items()
    }


def test_a_shard_edited_after_the_check_is_refused_with_the_located_line(
    built: Path, tmp_path: Path, checked: Counter[str]
) -> None:
    copy = _copy(built, tmp_path)
    shard = next((copy / "data" / "stsb").glob("train-*.parquet"))
    table = pq.read_table(shard)
    queries = table.column("query").to_pylist()
    queries[7] = "   "
    pq.write_table(table.set_column(table.schema.get_field_index("query"), "query", [queries]), shard)
    with pytest.raises(UnifiedSchemaError) as refused:
        stream_unified(copy)
    message = str(refused.value)
    assert str(shard) in message and "row 7" in message and "'query'" in message, message
    assert set(checked) == {"stsb"}  # the other tasks' shards are as recorded


def test_validate_records_a_folder_readers_then_skip(built: Path, tmp_path: Path, checked: Counter[str]) -> None:
    copy = _copy(built, tmp_path)
    (copy / CHECK_RECORD).unlink()
    stream_unified(copy)
    tasks = set(checked)
    # No record: every task with a train split is checked.
    assert tasks == {path.parent.name for path in _shards(copy) if path.name.startswith("train-")}
    checked.clear()
    assert main(["validate", str(copy)]) == 0
    assert (copy / CHECK_RECORD).is_file() and not_written_by_tool(copy) is None
    checked.clear()
    stream_unified(copy)
    assert checked == Counter()


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],  # truncated
        lambda text: text.replace('"rows": ', '"rows": 1', 1),  # a count edited: the record's digest no longer fits
        lambda text: text.replace(f'"version": {CHECK_VERSION}', '"version": 0'),  # an older check's
        lambda text: "[]",
    ],
)
def test_a_damaged_edited_or_older_record_counts_for_nothing(
    built: Path, tmp_path: Path, checked: Counter[str], damage: Any
) -> None:
    copy = _copy(built, tmp_path)
    record = copy / CHECK_RECORD
    record.write_text(damage(record.read_text()))
    assert read_record(copy) == {}
    stream_unified(copy)
    assert checked  # the rows are checked, as for a folder without a record


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(touched=st.sets(st.integers(0, 20), max_size=3), rewrite=st.booleans())
def test_a_reader_checks_exactly_the_tasks_whose_shards_are_not_as_recorded(
    built: Path, tmp_path_factory: pytest.TempPathFactory, touched: set[int], rewrite: bool
) -> None:
    copy = _copy(built, tmp_path_factory.mktemp("touched"))
    shards = [path for path in _shards(copy) if path.name.startswith("train-")]
    changed = {shards[index % len(shards)] for index in touched}
    for path in changed:
        if rewrite:  # the same rows written again: another file, the same content
            pq.write_table(pq.read_table(path), path, compression="zstd")
        else:  # written to without a change of size: only its time tells
            info = path.stat()
            os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000))
    tasks: Counter[str] = Counter()
    original = row_check.check_task_rows

    def counting(batches: Any, task: str) -> int:
        tasks[task] += 1
        return original(batches, task)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(row_check, "check_task_rows", counting)
        stream_unified(copy)
    assert set(tasks) == {path.parent.name for path in changed}
