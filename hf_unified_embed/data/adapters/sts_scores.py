"""Semantic-similarity sources with graded scores: STS Benchmark, SICK and the SemEval STS files.

Scores are mapped linearly onto [0, 1]: STS-B ``score / 5``, SICK relatedness ``(s − 1) / 4``,
SemEval STS ``score / 5``. Each pair becomes one row: ``query`` = first sentence,
``positives`` = [second sentence], ``positive_scores`` = [normalised score].

Each format also reads its files a block at a time with pyarrow (``read_batches``, used by the
builder): lines split and scores parsed and mapped column by column. A block that pyarrow cannot
convert exactly as the per-line code would (a short line, a score Python reads and Arrow does not, a
blank sentence) is read line by line instead, which raises the located error if there is one.
The files are unquoted tab-separated lines, so one file may also be read in parts by several
processes (``splittable``: byte ranges of whole lines).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Annotated

import pyarrow as pa
import pyarrow.compute as pc
from annotated_types import Gt

from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, SourceRow, register_source_format
from hf_unified_embed.utils.readers import column_positions, iter_delimited, parse_score, read_header, require_text
from hf_unified_embed.utils.table_blocks import (
    Part,
    TableBatch,
    check_part,
    iter_text_chunks,
    mapped_scores,
    nonblank_texts,
    singleton_lists,
    strip_texts,
    tab_fields,
    table_reader,
)

Records = Iterable[tuple[int, list[str]]]
#: SemEval's ``max_score`` option: the top of the score range, checked when the recipe is loaded.
MaxScore = Annotated[float, Gt(0)]
#: How to read scores of another range than a fixed-range format's (named in its score errors).
_OTHER_RANGE = "for another range use format 'pairs' with options.score_column and options.score_range"
#: What the tab formats' field-count errors expect besides the count (they take no delimiter option).
_TABS = "fields separated by tabs (this format has no delimiter option; format 'pairs' takes one)"


def _pair(path: Path, line: int, first: str, second: str, score: float) -> SourceRow:
    query = require_text(first, file=path, line=line, field="sentence1")
    positive = require_text(second, file=path, line=line, field="sentence2")
    return f"{path}:{line}", {"query": query, "positives": [positive], "positive_scores": [score]}


def _pair_table(first: pa.Array, second: pa.Array, scores: pa.Array | None) -> pa.Table | None:
    query, positive = nonblank_texts(first), nonblank_texts(second)
    if query is None or positive is None or scores is None:
        return None
    return pa.table(
        {"query": query, "positives": singleton_lists(positive), "positive_scores": singleton_lists(scores)}
    )


def _column_of(fields: pa.Array) -> Callable[[int], pa.Array]:
    """The function giving field ``i`` of every line."""
    return lambda index: pc.list_element(fields, index)


def _stsb_rows(path: Path, records: Records) -> Iterator[SourceRow]:
    for line, fields in records:
        if len(fields) < 7:
            raise SourceFormatError(
                f"found {len(fields)} tab-separated fields",
                file=path,
                line=line,
                expected=f"at least 7 (genre, file, year, id, score, s1, s2) {_TABS}",
            )
        score = parse_score(fields[4], file=path, line=line, field="score", low=0.0, high=5.0, fix=_OTHER_RANGE)
        yield _pair(path, line, fields[5], fields[6], score)


def _stsb_batches(files: Sequence[Path], context: AdapterContext, *, part: Part | None = None) -> Iterator[TableBatch]:
    check_part(files, part)
    for path in files:
        for chunk in iter_text_chunks(path, part=part):
            fields = tab_fields(chunk, 7)
            table = None
            if fields is not None:
                column = _column_of(fields)
                table = _pair_table(column(5), column(6), mapped_scores(column(4), 0.0, 5.0))
            yield TableBatch(table, partial(_stsb_rows, path, chunk.delimited(delimiter="\t")))


@register_source_format("stsb")
@table_reader(_stsb_batches, per_file=True, splittable=True)
def read_stsb(files: Sequence[Path], context: AdapterContext) -> Iterator[SourceRow]:
    """STS Benchmark tab file: genre, file, year, id, score (0–5), sentence1, sentence2[, sources].

    Fields are not quoted (sentences contain quote characters); some rows carry two trailing
    source columns, which are ignored. Score mapping: ``score / 5``.
    """
    for path in files:
        yield from _stsb_rows(path, iter_delimited(path, delimiter="\t", quoting=csv.QUOTE_NONE))


def _sick_header(
    path: Path, sentence1_column: str, sentence2_column: str, score_column: str
) -> tuple[list[str], dict[str, int]]:
    header = read_header(path, delimiter="\t", quoting=csv.QUOTE_NONE)
    options = {sentence1_column: "sentence1_column", sentence2_column: "sentence2_column"}
    positions = column_positions(header, {**options, score_column: "score_column"}, file=path)
    return header, positions


def _sick_rows(
    path: Path, records: Records, header: list[str], positions: dict[str, int], columns: tuple[str, str, str]
) -> Iterator[SourceRow]:
    sentence1_column, sentence2_column, score_column = columns
    for line, fields in records:
        if len(fields) < len(header):
            raise SourceFormatError(
                f"found {len(fields)} tab-separated fields",
                file=path,
                line=line,
                expected=f"{len(header)} like the header row, {_TABS}",
            )
        score = parse_score(
            fields[positions[score_column]],
            file=path,
            line=line,
            field=score_column,
            low=1.0,
            high=5.0,
            fix=_OTHER_RANGE,
        )
        yield _pair(path, line, fields[positions[sentence1_column]], fields[positions[sentence2_column]], score)


def _sick_batches(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    sentence1_column: str = "sentence_A",
    sentence2_column: str = "sentence_B",
    score_column: str = "relatedness_score",
    part: Part | None = None,
) -> Iterator[TableBatch]:
    check_part(files, part)
    columns = (sentence1_column, sentence2_column, score_column)
    for path in files:
        header, positions = _sick_header(path, *columns)  # every part maps its columns by the header
        for chunk in iter_text_chunks(path, header=True, part=part):
            fields = tab_fields(chunk, len(header))
            table = None
            if fields is not None:
                column = _column_of(fields)
                scores = mapped_scores(column(positions[score_column]), 1.0, 5.0)
                table = _pair_table(column(positions[sentence1_column]), column(positions[sentence2_column]), scores)
            yield TableBatch(
                table,
                partial(_sick_rows, path, chunk.delimited(delimiter="\t"), header, positions, columns),
            )


@register_source_format("sick")
@table_reader(_sick_batches, per_file=True, splittable=True)
def read_sick(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    sentence1_column: str = "sentence_A",
    sentence2_column: str = "sentence_B",
    score_column: str = "relatedness_score",
) -> Iterator[SourceRow]:
    """SICK tab file with a header (pair_ID, sentence_A, sentence_B, relatedness_score, …).

    Relatedness runs from 1 to 5; mapping: ``(score − 1) / 4``.
    """
    columns = (sentence1_column, sentence2_column, score_column)
    for path in files:
        header, positions = _sick_header(path, *columns)
        records = iter_delimited(path, delimiter="\t", quoting=csv.QUOTE_NONE, header=True)
        yield from _sick_rows(path, records, header, positions, columns)


_UNLABELED = "no gold score"


def _semeval_rows(path: Path, records: Records, context: AdapterContext, max_score: float) -> Iterator[SourceRow]:
    for line, fields in records:
        if len(fields) < 3:
            raise SourceFormatError(
                f"found {len(fields)} tab-separated fields",
                file=path,
                line=line,
                expected=f"3 (score, s1, s2) {_TABS}",
            )
        if not fields[0].strip():
            context.skip(_UNLABELED)
            continue
        score = parse_score(fields[0], file=path, line=line, field="score", low=0.0, high=max_score, fix="max_score")
        yield _pair(path, line, fields[1], fields[2], score)


def _semeval_batches(
    files: Sequence[Path], context: AdapterContext, *, max_score: MaxScore = 5.0, part: Part | None = None
) -> Iterator[TableBatch]:
    check_part(files, part)
    for path in files:
        for chunk in iter_text_chunks(path, part=part):
            fields = tab_fields(chunk, 3)
            table, unlabeled = None, 0
            if fields is not None:
                labeled = pc.greater(pc.binary_length(strip_texts(pc.list_element(fields, 0))), 0)
                unlabeled = len(fields) - pc.sum(labeled).as_py() if len(fields) else 0
                column = _column_of(pc.filter(fields, labeled))
                table = _pair_table(column(1), column(2), mapped_scores(column(0), 0.0, max_score))
            if table is not None and unlabeled:
                context.skipped[_UNLABELED] += unlabeled
            yield TableBatch(
                table,
                partial(_semeval_rows, path, chunk.delimited(delimiter="\t"), context, max_score),
            )


@register_source_format("semeval-sts")
@table_reader(_semeval_batches, per_file=True, splittable=True)
def read_semeval_sts(
    files: Sequence[Path], context: AdapterContext, *, max_score: MaxScore = 5.0
) -> Iterator[SourceRow]:
    """SemEval STS tsv: gold score (0–5), sentence1, sentence2.

    Rows with an empty score are unlabeled (several 2015 files have them): skipped and counted.
    Mapping: ``score / max_score`` (5 for every SemEval year).
    """
    for path in files:
        records = iter_delimited(path, delimiter="\t", quoting=csv.QUOTE_NONE)
        yield from _semeval_rows(path, records, context, max_score)
