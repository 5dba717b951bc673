"""Records of a BEIR folder as the row path reads them: documents, judgements, mined negatives.

Shared by the row path (:mod:`~hf_unified_embed.data.adapters.beir`, which joins them in SQLite and
names file, line and field of every problem) and the column path
(:mod:`~hf_unified_embed.data.adapters.beir_join`), which reads a block with pyarrow where that gives
the same values and falls back to these readers where it might not.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hf_unified_embed.data.source_formats import SourceFormatError
from hf_unified_embed.errors import shown
from hf_unified_embed.utils.readers import is_json_array, iter_delimited, iter_json_records
from hf_unified_embed.utils.table_blocks import strip_texts

#: The ``kind`` of a link: a judged positive, or a negative (a grade-0 judgement or a mined negative).
POSITIVE, NEGATIVE = 1, 0

DOCUMENT_SCHEMA = pa.schema([("_id", pa.string()), ("text", pa.string()), ("title", pa.string())])
NEGATIVES_SCHEMA = pa.schema([("query-id", pa.string()), ("corpus-ids", pa.list_(pa.string()))])

Link = tuple[str, str, int, "float | None", int, int]  # query id, corpus id, kind, grade, file, line


def document_rows(path: Path, records: Iterable[tuple[int, Any]], include_title: bool) -> Iterator[tuple[str, str]]:
    """``(id, text)`` of corpus or queries records; the title joined before the text with ``include_title``."""
    for line, record in records:
        if not isinstance(record, dict) or "_id" not in record or not isinstance(record.get("text"), str):
            raise SourceFormatError(
                "bad record", file=path, line=line, field="_id/text", expected='{"_id": ..., "text": "..."}'
            )
        text = record["text"].strip()
        title = record.get("title") or ""
        if include_title and isinstance(title, str) and title.strip():
            text = f"{title.strip()} {text}".strip()
        if not text:
            raise SourceFormatError("empty text", file=path, line=line, field="text", expected="a non-empty string")
        yield str(record["_id"]), text


def duplicate_id_error(path: Path, duplicate: str | None = None) -> SourceFormatError:
    """The error for a corpus or queries file that holds an ``_id`` twice: the id and the lines that hold it.

    Called once a duplicate is known to exist (it reads the file again). ``duplicate``: the id, where the
    caller knows it; otherwise the first id met a second time (the ids read are kept until then).
    """
    lines: dict[str, list[int]] = {}
    for line, record in iter_json_records(path):
        if not isinstance(record, dict) or "_id" not in record:
            continue
        key = str(record["_id"])
        if duplicate is None or key == duplicate:
            lines.setdefault(key, []).append(line)
            if duplicate is None and len(lines[key]) > 1:
                duplicate = key
                break
    found = lines.get(duplicate, []) if duplicate is not None else []
    where = "elements" if is_json_array(path) else "lines"
    listed = [str(number) for number in found[:10]] + ([f"{len(found) - 10} more"] if len(found) > 10 else [])
    shown_lines = ", ".join(listed[:-1]) + f" and {listed[-1]}" if len(listed) > 1 else "".join(listed)
    return SourceFormatError(
        f"duplicate _id {shown(duplicate)}" + (f" on {where} {shown_lines}" if found else ""),
        file=path,
        line=found[1] if len(found) > 1 else None,
        field="_id",
        expected="each _id once in the file",
    )


def document_columns(table: pa.Table, include_title: bool) -> tuple[pa.Array, pa.Array] | None:
    """Ids and texts of a block of records pyarrow read (``DOCUMENT_SCHEMA``), as :func:`document_rows`
    gives them; ``None`` where a text is empty (the block is then read record by record, which raises)."""
    text = strip_texts(table.column("text"))
    if include_title:
        title = strip_texts(pc.fill_null(table.column("title"), ""))
        joined = strip_texts(pc.binary_join_element_wise(title, text, " "))
        text = pc.if_else(pc.greater(pc.binary_length(title), 0), joined, text)
    if len(text) and pc.min(pc.binary_length(text)).as_py() == 0:
        return None
    return table.column("_id").combine_chunks(), text.combine_chunks()


def qrels_links(path: Path, file_index: int, zero_grade_as_negatives: bool) -> Iterator[Link]:
    """The judgements of a qrels file (3 fields, or TREC's 4; a header line skipped)."""
    for line, fields in iter_delimited(path, delimiter="\t", quoting=csv.QUOTE_NONE):
        if len(fields) == 4:  # TREC style: query-id, iteration, corpus-id, grade
            fields = [fields[0], fields[2], fields[3]]
        if len(fields) != 3:
            raise SourceFormatError(
                f"found {len(fields)} tab-separated fields",
                file=path,
                line=line,
                expected="query-id, corpus-id, score separated by tabs (or TREC's four)",
            )
        try:
            grade = float(fields[2])
        except ValueError:
            if line == 1:  # the usual "query-id corpus-id score" header
                continue
            raise SourceFormatError(
                f"got {shown(fields[2])}", file=path, line=line, field="score", expected="a number"
            ) from None
        if not math.isfinite(grade):
            raise SourceFormatError(
                f"got {shown(fields[2])}", file=path, line=line, field="score", expected="a finite number"
            )
        if grade > 0:
            yield fields[0], fields[1], POSITIVE, grade, file_index, line
        elif zero_grade_as_negatives:
            yield fields[0], fields[1], NEGATIVE, 0.0, file_index, line


def mined_negative_rows(path: Path, records: Iterable[tuple[int, Any]], file_index: int) -> Iterator[Link]:
    """The links of mined-negatives records ``{"query-id": ..., "corpus-ids": [...]}``."""
    for line, record in records:
        ids = record.get("corpus-ids") if isinstance(record, dict) else None
        if not isinstance(ids, list) or "query-id" not in record:
            raise SourceFormatError(
                "bad record",
                file=path,
                line=line,
                field="corpus-ids",
                expected='{"query-id": ..., "corpus-ids": [...]}',
            )
        for corpus_id in ids:
            yield str(record["query-id"]), str(corpus_id), NEGATIVE, None, file_index, line
