"""A damaged unified folder is read correctly or refused in one located line, by every reader.

Drawn: a shard, the card, the manifest or the check record truncated at a drawn byte or with a drawn byte
flipped; a card field (``num_examples``, a split name, a config name) set to a drawn value of another type or
range; a zero-row shard added. ``validate``, ``load_unified`` and ``stream_unified`` (in process) either accept
the folder — and then every row they give passes the schema's rules and every declared row count is the rows
the shards hold — or raise an :class:`~hf_unified_embed.errors.HfUnifiedEmbedError` of one line naming a file
of the folder. A few damages also go through the command line (``validate``, ``train --check``): exit 2 and
one ``error:`` line, never a traceback.

Before: an edited ``num_examples`` passed ``validate`` and weighed a task to probability 0.0; a zero-row shard
passed ``validate``; a binary card was a ``UnicodeDecodeError`` traceback.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from datasets import Dataset, DatasetDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.data import load_unified, save_unified, stream_unified
from hf_unified_embed.data.check_record import CHECK_RECORD
from hf_unified_embed.data.row_check import validate_unified_folder
from hf_unified_embed.errors import HfUnifiedEmbedError
from hf_unified_embed.schema import InstructionTracker, unified_features, validate_row
from hf_unified_embed.utils.outputs import MARKER

REPO = Path(__file__).resolve().parent.parent
ROWS = {"pairs": 40, "scored": 24}


def _task(name: str, rows: int) -> Dataset:
    sts = name == "scored"
    return Dataset.from_dict(
        {
            "task": [name] * rows,
            "task_type": ["sts" if sts else "retrieval"] * rows,
            "query_instruction": [""] * rows,
            "document_instruction": [""] * rows,
            "query": [f"question {index} about {name}" for index in range(rows)],
            "positives": [[f"answer {index} é 漢"] for index in range(rows)],
            "negatives": [[] if sts else [f"other {index}"] for index in range(rows)],
            "positive_scores": [[(index % 5) / 4] if sts else [] for index in range(rows)],
            "negative_scores": [[] for _ in range(rows)],
        },
        features=unified_features(),
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two small tasks, ``pairs`` in two shards (a shard count other than 1 is worth damaging)."""
    out = tmp_path_factory.mktemp("damaged") / "data"
    save_unified(DatasetDict({name: _task(name, rows) for name, rows in ROWS.items()}), out, max_shard_bytes=3000)
    assert (out / CHECK_RECORD).is_file()
    return out


def _copy(folder: Path, root: Path) -> Path:
    target = root / "copy"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(folder, target)  # copy2: sizes and modification times kept, so the record still holds
    return target


def _files(folder: Path) -> dict[str, list[Path]]:
    return {
        "shard": sorted(folder.glob("data/*/*.parquet")),
        "card": [folder / "README.md"],
        "manifest": [folder / MARKER],
        "record": [folder / CHECK_RECORD],
    }


def _front_matter(card: Path) -> dict[str, Any]:
    text = card.read_text(encoding="utf-8")
    return yaml.safe_load(text.split("---", 2)[1])


def _write_front_matter(card: Path, data: dict[str, Any]) -> None:
    text = card.read_text(encoding="utf-8")
    body = text.split("---", 2)[2]
    card.write_text(f"---\n{yaml.safe_dump(data, sort_keys=False)}---{body}", encoding="utf-8")


