"""One row check: ``train`` refuses the rows ``validate`` refuses, with the same message, before anything loads.

* ``check_task_rows`` (vectorised: pyarrow column scans, then ``validate_row`` on the flagged rows only)
  raises exactly what checking every row one by one raises, or nothing when that raises nothing
  (hypothesis draws rows with every kind of broken field);
* for each task type and each score column, an out-of-range, NaN, infinite, missing or wrongly typed
  score makes ``train`` exit 2 with one line naming the file, task, row and field — the line
  ``validate`` prints for the same folder, behind the recipe's name — before ``datasets`` reads the
  folder (no lock file in its cache), the model loads or the output appears;
* the run trains on the first ``max_rows_per_task`` rows, so a bad row after them does not stop it.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.data.row_check import ROW_BATCH, check_task_rows
from hf_unified_embed.errors import UnifiedSchemaError
from hf_unified_embed.schema import TASK_TYPES, InstructionTracker, unified_features, validate_row

REPO = Path(__file__).resolve().parent.parent
PROPERTY = settings(
    max_examples=int(os.environ.get("ROW_PROPERTY_EXAMPLES", "30")),
    derandomize=os.environ.get("INPUT_PROPERTY_RANDOM") != "1",
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
#: One task per task type, named after it.
TASKS = {
    "ret": "retrieval",
    "sts": "sts",
    "pairs": "pair_classification",
    "cls": "classification",
    "clu": "clustering",
}
ROWS_PER_TASK = 5
LOSSES = {
    "retrieval": "MultiPositiveInfoNCELoss",
    "sts": "CoDiEmbSTSLoss",
    "pair_classification": "AnglEJointLoss",
    "classification": "MultiPositiveInfoNCELoss",
    "clustering": "MultiPositiveInfoNCELoss",
}


def _row(task: str, task_type: str, index: int) -> dict[str, Any]:
    return {
        "task": task,
        "task_type": task_type,
        "query_instruction": f"Represent the {task} query: ",
        "document_instruction": "",
        "query": f"query {index} of {task}",
        "positives": [f"positive {index}"],
        "negatives": [f"negative {index} a", f"negative {index} b"],
        "positive_scores": [0.05 + index / 20],
        "negative_scores": [0.0, 1.0],
    }


@pytest.fixture(scope="module")
def clean_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from datasets import Dataset, DatasetDict

    from hf_unified_embed.data import save_unified

    features = unified_features()
    data = DatasetDict(
        {
            task: Dataset.from_list([_row(task, kind, i) for i in range(ROWS_PER_TASK)], features=features)
            for task, kind in TASKS.items()
        }
    )
    return save_unified(data, tmp_path_factory.mktemp("rows") / "clean")


def _shard(folder: Path, task: str) -> Path:
    return folder / "data" / task / "train-00000-of-00001.parquet"


def _run(argv: list[str]) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, [line for line in err.getvalue().splitlines() if line.strip()]


def _recipe(folder: Path, base: str, output: Path, **data: Any) -> Path:
    recipe = folder.parent / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "base_model": base,
                "data": {"path": str(folder), **data},
                "losses": LOSSES,
                "training_args": {"max_steps": 1, "per_device_train_batch_size": 2},
                "output_dir": str(output),
            }
        )
    )
    return recipe


@pytest.fixture
def no_datasets_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """``datasets`` may not read the folder (it would write a lock file into its cache): the rows are refused first."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("datasets read the data folder before its rows were checked")

    monkeypatch.setattr("hf_unified_embed.data.hub_layout.load_dataset", refuse)


# -- the vectorised check is the row-by-row check ---------------------------------------------------------------

_BLANKS = st.sampled_from(["", " ", "\t\n", "\u2003", "\x1c", "\u3000 "])
_TEXT = st.one_of(st.sampled_from(["a text", " padded ", "x"]), _BLANKS, st.none())
_SCORE = st.one_of(
    st.floats(min_value=0, max_value=1),
    st.sampled_from([math.nan, math.inf, -math.inf, -1e-9, 1.000001, 5.0, -2.0]),
    st.none(),
)


