"""What ``validate`` and ``build`` print of a task's split, gathered from the record batches the row check
reads anyway, or from the tables a build's processes write (each piece's summary, merged in order)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hf_unified_embed.errors import SourceFormatError, one_line
from hf_unified_embed.schema import INSTRUCTION_COLUMNS


class TaskSummary:
    """What ``validate`` prints for one task's split (:func:`~hf_unified_embed.data.hub_layout.task_summary`'s
    fields), gathered batch by batch from the record batches the row check reads anyway."""

    def __init__(self) -> None:
        self.rows = self.positives = self.negatives = 0
        self.low: float | None = None
        self.high: float | None = None
        self.first: dict[str, Any] = {}

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        if not self.first and batch.num_rows:
            self.first = batch.slice(0, 1).select(["task_type", *INSTRUCTION_COLUMNS]).to_pylist()[0]
        self.rows += batch.num_rows
        self.positives += pc.sum(pc.list_value_length(batch.column("positives"))).as_py() or 0
        self.negatives += pc.sum(pc.list_value_length(batch.column("negatives"))).as_py() or 0
        for name in ("positive_scores", "negative_scores"):
            scores = pc.cast(pc.list_flatten(batch.column(name)), pa.float32())
            if len(scores) - scores.null_count:
                bounds = pc.min_max(scores).as_py()
                self.low = bounds["min"] if self.low is None else min(self.low, bounds["min"])
                self.high = bounds["max"] if self.high is None else max(self.high, bounds["max"])

    def merge(self, later: TaskSummary) -> None:
        """Add the summary of the rows that follow this one's (the next piece of the same task)."""
        if not self.first:
            self.first = later.first
        self.rows += later.rows
        self.positives += later.positives
        self.negatives += later.negatives
        for bound, pick in (("low", min), ("high", max)):
            mine, theirs = getattr(self, bound), getattr(later, bound)
            setattr(self, bound, theirs if mine is None else mine if theirs is None else pick(mine, theirs))

    def passing(self, batches: Iterable[tuple[str, pa.RecordBatch]]) -> Iterator[tuple[str, pa.RecordBatch]]:
        """``batches`` unchanged, each added to the summary on its way (to a row check that reads them anyway)."""
        for source, batch in batches:
            try:
                self.add(batch)
            except (pa.ArrowException, UnicodeDecodeError) as error:  # bytes no writer wrote: a damaged file
                raise SourceFormatError(
                    f"rows cannot be read ({type(error).__name__}: {one_line(error, 200)})",
                    file=source,
                    expected="a complete Parquet file",
                ) from None
            yield source, batch

    def result(self) -> dict[str, Any]:
        rows = self.rows
        return {
            "rows": rows,
            "task_type": self.first.get("task_type", ""),
            "positives_per_row": round(self.positives / rows, 2) if rows else 0.0,
            "negatives_per_row": round(self.negatives / rows, 2) if rows else 0.0,
            "score_min": self.low,
            "score_max": self.high,
            "query_instruction": self.first.get("query_instruction", ""),
            "document_instruction": self.first.get("document_instruction", ""),
        }