#: Values of other types and ranges than a card field's.
OTHER_VALUES = st.one_of(
    st.integers(-3, 10_000),
    st.booleans(),
    st.none(),
    st.text("abcxyz-_ 0", max_size=6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.lists(st.integers(0, 3), max_size=2),
    st.just({"k": 1}),
)


@st.composite
def damages(draw: st.DrawFn) -> tuple[str, Callable[[Path], None]]:
    """A description of a damage and the function that does it to a copy of the folder."""
    kind = draw(st.sampled_from(["truncate", "flip", "card field", "empty shard"]))
    if kind in ("truncate", "flip"):
        which = draw(st.sampled_from(["shard", "card", "manifest", "record"]))
        pick = draw(st.integers(0, 10))
        fraction = draw(st.floats(0, 1, exclude_max=True))
        bit = draw(st.integers(0, 7))

        def damage(copy: Path) -> None:
            files = _files(copy)[which]
            path = files[pick % len(files)]
            data = bytearray(path.read_bytes())
            at = int(fraction * len(data))
            if kind == "truncate":
                del data[at:]
            else:
                data[at] ^= 1 << bit
            path.write_bytes(bytes(data))

        return f"{kind} {which} #{pick} at {fraction:.3f} (bit {bit})", damage
    if kind == "card field":
        field = draw(st.sampled_from(["num_examples", "split", "config_name", "info config_name"]))
        value = draw(OTHER_VALUES)
        index = draw(st.integers(0, 3))

        def damage(copy: Path) -> None:
            card = copy / "README.md"
            data = _front_matter(card)
            infos, configs = data["dataset_info"], data["configs"]
            if field == "num_examples":
                infos[index % len(infos)]["splits"][0]["num_examples"] = value
            elif field == "info config_name":
                infos[index % len(infos)]["config_name"] = value
            elif field == "split":
                configs[index % len(configs)]["data_files"][0]["split"] = value
            else:
                configs[index % len(configs)]["config_name"] = value
            _write_front_matter(card, data)

        return f"card {field} #{index} = {value!r}", damage
    task = draw(st.sampled_from(sorted(ROWS)))

    def damage(copy: Path) -> None:
        shards = sorted((copy / "data" / task).glob("train-*.parquet"))
        count = len(shards) + 1
        for index, shard in enumerate(shards):
            shard.rename(shard.with_name(f"train-{index:05d}-of-{count:05d}.parquet"))
        schema = pq.read_schema(shards[0].with_name(f"train-00000-of-{count:05d}.parquet"))
        pq.write_table(schema.empty_table(), copy / "data" / task / f"train-{count - 1:05d}-of-{count:05d}.parquet")

    return f"empty shard in {task}", damage


def _refused_in_one_located_line(error: HfUnifiedEmbedError, copy: Path) -> None:
    message = str(error)
    assert "\n" not in message, message
    assert str(copy) in message, message  # the file (or the folder) it is about


def _rows_valid(rows: list[dict[str, Any]], task: str) -> None:
    tracker = InstructionTracker()
    for index, row in enumerate(rows):
        validate_row(row, index, source=task, expected_task=task)
        tracker.check(row, index, source=task)


def _footer_rows(copy: Path) -> dict[str, int]:
    return {
        task: sum(pq.read_metadata(path).num_rows for path in copy.glob(f"data/{task}/train-*.parquet"))
        for task in ROWS
    }


def _readers(copy: Path, cache: Path) -> None:
    """Every reader on ``copy``: each accepts it with valid rows and true counts, or refuses in one line."""
    # Read only once a reader accepted the folder: then every shard's footer is readable.
    footers = functools.partial(_footer_rows, copy)
    try:
        layout = validate_unified_folder(copy, record=False)
    except HfUnifiedEmbedError as error:
        _refused_in_one_located_line(error, copy)
    else:
        assert {task: layout.summaries[task, "train"]["rows"] for task in ROWS} == footers()
    try:
        streams = stream_unified(copy)
    except HfUnifiedEmbedError as error:
        _refused_in_one_located_line(error, copy)
    else:
        for task, stream in streams.items():
            try:
                rows = list(stream)
            except HfUnifiedEmbedError as error:  # a file damaged where no footer or time shows it
                _refused_in_one_located_line(error, copy)
                continue
            assert stream.info.splits["train"].num_examples == len(rows) == footers()[task], task
            _rows_valid(rows, task)
    try:
        loaded = load_unified(copy, cache_dir=str(cache))
    except HfUnifiedEmbedError as error:
        _refused_in_one_located_line(error, copy)
    else:
        for task, dataset in loaded.items():
            assert len(dataset) == footers()[task], task
            _rows_valid(list(dataset), task)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(damage=damages())
def test_every_reader_reads_a_damaged_folder_correctly_or_refuses_it_in_one_line(
    folder: Path, tmp_path: Path, damage: tuple[str, Callable[[Path], None]]
) -> None:
    copy = _copy(folder, tmp_path)
    damage[1](copy)
    cache = tmp_path / "cache"
    try:
        _readers(copy, cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(
        [sys.executable, "-m", "hf_unified_embed", *arguments], capture_output=True, text=True, timeout=300, env=env
    )


def _edit_count(copy: Path) -> None:
    data = _front_matter(copy / "README.md")
    data["dataset_info"][0]["splits"][0]["num_examples"] = 0
    _write_front_matter(copy / "README.md", data)


def _binary_card(copy: Path) -> None:
    (copy / "README.md").write_bytes(bytes(range(256)) * 4)


def _empty_shard(copy: Path) -> None:
    shard = next((copy / "data" / "scored").glob("train-*.parquet"))
    shard.rename(shard.with_name("train-00000-of-00002.parquet"))
    pq.write_table(
        pq.read_schema(shard.with_name("train-00000-of-00002.parquet")).empty_table(),
        shard.with_name("train-00001-of-00002.parquet"),
    )


def _broken_yaml(copy: Path) -> None:
    text = (copy / "README.md").read_text(encoding="utf-8")
    (copy / "README.md").write_text(text.replace("configs:", "configs: [", 1), encoding="utf-8")


def _errors(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (_edit_count, "field 'num_examples': says 0 rows, but its shards"),
        (_binary_card, "not a readable dataset card"),
    ],
)
def test_validate_refuses_with_exit_2_and_one_line(
    folder: Path, tmp_path: Path, damage: Callable[[Path], None], expected: str
) -> None:
    copy = _copy(folder, tmp_path)
    damage(copy)
    errors = _errors(_cli("validate", str(copy)))
    assert len(errors) == 1 and expected in errors[0] and str(copy) in errors[0], errors


def test_train_check_refuses_an_empty_shard_with_exit_2_and_one_line(
    folder: Path, tmp_path: Path, tiny_model_path: str
) -> None:
    copy = _copy(folder, tmp_path)
    _empty_shard(copy)
    recipe = {
        "base_model": tiny_model_path,
        "data": {"path": str(copy), "streaming": True},
        "losses": {"retrieval": "MultiPositiveInfoNCELoss", "sts": "CoDiEmbSTSLoss"},
        "training_args": {"max_steps": 2, "per_device_train_batch_size": 4},
        "output_dir": str(tmp_path / "model"),
    }
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    errors = _errors(_cli("train", str(tmp_path / "recipe.yaml"), "--check"))
    assert len(errors) == 1 and "holds no rows" in errors[0] and str(copy) in errors[0], errors


@pytest.mark.parametrize("damage", [_binary_card, _broken_yaml, _empty_shard, _edit_count])
def test_damages_that_passed_or_raised_before_are_refused_in_one_line(
    folder: Path, tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    copy = _copy(folder, tmp_path)
    damage(copy)
    for reader in (validate_unified_folder, stream_unified):
        with pytest.raises(HfUnifiedEmbedError) as refused:
            reader(copy)
        _refused_in_one_located_line(refused.value, copy)


def test_an_edited_count_no_longer_weighs_a_task_to_zero(folder: Path, tmp_path: Path) -> None:
    """The stream declares the rows its shards hold: a card without counts still weighs every task."""
    copy = _copy(folder, tmp_path)
    data = _front_matter(copy / "README.md")
    del data["dataset_info"]
    _write_front_matter(copy / "README.md", data)
    from hf_unified_embed.sampling import MultiTaskStream

    stream = MultiTaskStream(stream_unified(copy), weights="none")
    assert dict(zip(stream.task_names, stream.probabilities.tolist())) == pytest.approx(
        {task: rows / sum(ROWS.values()) for task, rows in ROWS.items()}
    )
    copy = _copy(folder, tmp_path)
    _edit_count(copy)
    with pytest.raises(HfUnifiedEmbedError, match="num_examples"):
        stream_unified(copy)


def test_a_zero_row_table_is_not_written_as_a_valid_folder(tmp_path: Path) -> None:
    """The rule the readers hold a folder to is the writers' too: an empty task is refused before writing."""
    empty = _task("pairs", 0)
    with pytest.raises(HfUnifiedEmbedError):
        save_unified(DatasetDict({"pairs": empty}), tmp_path / "out")
    assert not (tmp_path / "out").exists()