@st.composite
def unified_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A task's rows, most of them valid, some broken in one or more fields."""
    count = draw(st.integers(1, 12))
    task_type = draw(st.sampled_from(TASK_TYPES))
    rows = []
    for index in range(count):
        row = _row("t", task_type, index)
        if draw(st.integers(0, 3)) == 0:  # break something
            field = draw(st.sampled_from([*sorted(row), "difficulty"]))
            if field == "task":
                row["task"] = draw(st.sampled_from(["other", "../x", "", None]))
            elif field == "task_type":
                row["task_type"] = draw(st.sampled_from([*TASK_TYPES, "nope", None]))
            elif field in ("query_instruction", "document_instruction"):
                row[field] = draw(st.sampled_from(["another: ", None]))
            elif field == "query":
                row["query"] = draw(_TEXT)
            elif field in ("positives", "negatives"):
                row[field] = draw(st.one_of(st.none(), st.lists(_TEXT, max_size=3)))
            elif field == "difficulty":
                row["difficulty"] = draw(st.sampled_from([math.nan, math.inf, 0.5, None]))
            else:
                row[field] = draw(st.one_of(st.none(), st.lists(_SCORE, max_size=4)))
        rows.append(row)
    if any("difficulty" in row for row in rows):
        for row in rows:
            row.setdefault("difficulty", 0.0)
    return rows


def _outcome(check: Any) -> str | None:
    try:
        check()
    except UnifiedSchemaError as error:
        return f"{type(error).__name__}: {error}"
    return None


@PROPERTY
@given(rows=unified_rows(), batch=st.integers(1, 5))
def test_the_vectorised_check_raises_what_the_row_by_row_check_raises(rows: list[dict[str, Any]], batch: int) -> None:
    schema = unified_features(with_difficulty="difficulty" in rows[0]).arrow_schema
    stored = pa.RecordBatch.from_pylist(rows, schema=schema).to_pylist()  # scores as float32, as a file holds them

    def one_by_one() -> None:
        tracker = InstructionTracker()
        for index, row in enumerate(stored):
            validate_row(row, index, source="f.parquet", expected_task="t")
            tracker.check(row, index, source="f.parquet")

    batches = [
        ("f.parquet", pa.RecordBatch.from_pylist(rows[start : start + batch], schema=schema))
        for start in range(0, len(rows), batch)
    ]
    assert _outcome(lambda: check_task_rows(batches, "t")) == _outcome(one_by_one)


# -- train refuses what validate refuses --------------------------------------------------------------------------

_KINDS = ("out_of_range", "nan", "inf", "missing_element", "missing_list", "count", "integer_out_of_range", "text")


@st.composite
def broken_scores(draw: st.DrawFn) -> tuple[str, str, int, str, Any]:
    task = draw(st.sampled_from(sorted(TASKS)))
    field = draw(st.sampled_from(["positive_scores", "negative_scores"]))
    row = draw(st.integers(0, ROWS_PER_TASK - 1))
    kind = draw(st.sampled_from(_KINDS))
    value: Any = {
        "out_of_range": draw(
            st.one_of(st.floats(min_value=1.001, max_value=1e30), st.floats(min_value=-1e30, max_value=-1e-3))
        ),
        "nan": math.nan,
        "inf": draw(st.sampled_from([math.inf, -math.inf])),
        "integer_out_of_range": draw(st.sampled_from([2, 5, -1, 100])),
    }.get(kind)
    return task, field, row, kind, value


