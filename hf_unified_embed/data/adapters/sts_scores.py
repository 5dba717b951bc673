"""Semantic-similarity sources with graded scores: STS Benchmark, SICK and the SemEval STS files.

Scores are mapped linearly onto [0, 1]: STS-B ``score / 5``, SICK relatedness ``(s − 1) / 4``,
SemEval STS ``score / 5``. Each pair becomes one row: ``query`` = first sentence,
``positives`` = [second sentence], ``positive_scores`` = [normalised score].
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path

from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, SourceRow, register_source_format
from hf_unified_embed.utils.readers import column_positions, iter_delimited, parse_score, read_header, require_text


def _pair(path: Path, line: int, first: str, second: str, score: float) -> SourceRow:
    query = require_text(first, file=path, line=line, field="sentence1")
    positive = require_text(second, file=path, line=line, field="sentence2")
    return f"{path}:{line}", {"query": query, "positives": [positive], "positive_scores": [score]}


@register_source_format("stsb")
def read_stsb(files: Sequence[Path], context: AdapterContext) -> Iterator[SourceRow]:
    """STS Benchmark tab file: genre, file, year, id, score (0–5), sentence1, sentence2[, sources].

    Fields are not quoted (sentences contain quote characters); some rows carry two trailing
    source columns, which are ignored. Score mapping: ``score / 5``.
    """
    for path in files:
        for line, fields in iter_delimited(path, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(fields) < 7:
                raise SourceFormatError(
                    f"found {len(fields)} tab-separated fields",
                    file=path,
                    line=line,
                    expected="at least 7 (genre, file, year, id, score, s1, s2)",
                )
            score = parse_score(fields[4], file=path, line=line, field="score", low=0.0, high=5.0)
            yield _pair(path, line, fields[5], fields[6], score)


@register_source_format("sick")
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
    for path in files:
        header = read_header(path, delimiter="\t", quoting=csv.QUOTE_NONE)
        positions = column_positions(
            header, (sentence1_column, sentence2_column, score_column), file=path, expected="a SICK header"
        )
        for line, fields in iter_delimited(path, delimiter="\t", quoting=csv.QUOTE_NONE, header=True):
            if len(fields) < len(header):
                raise SourceFormatError(
                    f"found {len(fields)} fields", file=path, line=line, expected=f"{len(header)} like the header"
                )
            score = parse_score(
                fields[positions[score_column]], file=path, line=line, field=score_column, low=1.0, high=5.0
            )
            yield _pair(path, line, fields[positions[sentence1_column]], fields[positions[sentence2_column]], score)


@register_source_format("semeval-sts")
def read_semeval_sts(files: Sequence[Path], context: AdapterContext, *, max_score: float = 5.0) -> Iterator[SourceRow]:
    """SemEval STS tsv: gold score (0–5), sentence1, sentence2.

    Rows with an empty score are unlabeled (several 2015 files have them): skipped and counted.
    Mapping: ``score / max_score`` (5 for every SemEval year).
    """
    for path in files:
        for line, fields in iter_delimited(path, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(fields) < 3:
                raise SourceFormatError(
                    f"found {len(fields)} fields", file=path, line=line, expected="3 (score, s1, s2)"
                )
            if not fields[0].strip():
                context.skip("no gold score")
                continue
            score = parse_score(fields[0], file=path, line=line, field="score", low=0.0, high=max_score)
            yield _pair(path, line, fields[1], fields[2], score)
