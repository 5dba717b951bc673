"""BEIR folders (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``) as retrieval rows.

One row per query, in the order queries first appear in the qrels file: positives are the
documents with a grade > 0, ``positive_scores`` their grade divided by the largest grade in the
file (or ``max_grade``), so graded TREC qrels 1–3 become 1/3, 2/3, 1. Hard negatives come from an
optional mined-negatives JSON-lines file (``{"query-id": ..., "corpus-ids": [...]}``) and, with
``zero_grade_as_negatives``, from grade-0 judgements; a mined negative that is also a positive of
the query is dropped.

Corpus, queries and judgements are joined in a temporary SQLite database on disk rather than in
Python dicts, so memory stays flat however large the corpus is. The JSON-lines files are read a block at
a time with pyarrow (a block it cannot read exactly as the per-record code would is read record by
record, which raises the located error), and the builder takes the rows as Arrow batches.
"""

from __future__ import annotations

import csv
import itertools
import math
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, SourceRow, register_source_format
from hf_unified_embed.errors import shown
from hf_unified_embed.utils.readers import (
    TableBatch,
    TextChunk,
    batched_rows,
    is_json_array,
    iter_delimited,
    iter_json_records,
    iter_text_chunks,
    json_line_numbers,
    json_lines_table,
    strip_texts,
    table_reader,
)

_BATCH = 20_000
_POSITIVE, _NEGATIVE = 1, 0

_SCHEMA = """
CREATE TABLE corpus (id TEXT PRIMARY KEY, text TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE queries (id TEXT PRIMARY KEY, text TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE query_order (seq INTEGER PRIMARY KEY, qid TEXT NOT NULL UNIQUE);
CREATE TABLE links (qid TEXT NOT NULL, did TEXT NOT NULL, kind INTEGER NOT NULL, grade REAL, file INTEGER NOT NULL, line INTEGER NOT NULL);
"""


def _batched(rows: Iterable[Any]) -> Iterator[list[Any]]:
    iterator = iter(rows)
    while batch := list(itertools.islice(iterator, _BATCH)):
        yield batch


def _document_rows(path: Path, records: Iterable[tuple[int, Any]], include_title: bool) -> Iterator[tuple[str, str]]:
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


_DOCUMENT_SCHEMA = pa.schema([("_id", pa.string()), ("text", pa.string()), ("title", pa.string())])


def _document_table(chunk: TextChunk, include_title: bool) -> list[tuple[str, str]] | None:
    """A JSON-lines block's ``(id, text)`` pairs read with pyarrow; ``None`` where that might differ from
    :func:`_document_rows` (an id that is no string, a missing text, an empty one: read record by record)."""
    table = json_lines_table(chunk, _DOCUMENT_SCHEMA, optional=("title",))
    if table is None:
        return None
    text = strip_texts(table.column("text"))
    if include_title:
        title = strip_texts(pc.fill_null(table.column("title"), ""))
        joined = strip_texts(pc.binary_join_element_wise(title, text, " "))
        text = pc.if_else(pc.greater(pc.binary_length(title), 0), joined, text)
    if len(text) and pc.min(pc.binary_length(text)).as_py() == 0:
        return None
    return list(zip(table.column("_id").to_pylist(), text.to_pylist()))


def _documents(path: Path, include_title: bool) -> Iterator[list[tuple[str, str]]]:
    """``(id, text)`` pairs of a corpus or queries file, a block at a time."""
    if is_json_array(path):
        yield from _batched(_document_rows(path, iter_json_records(path), include_title))
        return
    for chunk in iter_text_chunks(path):
        pairs = _document_table(chunk, include_title)
        yield pairs if pairs is not None else list(_document_rows(path, chunk.json_lines(), include_title))