def _break(folder: Path, task: str, field: str, row: int, kind: str, value: Any) -> Path:
    path = _shard(folder, task)
    table = pq.read_table(path)
    lists = table.column(field).to_pylist()
    item_type: pa.DataType = pa.float32()
    if kind == "missing_list":
        lists[row] = None
    elif kind == "count":
        lists[row] = [*lists[row], 0.5]
    elif kind == "missing_element":
        lists[row] = [None, *lists[row][1:]]
    elif kind == "integer_out_of_range":
        item_type = pa.int64()
        lists = [[round(score) for score in scores] for scores in lists]
        lists[row] = [value, *lists[row][1:]]
    elif kind == "text":
        item_type = pa.string()
        lists = [[str(score) for score in scores] for scores in lists]
    else:
        lists[row] = [value, *lists[row][1:]]
    index = table.schema.get_field_index(field)
    table = table.set_column(index, field, pa.array(lists, type=pa.list_(item_type)))
    pq.write_table(table, path)
    return path


@PROPERTY
@given(case=broken_scores())
def test_train_refuses_every_broken_score_as_validate_does(
    case: tuple[str, str, int, str, Any], clean_dir: Path, tiny_model_path: str, no_datasets_read: None
) -> None:
    task, field, row, kind, value = case
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "data"
        shutil.copytree(clean_dir, folder)
        path = _break(folder, task, field, row, kind, value)
        output = Path(scratch) / "model"
        recipe = _recipe(folder, tiny_model_path, output)

        code, lines = _run(["train", str(recipe)])
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, lines)
        named = [f"file '{path}'", f"task '{task}'", f"field '{field}'"]
        if kind != "text":  # a column of texts is refused as a column: it has no bad row, but its type
            named.append(f"row {row},")
        assert all(part in lines[0] for part in named), (named, lines[0])
        assert not output.exists() and sorted(p.name for p in Path(scratch).iterdir()) == ["data", "recipe.yaml"]

        validate_code, validate_lines = _run(["validate", str(folder)])
        assert validate_code == 2 and len(validate_lines) == 1, (validate_code, validate_lines)
        core = validate_lines[0].removeprefix("error: ")
        assert lines[0] == f"error: {recipe}: data: {core}"


