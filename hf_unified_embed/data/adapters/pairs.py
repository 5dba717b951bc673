"""Generic pair and triplet tables (JSON lines / JSON, CSV / TSV or Parquet) with configurable columns.

``pairs``: anchor + positive (+ optional score column, mapped from ``score_range`` onto [0, 1]).
``triplets``: anchor + positive + negative; a negative cell may hold one text or a list of texts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hf_unified_embed.data.readers import iter_table_records, parse_score, require_text
from hf_unified_embed.data.registry import AdapterContext, SourceFormatError, SourceRow, register_source_format


def _column(record: dict[str, Any], column: str, path: Path, line: int) -> Any:
    if column not in record:
        raise SourceFormatError(
            f"column missing; the record has {sorted(record)}",
            file=path,
            line=line,
            field=column,
            expected="the configured column name",
        )
    return record[column]


def _texts(value: Any, path: Path, line: int, field: str) -> list[str]:
    values = value if isinstance(value, list) else [value]
    return [require_text(text, file=path, line=line, field=field) for text in values]


@register_source_format("pairs")
def read_pairs(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    anchor_column: str = "anchor",
    positive_column: str = "positive",
    score_column: str | None = None,
    score_range: tuple[float, float] = (0.0, 1.0),
) -> Iterator[SourceRow]:
    """(anchor, positive[, score]) records; ``score`` maps ``(s − low) / (high − low)`` with ``score_range``."""
    low, high = float(score_range[0]), float(score_range[1])
    if not high > low:
        raise SourceFormatError(f"got {score_range!r}", field="score_range", expected="[low, high] with high > low")
    for path in files:
        for line, record in iter_table_records(path):
            row: dict[str, Any] = {
                "query": require_text(
                    _column(record, anchor_column, path, line), file=path, line=line, field=anchor_column
                ),
                "positives": _texts(_column(record, positive_column, path, line), path, line, positive_column),
            }
            if score_column is not None:
                score = parse_score(
                    _column(record, score_column, path, line),
                    file=path,
                    line=line,
                    field=score_column,
                    low=low,
                    high=high,
                )
                row["positive_scores"] = [score] * len(row["positives"])
            yield f"{path}:{line}", row


@register_source_format("triplets")
def read_triplets(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    anchor_column: str = "anchor",
    positive_column: str = "positive",
    negative_column: str = "negative",
) -> Iterator[SourceRow]:
    """(anchor, positive, negative) records; list-valued positive/negative cells are kept whole."""
    for path in files:
        for line, record in iter_table_records(path):
            yield (
                f"{path}:{line}",
                {
                    "query": require_text(
                        _column(record, anchor_column, path, line), file=path, line=line, field=anchor_column
                    ),
                    "positives": _texts(_column(record, positive_column, path, line), path, line, positive_column),
                    "negatives": _texts(_column(record, negative_column, path, line), path, line, negative_column),
                },
            )
