"""Answer-selection files (question, candidate sentence, 0/1 label), grouped into retrieval rows.

Consecutive rows with the same question form one unified row: candidates labelled 1 become the
``positives`` and candidates labelled 0 the hard ``negatives``. Questions without any correct
candidate are skipped and counted. Scores are left empty: binary relevance is already expressed
by the positive/negative split.
"""

from __future__ import annotations

import csv
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, SourceRow, register_source_format
from hf_unified_embed.errors import shown
from hf_unified_embed.utils.readers import (
    Delimiter,
    Quoting,
    check_delimiter,
    column_positions,
    iter_delimited,
    read_header,
    require_text,
)
from hf_unified_embed.utils.table_blocks import TableBatch, batched_rows, table_reader

_QUOTING: dict[str, Quoting] = {"minimal": csv.QUOTE_MINIMAL, "none": csv.QUOTE_NONE}

PRESETS = {
    # TrecQA (Wang et al. 2007, Yao et al. 2013 csv): qtext,label,atext with quoted fields.
    "trecqa": {"question_column": "qtext", "candidate_column": "atext", "label_column": "label", "delimiter": ","},
    # WikiQA: QuestionID, Question, SentenceID, Sentence, Label; sentences hold bare quote
    # characters, so fields are not quoted. A few rows of the distributed train file still use
    # the original 7-column layout; they are skipped and counted.
    "wikiqa": {
        "question_column": "Question",
        "candidate_column": "Sentence",
        "label_column": "Label",
        "delimiter": "\t",
        "quoting": "none",
        "on_malformed": "skip",
    },
}


#: Finished questions kept in a set; more go into a scratch SQLite table.
QUESTIONS_IN_MEMORY = 100_000


class _FinishedQuestions:
    """The questions whose rows are done, to refuse one that comes back, in bounded memory: a set of up to
    ``limit`` questions, the rest in a scratch SQLite table (a file of millions of questions stays flat)."""

    def __init__(self, scratch: Path | None, limit: int | None = None) -> None:
        self.memory: set[str] = set()
        self.limit = QUESTIONS_IN_MEMORY if limit is None else limit
        self.scratch = scratch
        self.folder: tempfile.TemporaryDirectory[str] | None = None
        self.connection: sqlite3.Connection | None = None

    def __contains__(self, question: str) -> bool:
        if question in self.memory:
            return True
        if self.connection is None:
            return False
        found = self.connection.execute("SELECT 1 FROM finished WHERE question = ?", (question,)).fetchone()
        return found is not None

    def add(self, question: str) -> None:
        if self.connection is None and len(self.memory) < self.limit:
            self.memory.add(question)
            return
        if self.connection is None:
            self.folder = tempfile.TemporaryDirectory(prefix="questions-", dir=self.scratch)
            self.connection = sqlite3.connect(Path(self.folder.name) / "finished.sqlite")
            self.connection.executescript(
                "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-8192;"
                "CREATE TABLE finished (question TEXT PRIMARY KEY) WITHOUT ROWID;"
            )
        self.connection.execute("INSERT OR IGNORE INTO finished VALUES (?)", (question,))

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
        if self.folder is not None:
            self.folder.cleanup()


def _groups(
    path: Path,
    header: list[str],
    positions: dict[str, int],
    columns: tuple[str, str, str],
    options: dict[str, Any],
    context: AdapterContext,
) -> Iterator[tuple[int, str, list[tuple[str, bool]]]]:
    """``(first_line, question, [(candidate, correct), ...] in file order)`` for each run of a question's rows."""
    finished = _FinishedQuestions(context.scratch)
    try:
        yield from _runs(path, header, positions, columns, options, context, finished)
    finally:
        finished.close()


