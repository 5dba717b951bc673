"""Files already in the unified schema (JSON lines or Parquet), e.g. exported by another tool.

Rows are passed through unchanged (the builder still validates them); a ``task`` column splits the
source into several tasks. With ``with_difficulty`` the curriculum's ``difficulty`` column is kept.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, SourceRow, register_source_format
from hf_unified_embed.schema import DIFFICULTY_COLUMN, UNIFIED_COLUMNS
from hf_unified_embed.utils.readers import iter_table_records
from hf_unified_embed.utils.table_blocks import table_reader


@register_source_format("unified", with_difficulty_option=True)
@table_reader(per_file=True)  # each file (folder, dataset) is read on its own
def read_unified(
    files: Sequence[Path], context: AdapterContext, *, with_difficulty: bool = False
) -> Iterator[SourceRow]:
    """Unified rows (any subset of the unified columns; ``query`` required)."""
    allowed = set(UNIFIED_COLUMNS) | ({DIFFICULTY_COLUMN} if with_difficulty else set())
    for path in files:
        for line, record in iter_table_records(path):
            extra = sorted(set(record) - allowed)
            if extra:
                hint = " (set options.with_difficulty: true to keep it)" if extra == [DIFFICULTY_COLUMN] else ""
                raise SourceFormatError(
                    f"unexpected column(s) {extra}{hint}",
                    file=path,
                    line=line,
                    field=extra[0],
                    expected=f"only {sorted(allowed)}",
                )
            if with_difficulty and DIFFICULTY_COLUMN not in record:
                raise SourceFormatError(
                    "column missing",
                    file=path,
                    line=line,
                    field=DIFFICULTY_COLUMN,
                    expected="a float difficulty on every row with options.with_difficulty: true",
                )
            yield f"{path}:{line}", dict(record)
