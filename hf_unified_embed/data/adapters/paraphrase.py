"""Paraphrase-identification pairs: the Microsoft Research Paraphrase Corpus (MSRP).

Each pair becomes ``query`` = string 1, ``positives`` = [string 2] and ``positive_scores`` = [label]
(1.0 paraphrase, 0.0 not), the binary form of an STS score, for a ``pair_classification`` task.
With ``positives_only`` the non-paraphrase pairs are skipped instead, which turns the corpus into
plain (anchor, positive) pairs for contrastive training.

The builder reads the file a block at a time with pyarrow (``read_batches``); a block it cannot
convert exactly is read line by line, which raises the located error if there is one. The file may
also be read in parts by several processes (``splittable``: byte ranges of its unquoted lines).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, SourceRow, register_source_format
from hf_unified_embed.errors import shown
from hf_unified_embed.utils.readers import column_positions, iter_delimited, read_header, require_text
from hf_unified_embed.utils.table_blocks import (
    Part,
    TableBatch,
    check_part,
    iter_text_chunks,
    nonblank_texts,
    singleton_lists,
    strip_texts,
    tab_fields,
    table_reader,
)

_NOT_PARAPHRASE = "not a paraphrase"


def _header(path: Path, columns: tuple[str, str, str]) -> tuple[list[str], dict[str, int]]:
    header = read_header(path, delimiter="\t", quoting=csv.QUOTE_NONE)
    options = dict(zip(columns, ("label_column", "sentence1_column", "sentence2_column")))
    return header, column_positions(header, options, file=path)


def _rows(
    path: Path,
    records: Iterable[tuple[int, list[str]]],
    header: list[str],
    positions: dict[str, int],
    columns: tuple[str, str, str],
    positives_only: bool,
    context: AdapterContext,
) -> Iterator[SourceRow]:
    label_column, sentence1_column, sentence2_column = columns
    for line, fields in records:
        if len(fields) != len(header):
            raise SourceFormatError(
                f"found {len(fields)} tab-separated fields",
                file=path,
                line=line,
                expected=f"{len(header)} like the header row, separated by tabs (the msrp format has no delimiter option)",
            )
        label = fields[positions[label_column]].strip()
        if label not in ("0", "1"):
            raise SourceFormatError(
                f"got {shown(label)}", file=path, line=line, field=label_column, expected="1 (paraphrase) or 0"
            )
        if positives_only and label == "0":
            context.skip(_NOT_PARAPHRASE)
            continue
        query = require_text(fields[positions[sentence1_column]], file=path, line=line, field=sentence1_column)
        positive = require_text(fields[positions[sentence2_column]], file=path, line=line, field=sentence2_column)
        yield f"{path}:{line}", {"query": query, "positives": [positive], "positive_scores": [float(label)]}


def _table(fields: pa.Array, positions: dict[str, int], columns: tuple[str, str, str], positives_only: bool):
    label_column, sentence1_column, sentence2_column = columns
    labels = strip_texts(pc.list_element(fields, positions[label_column]))
    if not pc.all(pc.is_in(labels, value_set=pa.array(["0", "1"]))).as_py():
        return None, 0
    skipped = 0
    if positives_only:
        keep = pc.equal(labels, "1")
        skipped = len(labels) - pc.sum(keep).as_py()
        fields, labels = pc.filter(fields, keep), pc.filter(labels, keep)
    query = nonblank_texts(pc.list_element(fields, positions[sentence1_column]))
    positive = nonblank_texts(pc.list_element(fields, positions[sentence2_column]))
    if query is None or positive is None:
        return None, 0
    scores = pc.cast(labels, pa.float64())
    table = pa.table(
        {"query": query, "positives": singleton_lists(positive), "positive_scores": singleton_lists(scores)}
    )
    return table, skipped


def _batches(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    label_column: str = "Quality",
    sentence1_column: str = "#1 String",
    sentence2_column: str = "#2 String",
    positives_only: bool = False,
    part: Part | None = None,
) -> Iterator[TableBatch]:
    check_part(files, part)
    columns = (label_column, sentence1_column, sentence2_column)
    for path in files:
        header, positions = _header(path, columns)  # every part maps its columns by the header
        for chunk in iter_text_chunks(path, header=True, part=part):
            table, skipped = None, 0
            fields = tab_fields(chunk, len(header), len(header))
            if fields is not None and not len(fields):
                table = pa.table({"query": pa.array([], pa.string())})
            elif fields is not None:
                table, skipped = _table(fields, positions, columns, positives_only)
            if table is not None and skipped:
                context.skipped[_NOT_PARAPHRASE] += skipped
            yield TableBatch(
                table,
                partial(
                    _rows, path, chunk.delimited(delimiter="\t"), header, positions, columns, positives_only, context
                ),
            )


@register_source_format("msrp")
@table_reader(_batches, per_file=True, splittable=True)
def read_msrp(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    label_column: str = "Quality",
    sentence1_column: str = "#1 String",
    sentence2_column: str = "#2 String",
    positives_only: bool = False,
) -> Iterator[SourceRow]:
    """MSRP tab file with a header: Quality (1/0), #1 ID, #2 ID, #1 String, #2 String."""
    columns = (label_column, sentence1_column, sentence2_column)
    for path in files:
        header, positions = _header(path, columns)
        records = iter_delimited(path, delimiter="\t", quoting=csv.QUOTE_NONE, header=True)
        yield from _rows(path, records, header, positions, columns, positives_only, context)
