"""MEDI (INSTRUCTOR's Multitask Embeddings Data with Instructions).

A MEDI file is a JSON array (or JSON lines) of ``{"query": [instruction, text], "pos":
[instruction, text], "neg": [instruction, text], "task_name": ...}``. The query's instruction
becomes ``query_instruction`` and the positive's ``document_instruction``; ``task_name`` becomes
the row's task, so one MEDI source yields one unified task per MEDI task (filter with ``tasks``).
The task type is not stored in MEDI: set it in the recipe (``retrieval`` fits its pair tasks).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, SourceRow, register_source_format
from hf_unified_embed.errors import shown
from hf_unified_embed.utils.readers import iter_json_records, require_text
from hf_unified_embed.utils.table_blocks import table_reader


def _pair(value: Any, path: Path, line: int, field: str) -> tuple[str, str]:
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[0], str):
        raise SourceFormatError(
            f"got {shown(value)}", file=path, line=line, field=field, expected="[instruction, text]"
        )
    return value[0].strip(), require_text(value[1], file=path, line=line, field=field)


@register_source_format("medi")
@table_reader(per_file=True)  # each file (folder, dataset) is read on its own
def read_medi(
    files: Sequence[Path], context: AdapterContext, *, tasks: list[str] | None = None
) -> Iterator[SourceRow]:
    """MEDI records: query/pos/neg as [instruction, text] plus task_name (``tasks`` keeps only those)."""
    wanted = set(tasks) if tasks is not None else None
    for path in files:
        for line, record in iter_json_records(path):
            if not isinstance(record, dict):
                raise SourceFormatError(f"got {type(record).__name__}", file=path, line=line, expected="a MEDI object")
            task = record.get("task_name")
            if not isinstance(task, str) or not task.strip():
                raise SourceFormatError(
                    f"got {shown(task)}", file=path, line=line, field="task_name", expected="a task name"
                )
            if wanted is not None and task not in wanted:
                context.skip("task not selected")
                continue
            query_instruction, query = _pair(record.get("query"), path, line, "query")
            document_instruction, positive = _pair(record.get("pos"), path, line, "pos")
            negatives = [_pair(record["neg"], path, line, "neg")[1]] if record.get("neg") else []
            yield (
                f"{path}:{line}",
                {
                    "task": task.strip(),
                    "query_instruction": query_instruction,
                    "document_instruction": document_instruction,
                    "query": query,
                    "positives": [positive],
                    "negatives": negatives,
                },
            )
