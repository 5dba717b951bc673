"""Generic pair and triplet tables (JSON lines / JSON, CSV / TSV or Parquet) with configurable columns.

``pairs``: anchor + positive (+ optional score column, mapped from ``score_range`` onto [0, 1]).
``triplets``: anchor + positive + negative; a negative cell may hold one text or a list of texts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hf_unified_embed.data.source_formats import AdapterContext, SourceRow, register_source_format
from hf_unified_embed.utils.readers import (
    iter_table_records,
    parse_score,
    record_field,
    record_text,
    record_texts,
    score_bounds,
)


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
    low, high = score_bounds(score_range)
    for path in files:
        for line, record in iter_table_records(path):
            row: dict[str, Any] = {
                "query": record_text(record, anchor_column, file=path, line=line),
                "positives": record_texts(record, positive_column, file=path, line=line),
            }
            if score_column is not None:
                score = parse_score(
                    record_field(record, score_column, file=path, line=line),
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
                    "query": record_text(record, anchor_column, file=path, line=line),
                    "positives": record_texts(record, positive_column, file=path, line=line),
                    "negatives": record_texts(record, negative_column, file=path, line=line),
                },
            )