def _qrels(
    path: Path, file_index: int, zero_grade_as_negatives: bool
) -> Iterator[tuple[str, str, int, float, int, int]]:
    for line, fields in iter_delimited(path, delimiter="\t", quoting=csv.QUOTE_NONE):
        if len(fields) == 4:  # TREC style: query-id, iteration, corpus-id, grade
            fields = [fields[0], fields[2], fields[3]]
        if len(fields) != 3:
            raise SourceFormatError(
                f"found {len(fields)} fields", file=path, line=line, expected="query-id, corpus-id, score"
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
            yield fields[0], fields[1], _POSITIVE, grade, file_index, line
        elif zero_grade_as_negatives:
            yield fields[0], fields[1], _NEGATIVE, 0.0, file_index, line


def _mined_negative_rows(
    path: Path, records: Iterable[tuple[int, Any]], file_index: int
) -> Iterator[tuple[str, str, int, None, int, int]]:
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
            yield str(record["query-id"]), str(corpus_id), _NEGATIVE, None, file_index, line


_NEGATIVES_SCHEMA = pa.schema([("query-id", pa.string()), ("corpus-ids", pa.list_(pa.string()))])


def _negative_links(chunk: TextChunk, file_index: int) -> list[tuple[str, str, int, None, int, int]] | None:
    """A JSON-lines block's mined negatives read with pyarrow; ``None`` where :func:`_mined_negative_rows`
    might read it otherwise (ids that are no strings, a missing field)."""
    table = json_lines_table(chunk, _NEGATIVES_SCHEMA)
    if table is None:
        return None
    lists = table.column("corpus-ids").combine_chunks()
    corpus_ids = pc.list_flatten(lists)
    if corpus_ids.null_count:
        return None
    lines = json_line_numbers(chunk)
    query_ids = table.column("query-id").to_pylist()
    parents = pc.list_parent_indices(lists).to_pylist()
    return [
        (query_ids[row], corpus_id, _NEGATIVE, None, file_index, lines[row])
        for row, corpus_id in zip(parents, corpus_ids.to_pylist())
    ]


def _mined_negatives(path: Path, file_index: int) -> Iterator[tuple[str, str, int, None, int, int]]:
    if is_json_array(path):
        yield from _mined_negative_rows(path, iter_json_records(path), file_index)
        return
    for chunk in iter_text_chunks(path):
        links = _negative_links(chunk, file_index)
        yield from links if links is not None else _mined_negative_rows(path, chunk.json_lines(), file_index)


class _BeirJoin:
    """The folder's files loaded into a throw-away SQLite database, joined query by query."""

    def __init__(self, database: Path) -> None:
        self.connection = sqlite3.connect(database)
        # A scratch database: durability is worthless here, speed and bounded memory are not.
        self.connection.executescript(
            "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA temp_store=FILE; PRAGMA cache_size=-65536;"
            + _SCHEMA
        )
        self.files: list[Path] = []

    def load_texts(self, table: str, path: Path, include_title: bool) -> None:
        for batch in _documents(path, include_title):
            try:
                self.connection.executemany(f"INSERT INTO {table} VALUES (?, ?)", batch)
            except sqlite3.IntegrityError:
                raise SourceFormatError("duplicate _id", file=path, field="_id", expected="unique ids") from None

    def load_links(self, path: Path, links: Iterable[tuple[Any, ...]]) -> None:
        self.files.append(path)
        for batch in _batched(links):
            # The order of first appearance: each query once per batch, the batch's first appearance first.
            self.connection.executemany(
                "INSERT OR IGNORE INTO query_order (qid) VALUES (?)",
                ((qid,) for qid in dict.fromkeys(row[0] for row in batch)),
            )
            self.connection.executemany("INSERT INTO links VALUES (?, ?, ?, ?, ?, ?)", batch)

    def max_grade(self) -> float | None:
        return self.connection.execute("SELECT MAX(grade) FROM links WHERE kind = ?", (_POSITIVE,)).fetchone()[0]

    def grouped(self) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
        self.connection.execute("CREATE INDEX links_by_query ON links (qid)")
        cursor = self.connection.execute(
            """
            SELECT o.seq, q.text, l.did, d.text, l.kind, l.grade, l.file, l.line, l.qid
            FROM query_order o
            JOIN links l ON l.qid = o.qid
            LEFT JOIN queries q ON q.id = o.qid
            LEFT JOIN corpus d ON d.id = l.did
            ORDER BY o.seq, l.rowid
            """
        )
        for _, group in itertools.groupby(cursor, key=lambda row: row[0]):
            members = list(group)
            yield members[0][1], members

    def close(self) -> None:
        self.connection.close()


def _beir_batches(files: Sequence[Path], context: AdapterContext, **options: Any) -> Iterator[TableBatch]:
    """The rows of :func:`read_beir` as Arrow batches (completed and checked column by column by the builder)."""
    return batched_rows(read_beir(files, context, **options))


@register_source_format("beir")
@table_reader(_beir_batches, per_file=True, cost=4.0)  # each folder on its own; the join costs ~4x a tsv per byte
def read_beir(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    qrels_split: str = "train",
    negatives_file: str | None = None,
    zero_grade_as_negatives: bool = False,
    max_grade: float | None = None,
    include_title: bool = True,
    max_negatives: int | None = None,
) -> Iterator[SourceRow]:
    """BEIR folder(s): corpus.jsonl, queries.jsonl, qrels/<qrels_split>.tsv, optional mined negatives.

    Mapping: ``positive_scores = grade / max_grade`` (the largest positive grade of the qrels when
    ``max_grade`` is not given).
    """
    for folder in files:
        paths = {
            "corpus": folder / "corpus.jsonl",
            "queries": folder / "queries.jsonl",
            "qrels": folder / "qrels" / f"{qrels_split}.tsv",
        }
        if negatives_file is not None:
            paths["negatives"] = folder / negatives_file
        for name, path in paths.items():
            if not path.is_file():
                raise SourceFormatError(
                    f"{name} file not found",
                    file=path,
                    expected="a BEIR folder with corpus.jsonl, queries.jsonl and qrels/<split>.tsv",
                )
        with tempfile.TemporaryDirectory(prefix="beir-join-", dir=context.scratch) as scratch:
            join = _BeirJoin(Path(scratch) / "join.sqlite")
            try:
                yield from _rows(
                    join, paths, context, zero_grade_as_negatives, max_grade, include_title, max_negatives
                )
            finally:
                join.close()


def _rows(
    join: _BeirJoin,
    paths: dict[str, Path],
    context: AdapterContext,
    zero_grade_as_negatives: bool,
    max_grade: float | None,
    include_title: bool,
    max_negatives: int | None,
) -> Iterator[SourceRow]:
    join.load_texts("corpus", paths["corpus"], include_title)
    join.load_texts("queries", paths["queries"], include_title=False)
    join.load_links(paths["qrels"], _qrels(paths["qrels"], 0, zero_grade_as_negatives))
    if "negatives" in paths:
        join.load_links(paths["negatives"], _mined_negatives(paths["negatives"], 1))
    top = max_grade if max_grade is not None else join.max_grade()
    for query, members in join.grouped():
        first = members[0]
        if query is None:
            raise SourceFormatError(
                f"query id {shown(first[8])} is not in {paths['queries'].name}",
                file=join.files[first[6]],
                line=first[7],
                field="query-id",
                expected="an id present in queries.jsonl",
            )
        positives: list[str] = []
        scores: list[float] = []
        negatives: list[str] = []
        for _, _, corpus_id, text, kind, grade, file_index, line in (member[:8] for member in members):
            if text is None:
                raise SourceFormatError(
                    f"corpus id {shown(corpus_id)} is not in corpus.jsonl",
                    file=join.files[file_index],
                    line=line,
                    field="corpus-id",
                    expected="an id present in corpus.jsonl",
                )
            if kind == _POSITIVE:
                if grade > top:
                    raise SourceFormatError(
                        f"grade {grade:g} exceeds max_grade {top:g}",
                        file=join.files[file_index],
                        line=line,
                        field="score",
                        expected=f"a grade in (0, {top:g}]",
                    )
                positives.append(text)
                scores.append(grade / top)
            else:
                negatives.append(text)
        if not positives:
            context.skip("query without a positive judgement")
            continue
        positive_set = set(positives)
        kept = [text for text in dict.fromkeys(negatives) if text not in positive_set]
        yield (
            f"{paths['qrels']}:{first[7]}",
            {
                "query": query,
                "positives": positives,
                "positive_scores": scores,
                "negatives": kept[:max_negatives] if max_negatives is not None else kept,
            },
        )
