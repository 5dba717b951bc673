"""The unified training-instance schema (CoDiEmb §2.1 plus INSTRUCTOR's instructions).

One row is one training instance ``(task, query, {d+}, {d-}, {y+}, {y-})`` with the instructions of
its task. Every adapter, the builder, the curriculum and the training bridge speak this schema.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from hf_unified_embed.errors import UnifiedSchemaError, shown
from hf_unified_embed.utils.naming import task_name_problem

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict, Features, Value

TASK_TYPES: tuple[str, ...] = ("retrieval", "sts", "pair_classification", "classification", "clustering")

#: The unified columns as Arrow types (what ``UNIFIED_FEATURES.arrow_schema`` is; a test keeps them equal).
#: Checking a folder needs only these, so ``validate`` does not import ``datasets`` (a second of start-up).
UNIFIED_ARROW_SCHEMA = pa.schema(
    [
        *((name, pa.string()) for name in ("task", "task_type", "query_instruction", "document_instruction", "query")),
        ("positives", pa.list_(pa.string())),
        ("negatives", pa.list_(pa.string())),
        ("positive_scores", pa.list_(pa.float32())),
        ("negative_scores", pa.list_(pa.float32())),
    ]
)

#: Optional column added by the curriculum planner: φ = cos(q, d+) − cos(q, d−) (Data-CUBE Eq. 8).
DIFFICULTY_COLUMN = "difficulty"

UNIFIED_COLUMNS: tuple[str, ...] = tuple(UNIFIED_ARROW_SCHEMA.names)
INSTRUCTION_COLUMNS: tuple[str, str] = ("query_instruction", "document_instruction")

if TYPE_CHECKING:
    UNIFIED_FEATURES: Features
    DIFFICULTY_FEATURE: Value


@functools.cache
def _features() -> dict[str, Any]:
    """``UNIFIED_FEATURES`` and ``DIFFICULTY_FEATURE``: ``datasets`` is imported when they are first used."""
    from datasets import Features, List, Value

    return {
        "UNIFIED_FEATURES": Features(
            {
                "task": Value("string"),
                "task_type": Value("string"),
                "query_instruction": Value("string"),
                "document_instruction": Value("string"),
                "query": Value("string"),
                "positives": List(Value("string")),
                "negatives": List(Value("string")),
                "positive_scores": List(Value("float32")),
                "negative_scores": List(Value("float32")),
            }
        ),
        "DIFFICULTY_FEATURE": Value("float32"),
    }


def __getattr__(name: str) -> Any:
    """The ``datasets`` features of the schema, made on first use (PEP 562): see :func:`_features`."""
    if name in ("UNIFIED_FEATURES", "DIFFICULTY_FEATURE"):
        return _features()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def unified_arrow_schema(with_difficulty: bool = False) -> pa.Schema:
    """:func:`unified_features` as Arrow types, without importing ``datasets``."""
    if with_difficulty:
        return UNIFIED_ARROW_SCHEMA.append(pa.field(DIFFICULTY_COLUMN, pa.float32()))
    return UNIFIED_ARROW_SCHEMA


def unified_features(with_difficulty: bool = False) -> Features:
    """The declared features, optionally with the curriculum's ``difficulty`` column."""
    from datasets import Features

    features = Features(dict(_features()["UNIFIED_FEATURES"]))
    if with_difficulty:
        features[DIFFICULTY_COLUMN] = _features()["DIFFICULTY_FEATURE"]
    return features


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_scores(scores: Any, texts: Any, name: str, text_name: str) -> str | None:
    if scores is None:
        return f"{name} is missing (use [] for no scores)"
    if not isinstance(scores, (list, tuple)):
        return f"expected a list of numbers, got {type(scores).__name__} {shown(scores)}"
    if len(scores) not in (0, len(texts)):
        return f"has {len(scores)} scores for {len(texts)} {text_name}; lengths must match (or scores be empty)"
    for score in scores:
        if score is not None and not _is_number(score):
            return f"contains {shown(score)} ({type(score).__name__}); expected numbers"
        if score is None or not math.isfinite(score):
            return f"contains a non-finite score {shown(score)}"
        if not 0.0 <= score <= 1.0:
            return f"contains {shown(score)}, outside [0, 1]; adapters must normalise scores"
    return None


