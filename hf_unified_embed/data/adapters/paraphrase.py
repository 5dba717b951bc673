"""Paraphrase-identification pairs: the Microsoft Research Paraphrase Corpus (MSRP).

Each pair becomes ``query`` = string 1, ``positives`` = [string 2] and ``positive_scores`` = [label]
(1.0 paraphrase, 0.0 not), the binary form of an STS score, for a ``pair_classification`` task.
With ``positives_only`` the non-paraphrase pairs are skipped instead, which turns the corpus into
plain (anchor, positive) pairs for contrastive training.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path

from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, SourceRow, register_source_format
from hf_unified_embed.utils.readers import column_positions, iter_delimited, read_header, require_text


@register_source_format("msrp")
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
    for path in files:
        header = read_header(path, delimiter="\t", quoting=csv.QUOTE_NONE)
        positions = column_positions(
            header, (label_column, sentence1_column, sentence2_column), file=path, expected="an MSRP header"
        )
        for line, fields in iter_delimited(path, delimiter="\t", quoting=csv.QUOTE_NONE, header=True):
            if len(fields) != len(header):
                raise SourceFormatError(
                    f"found {len(fields)} fields", file=path, line=line, expected=f"{len(header)} like the header"
                )
            label = fields[positions[label_column]].strip()
            if label not in ("0", "1"):
                raise SourceFormatError(
                    f"got {label!r}", file=path, line=line, field=label_column, expected="1 (paraphrase) or 0"
                )
            if positives_only and label == "0":
                context.skip("not a paraphrase")
                continue
            query = require_text(fields[positions[sentence1_column]], file=path, line=line, field=sentence1_column)
            positive = require_text(fields[positions[sentence2_column]], file=path, line=line, field=sentence2_column)
            yield f"{path}:{line}", {"query": query, "positives": [positive], "positive_scores": [float(label)]}
