"""Queries with a list of judged documents, split into positives and negatives by a field of each document.

One record per query, as search logs and relevance judgements are often exported::

    {"query": {"text": "how do I reset my password"},
     "docs": [{"text": "Open Settings, then Security …", "relevant": true},
              {"text": "Our office hours are …", "relevant": false}]}

``query_column`` names the query's text (a dotted path into nested objects, ``query.text``),
``documents_column`` the list of documents, ``text_field`` each document's text and ``judgment_field``
the field that decides its side. ``positive_when`` says how: ``true`` (the default) for a boolean field,
a label or a list of labels (``[relevant, highly relevant]``) for a label field, ``{at_least: 2}`` for a
score field (a document scored 2 or more is a positive). Every other document is a negative. A query
without a positive document has nothing to train retrieval with: it is skipped and counted.

Files are JSON lines, a JSON array or Parquet (a list column of structs): delimited text has no lists.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import PlainValidator
from pydantic_core import PydanticCustomError

from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, SourceRow, register_source_format
from hf_unified_embed.errors import shown
from hf_unified_embed.utils.readers import (
    JSON_SUFFIXES,
    PARQUET_SUFFIXES,
    iter_table_records,
    record_field,
    record_text,
)
from hf_unified_embed.utils.table_blocks import table_reader

#: Why a query is skipped: none of its documents is judged a positive.
NO_POSITIVE = "no positive document"


Label = bool | int | str


def _positive_when(value: object) -> object:
    # Checked when the recipe is loaded, so that a wrong value is named with its recipe and source.
    labels = value if isinstance(value, list) else [value]
    if isinstance(value, dict):
        threshold = value.get("at_least")
        if set(value) == {"at_least"} and isinstance(threshold, (int, float)) and not isinstance(threshold, bool):
            return value
    elif labels and all(isinstance(label, (bool, int, str)) for label in labels):
        return value
    raise PydanticCustomError(
        "positive_when", "input should be true, a label, a list of labels or {at_least: a number}"
    )


#: What makes a document a positive: a label (``true`` for a boolean field), any of several, or a least score.
PositiveWhen = Annotated[Label | list[Label] | dict[str, float], PlainValidator(_positive_when)]


def _is_positive(value: Any, positive_when: PositiveWhen, *, file: Path, line: int, field: str) -> bool:
    """Whether a document whose judgment is ``value`` is a positive; a judgment of the wrong kind is an error."""
    if isinstance(positive_when, dict):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SourceFormatError(
                f"got {shown(value)}",
                file=file,
                line=line,
                field=field,
                expected="a number, as options.positive_when {at_least: ...} compares it with a threshold",
            )
        return bool(value >= positive_when["at_least"])
    labels = positive_when if isinstance(positive_when, list) else [positive_when]
    if labels == [True] and not isinstance(value, bool):
        raise SourceFormatError(
            f"got {shown(value)}",
            file=file,
            line=line,
            field=field,
            expected="true or false; for labels set options.positive_when to the positive label(s), for scores "
            "to {at_least: THRESHOLD}",
        )
    # `True == 1` in Python: a label compares with its own kind only, so a 1 is not read as `true`.
    return any(type(value) is type(label) and value == label for label in labels)


def _documents(
    record: dict[str, Any], options: tuple[str, str, str, PositiveWhen], *, file: Path, line: int
) -> tuple[list[str], list[str]]:
    """The texts of a record's positive and negative documents, in the list's order."""
    documents_column, text_field, judgment_field, positive_when = options
    documents = record_field(record, documents_column, file=file, line=line, option="documents_column")
    if not isinstance(documents, list):
        raise SourceFormatError(
            f"got {shown(documents, 80)}", file=file, line=line, field=documents_column, expected="a list of objects"
        )
    positives: list[str] = []
    negatives: list[str] = []
    for index, document in enumerate(documents):
        where = f"{documents_column}[{index}]"
        if not isinstance(document, dict):
            raise SourceFormatError(
                f"got {shown(document, 80)}", file=file, line=line, field=where, expected="an object"
            )
        text = record_text(document, text_field, file=file, line=line, option="text_field")
        judgment = record_field(document, judgment_field, file=file, line=line, option="judgment_field")
        side = _is_positive(judgment, positive_when, file=file, line=line, field=f"{where}.{judgment_field}")
        (positives if side else negatives).append(text)
    return positives, negatives


@register_source_format("judged-documents")
@table_reader(per_file=True)  # each file is read on its own
def read_judged_documents(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    query_column: str = "query",
    documents_column: str = "documents",
    text_field: str = "text",
    judgment_field: str = "relevant",
    positive_when: PositiveWhen = True,
) -> Iterator[SourceRow]:
    """A query and a list of judged documents per record, split into positives and negatives by a field.

    ``query_column`` and ``documents_column`` may be dotted paths into nested objects (``query.text``);
    ``text_field`` and ``judgment_field`` name fields of each document. ``positive_when``: ``true`` (a
    boolean field), a label or list of labels, or ``{at_least: score}``. Queries without a positive are
    skipped and counted.
    """
    options = (documents_column, text_field, judgment_field, positive_when)
    for path in files:
        if path.suffix.lower() not in (*JSON_SUFFIXES, *PARQUET_SUFFIXES):
            raise SourceFormatError(
                f"a {path.suffix or 'suffix-less'} file is read as delimited text, which holds no list of documents",
                file=path,
                field=documents_column,
                expected="a .jsonl, .json or .parquet file whose records hold a list of document objects",
            )
        for line, record in iter_table_records(path):
            query = record_text(record, query_column, file=path, line=line, option="query_column")
            positives, negatives = _documents(record, options, file=path, line=line)
            if not positives:
                context.skip(NO_POSITIVE)
                continue
            yield f"{path}:{line}", {"query": query, "positives": positives, "negatives": negatives}