def _runs(
    path: Path,
    header: list[str],
    positions: dict[str, int],
    columns: tuple[str, str, str],
    options: dict[str, Any],
    context: AdapterContext,
    finished: _FinishedQuestions,
) -> Iterator[tuple[int, str, list[tuple[str, bool]]]]:
    question_column, candidate_column, label_column = columns
    group: tuple[int, str, list[tuple[str, bool]]] | None = None
    for line, fields in iter_delimited(
        path, delimiter=options["delimiter"], quoting=_QUOTING[options["quoting"]], header=True
    ):
        if len(fields) != len(header):
            if options["on_malformed"] == "skip":
                context.skip(f"row with {len(fields)} fields instead of {len(header)}")
                continue
            raise SourceFormatError(
                f"found {len(fields)} fields split at {shown(options['delimiter'])}",
                file=path,
                line=line,
                expected=f"{len(header)} like the header row {header}; check options.delimiter and options.quoting",
            )
        question = require_text(fields[positions[question_column]], file=path, line=line, field=question_column)
        candidate = require_text(fields[positions[candidate_column]], file=path, line=line, field=candidate_column)
        label = fields[positions[label_column]].strip()
        if label not in (options["positive_label"], options["negative_label"]):
            raise SourceFormatError(
                f"got {shown(label)}",
                file=path,
                line=line,
                field=label_column,
                expected=f"{shown(options['positive_label'])} or {shown(options['negative_label'])} "
                "(options.positive_label, options.negative_label)",
            )
        if group is None or question != group[1]:
            if group is not None:
                finished.add(group[1])
                yield group
            if question in finished:
                raise SourceFormatError(
                    "question appears again after other questions",
                    file=path,
                    line=line,
                    field=question_column,
                    expected="all rows of a question to be consecutive",
                )
            group = (line, question, [])
        group[2].append((candidate, label == options["positive_label"]))
    if group is not None:
        yield group


def _batches(files: Sequence[Path], context: AdapterContext, **options: Any) -> Iterator[TableBatch]:
    """The rows of :func:`read_answer_selection` as Arrow batches (completed and checked column by column
    by the builder)."""
    return batched_rows(read_answer_selection(files, context, **options))


@register_source_format("answer-selection", presets=PRESETS)
@table_reader(_batches, per_file=True, cost=1.5)  # each file is read on its own, row by row
def read_answer_selection(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    question_column: str = "question",
    candidate_column: str = "candidate",
    label_column: str = "label",
    delimiter: Delimiter = "\t",
    quoting: Literal["minimal", "none"] = "minimal",
    positive_label: str = "1",
    negative_label: str = "0",
    require_negatives: bool = False,
    on_malformed: Literal["error", "skip"] = "error",
    as_passage: bool = False,
) -> Iterator[SourceRow]:
    """Delimited question/candidate/label rows with a header (presets ``trecqa``, ``wikiqa``).

    A question whose rows are not consecutive is an error (its group would be split in two).

    With ``as_passage`` a question's candidates, joined in file order, form its one positive passage and
    there are no hard negatives: passage retrieval (a query against paragraphs, as in MS MARCO) instead
    of answer-sentence selection. It fits files whose candidates are the sentences of one passage, as
    WikiQA's are (the summary paragraph of one Wikipedia page); questions without a correct candidate
    are still skipped, their paragraph holds no answer.
    """
    if quoting not in _QUOTING:
        raise SourceFormatError(f"got {shown(quoting)}", field="quoting", expected=f"one of {list(_QUOTING)}")
    options = {
        "delimiter": check_delimiter(delimiter),
        "quoting": quoting,
        "positive_label": positive_label,
        "negative_label": negative_label,
        "on_malformed": on_malformed,
    }
    columns = (question_column, candidate_column, label_column)
    for path in files:
        header = read_header(path, delimiter=delimiter, quoting=_QUOTING[quoting])
        named = dict(zip(columns, ("question_column", "candidate_column", "label_column")))
        positions = column_positions(header, named, file=path, delimiter=delimiter)
        for line, question, candidates in _groups(path, header, positions, columns, options, context):
            positives = [candidate for candidate, correct in candidates if correct]
            negatives = [candidate for candidate, correct in candidates if not correct]
            if not positives:
                context.skip("question without a correct candidate")
            elif require_negatives and not negatives:
                context.skip("question without an incorrect candidate")
            elif as_passage:
                passage = " ".join(candidate for candidate, _ in candidates)
                yield f"{path}:{line}", {"query": question, "positives": [passage], "negatives": []}
            else:
                yield f"{path}:{line}", {"query": question, "positives": positives, "negatives": negatives}