def test_train_refuses_a_nan_score_in_a_real_process_and_leaves_no_cache(
    clean_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    """The issue's case as a user meets it: exit 2, one line, no traceback, nothing in datasets' cache."""
    folder = tmp_path / "data"
    shutil.copytree(clean_dir, folder)
    path = _break(folder, "sts", "positive_scores", 3, "nan", math.nan)
    recipe = _recipe(folder, tiny_model_path, tmp_path / "model")
    cache = tmp_path / "datasets-cache"
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    completed = subprocess.run(
        [sys.executable, "-m", "hf_unified_embed", "train", str(recipe)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert completed.returncode == 2, completed.stderr[-3000:]
    lines = completed.stderr.strip().splitlines()
    assert lines == [
        f"error: {recipe}: data: file '{path}', task 'sts', row 3, field 'positive_scores': "
        "contains a non-finite score nan"
    ]
    assert not cache.exists() or not any(cache.rglob("*")), sorted(cache.rglob("*"))
    assert not (tmp_path / "model").exists()


def test_the_run_checks_the_rows_it_trains_on(clean_dir: Path, tiny_model_path: str, tmp_path: Path) -> None:
    """``max_rows_per_task`` rows are trained on and checked; a bad row after them is not read (``validate``
    still refuses the folder)."""
    from hf_unified_embed.recipe import load_train_recipe
    from hf_unified_embed.recipe.run import check_recipe

    folder = tmp_path / "data"
    shutil.copytree(clean_dir, folder)
    _break(folder, "ret", "positive_scores", ROWS_PER_TASK - 1, "out_of_range", 5.0)
    checked = _recipe(folder, tiny_model_path, tmp_path / "model", tasks=["ret", "sts"], max_rows_per_task=3)
    assert "recipe " in check_recipe(load_train_recipe(checked))
    all_rows = _recipe(folder, tiny_model_path, tmp_path / "model", tasks=["ret", "sts"])
    code, lines = _run(["train", str(all_rows), "--check"])
    assert code == 2 and f"task 'ret', row {ROWS_PER_TASK - 1}, field 'positive_scores'" in lines[0]


def test_a_hub_dataset_is_checked_once_loaded(clean_dir: Path) -> None:
    """Rows that do not come from a local folder go through the same check on the loaded ``Dataset``."""
    from hf_unified_embed.data import load_unified
    from hf_unified_embed.data.row_check import check_dataset_rows

    dataset = load_unified(clean_dir, tasks=["sts"])["sts"]
    assert check_dataset_rows(dataset, "sts", "me/data/data/sts/train-*.parquet") == ROWS_PER_TASK
    broken = dataset.map(lambda row, i: {"positive_scores": [math.nan] if i == 2 else row["positive_scores"]},
                         with_indices=True)  # fmt: skip
    with pytest.raises(UnifiedSchemaError, match=r"task 'sts', row 2, field 'positive_scores': contains a non-finite"):
        check_dataset_rows(broken, "sts", "me/data/data/sts/train-*.parquet")
    assert check_dataset_rows(broken, "sts", "me/data", limit=2) == 2


def test_the_row_check_reads_large_data_by_columns(tmp_path: Path) -> None:
    """Two batches of valid rows and one bad row at the end: found, numbered across batches, and only the
    suspect rows become Python rows."""
    rows = ROW_BATCH + 10
    table = pa.table(
        {
            "task": ["t"] * rows,
            "task_type": ["sts"] * rows,
            "query_instruction": [""] * rows,
            "document_instruction": [""] * rows,
            "query": [f"q{i}" for i in range(rows)],
            "positives": [["p"]] * rows,
            "negatives": [[]] * rows,
            "positive_scores": [[0.5]] * (rows - 1) + [[1.5]],
            "negative_scores": [[]] * rows,
        },
        schema=unified_features().arrow_schema,
    )
    path = tmp_path / "train-00000-of-00001.parquet"
    pq.write_table(table, path)
    from hf_unified_embed.data.row_check import _shard_batches

    with pytest.raises(UnifiedSchemaError, match=rf"row {rows - 1}, field 'positive_scores': contains 1\.5"):
        check_task_rows(_shard_batches([path]), "t")
    assert check_task_rows(_shard_batches([path], limit=rows - 1), "t") == rows - 1


def test_a_blank_text_is_what_python_strips() -> None:
    """The column scan's whitespace is ``str.isspace``'s, which ``validate_row``'s ``text.strip()`` removes."""
    from hf_unified_embed.data.row_check import PYTHON_WHITESPACE

    assert set(PYTHON_WHITESPACE) == {code for code in range(0x110000) if chr(code).isspace()}


def test_every_blank_lead_byte_is_a_candidate() -> None:
    """The first-byte filter of the blank check keeps every text that starts with Python whitespace."""
    from hf_unified_embed.data.row_check import _BLANK_LEADS, PYTHON_WHITESPACE

    leads = set(_BLANK_LEADS.to_pylist())
    assert b"" in leads
    assert {chr(code).encode()[:1] for code in PYTHON_WHITESPACE} <= leads


def _text_characters() -> st.SearchStrategy[str]:
    from hf_unified_embed.data.row_check import PYTHON_WHITESPACE

    return st.sampled_from([chr(code) for code in PYTHON_WHITESPACE] + ["a", "é", "\u201c", "\u3001", "🙂"])


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.none() | st.text(_text_characters(), max_size=4), max_size=20),
    start=st.integers(min_value=0, max_value=3),
    large=st.booleans(),
)
def test_blank_texts_are_what_strip_empties(texts: list[str | None], start: int, large: bool) -> None:
    """The vectorised blank check flags exactly the texts that are missing or that ``str.strip()`` empties,
    for any mix of whitespace, lead-byte look-alikes (U+201C, U+3001) and text, sliced or large."""
    from hf_unified_embed.data.row_check import _missing_or_blank

    array = pa.array(texts, pa.large_string() if large else pa.string()).slice(min(start, len(texts)))
    expected = [text is None or not text.strip() for text in texts[min(start, len(texts)) :]]
    assert _missing_or_blank(array).tolist() == expected
