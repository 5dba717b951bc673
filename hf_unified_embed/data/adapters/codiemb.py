"""CoDiEmb / Youtu-Embedding training rows (``training/CoDiEmb`` JSON lines of youtu-embedding).

Each text is ``[task_instruction, instance_instruction, text]``; ``task_type`` is ``ir`` or ``sts``.
Mapping, following the official collator: the query's task instruction becomes
``query_instruction``; for ``sts`` the documents use the same instruction, for ``ir`` they get none.
A per-row instance instruction is part of the text (the collator prepends it), so it is prepended
here too. ``ir`` → ``retrieval``; scores are kept as given and must already lie in [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, SourceRow, register_source_format
from hf_unified_embed.errors import shown
from hf_unified_embed.utils.readers import iter_json_records, require_text
from hf_unified_embed.utils.table_blocks import table_reader

_TASK_TYPES = {"ir": "retrieval", "sts": "sts"}


def _text(value: Any, path: Path, line: int, field: str) -> tuple[str, str]:
    if not isinstance(value, list) or len(value) != 3 or not all(isinstance(part, str) for part in value):
        raise SourceFormatError(
            f"got {shown(value)}",
            file=path,
            line=line,
            field=field,
            expected="[task_instruction, instance_instruction, text]",
        )
    task_instruction, instance_instruction, text = value
    text = require_text(text, file=path, line=line, field=field)
    return task_instruction, f"{instance_instruction.strip()} {text}".strip()


def _scores(record: dict[str, Any], field: str, count: int, path: Path, line: int) -> list[float]:
    scores = record.get(field) or []
    if not isinstance(scores, list) or any(
        not isinstance(s, (int, float)) or not math.isfinite(s) or not 0 <= s <= 1 for s in scores
    ):
        raise SourceFormatError(
            f"got {shown(scores)}", file=path, line=line, field=field, expected="a list of numbers in [0, 1]"
        )
    if len(scores) not in (0, count):
        raise SourceFormatError(
            f"{len(scores)} scores for {count} texts", file=path, line=line, field=field, expected="one score per text"
        )
    return [float(s) for s in scores]


@register_source_format("codiemb")
@table_reader(per_file=True)  # each file (folder, dataset) is read on its own
def read_codiemb(files: Sequence[Path], context: AdapterContext) -> Iterator[SourceRow]:
    """Youtu-Embedding rows: task_type (ir/sts), query/positives/negatives as 3-part lists, scores."""
    for path in files:
        for line, record in iter_json_records(path):
            if not isinstance(record, dict):
                raise SourceFormatError(f"got {type(record).__name__}", file=path, line=line, expected="a JSON object")
            task_type = _TASK_TYPES.get(record.get("task_type"))  # type: ignore[arg-type]
            if task_type is None:
                raise SourceFormatError(
                    f"got {shown(record.get('task_type'))}",
                    file=path,
                    line=line,
                    field="task_type",
                    expected="'ir' or 'sts'",
                )
            instruction, query = _text(record.get("query"), path, line, "query")
            positives = [_text(value, path, line, "positives")[1] for value in record.get("positives") or []]
            negatives = [_text(value, path, line, "negatives")[1] for value in record.get("negatives") or []]
            yield (
                f"{path}:{line}",
                {
                    "task_type": task_type,
                    "query_instruction": instruction.strip(),
                    "document_instruction": instruction.strip() if task_type == "sts" else "",
                    "query": query,
                    "positives": positives,
                    "negatives": negatives,
                    "positive_scores": _scores(record, "positive_scores", len(positives), path, line),
                    "negative_scores": _scores(record, "negative_scores", len(negatives), path, line),
                },
            )