def validate_row(
    row: Mapping[str, Any], index: int, source: str | None = None, *, expected_task: str | None = None
) -> None:
    """Check one unified row; raise :class:`UnifiedSchemaError` naming the row and field.

    The task name follows the naming rule (:mod:`hf_unified_embed.utils.naming`): it becomes a folder and a
    config name. With ``expected_task`` the row must belong to that task (the folder or key it is in).
    """
    task = row.get("task")

    def fail(field: str, message: str) -> UnifiedSchemaError:
        return UnifiedSchemaError(message, task=task, row=index, field=field, source=source)

    problem = task_name_problem(task)
    if problem:
        raise fail("task", problem)
    if expected_task is not None and task != expected_task:
        raise fail("task", f"the row belongs to task {shown(task)} but is stored under {shown(expected_task)}")
    if row.get("task_type") not in TASK_TYPES:
        raise fail("task_type", f"unknown task_type {shown(row.get('task_type'))}; expected one of {list(TASK_TYPES)}")
    for field in ("query_instruction", "document_instruction"):
        if not isinstance(row.get(field), str):
            raise fail(field, "instruction must be a string ('' for none)")
    query = row.get("query")
    if not isinstance(query, str) or not query.strip():
        raise fail("query", "query is empty")
    positives, negatives = row.get("positives"), row.get("negatives")
    if positives is None or negatives is None:
        raise fail("positives" if positives is None else "negatives", "list is missing (use [] for none)")
    for field, texts in (("positives", positives), ("negatives", negatives)):
        if not isinstance(texts, (list, tuple)):
            raise fail(field, f"expected a list of texts, got {type(texts).__name__} {shown(texts)}")
        for text in texts:
            if not isinstance(text, str) or not text.strip():
                raise fail(field, f"contains an empty or non-string text {shown(text)}")
    if not positives and row["task_type"] in ("retrieval", "sts", "pair_classification"):
        raise fail("positives", f"a {row['task_type']} row needs at least one positive")
    for field, texts, text_name in (
        ("positive_scores", positives, "positives"),
        ("negative_scores", negatives, "negatives"),
    ):
        problem = _check_scores(row.get(field), texts, field, text_name)
        if problem:
            raise fail(field, problem)
    if row["task_type"] == "sts" and len(row["positive_scores"]) != len(positives):
        raise fail(
            "positive_scores", f"an sts row needs exactly one score per positive, got {shown(row['positive_scores'])}"
        )
    difficulty = row.get(DIFFICULTY_COLUMN)
    if difficulty is not None and (not _is_number(difficulty) or not math.isfinite(difficulty)):
        raise fail(DIFFICULTY_COLUMN, f"difficulty must be finite, got {shown(difficulty)}")


def check_columns(column_names: Iterable[str], task: str | None = None, source: str | None = None) -> None:
    """Raise if required columns are missing or unknown ones are present."""
    names = set(column_names)
    missing = [c for c in UNIFIED_COLUMNS if c not in names]
    extra = sorted(names - set(UNIFIED_COLUMNS) - {DIFFICULTY_COLUMN})
    if missing:
        raise UnifiedSchemaError(f"missing columns {missing}", task=task, field=missing[0], source=source)
    if extra:
        raise UnifiedSchemaError(
            f"unexpected columns {extra}; the unified schema has {list(UNIFIED_COLUMNS)} (+ optional difficulty)",
            task=task,
            field=extra[0],
            source=source,
        )


class InstructionTracker:
    """Checks that every row of a task carries the same instructions (they become per-task prompts)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, str, str]] = {}

    def check(self, row: Mapping[str, Any], index: int, source: str | None = None) -> None:
        task = row["task"]
        current = (row["task_type"], row["query_instruction"], row["document_instruction"])
        first = self._seen.setdefault(task, current)
        if first == current:
            return
        for position, field in enumerate(("task_type", *INSTRUCTION_COLUMNS)):
            if first[position] != current[position]:
                raise UnifiedSchemaError(
                    f"differs within the task ({shown(current[position])} vs {shown(first[position])} in earlier rows); "
                    "instructions and task_type must be uniform per task",
                    task=task,
                    row=index,
                    field=field,
                    source=source,
                )


def task_instruction(table: pa.Table, column: str, task: str) -> str:
    """The one instruction of ``column`` in a task's Arrow ``table`` (``""`` for an empty table)."""
    values = pc.unique(table.column(column)).to_pylist()
    if len(values) > 1:
        raise UnifiedSchemaError(
            f"differs within the task ({shown(values[:3])}); instructions must be uniform per task",
            task=task,
            field=column,
        )
    return values[0] if values else ""


def _iter_rows(dataset: Dataset, batch_size: int = 1_000) -> Iterable[dict[str, Any]]:
    # Arrow batches are far faster to read than row-by-row indexing.
    for batch in dataset.iter(batch_size=batch_size):
        columns = list(batch)
        for values in zip(*(batch[c] for c in columns)):  # type: ignore[call-overload]
            yield dict(zip(columns, values))


def validate_unified(
    dataset: Dataset | DatasetDict | Iterable[Mapping[str, Any]],
    source: str | None = None,
    *,
    task: str | None = None,
) -> None:
    """Validate a unified dataset (a ``Dataset``, a ``DatasetDict`` of tasks, or an iterable of rows).

    Raises :class:`UnifiedSchemaError` naming the task, row index and field of the first problem.
    Row indices count within each dataset of a ``DatasetDict``, whose keys must be the rows' tasks;
    ``task`` asks the same of a single dataset.
    """
    from datasets import Dataset, DatasetDict

    if isinstance(dataset, DatasetDict):
        for name, split in dataset.items():
            validate_unified(split, source=source or name, task=name)
        return
    rows: Iterable[Mapping[str, Any]]
    if isinstance(dataset, Dataset):
        check_columns(dataset.column_names, source=source)
        rows = _iter_rows(dataset)
    else:
        rows = dataset
    tracker = InstructionTracker()
    for index, row in enumerate(rows):
        validate_row(row, index, source, expected_task=task)
        tracker.check(row, index, source)
