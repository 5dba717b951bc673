"""BEIR folders (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``) as retrieval rows.

One row per query, in the order queries first appear in the qrels file: positives are the
documents with a grade > 0, ``positive_scores`` their grade divided by the largest grade in the
file (or ``max_grade``), so graded TREC qrels 1–3 become 1/3, 2/3, 1. Hard negatives come from an
optional mined-negatives JSON-lines file (``{"query-id": ..., "corpus-ids": [...]}``) and, with
``zero_grade_as_negatives``, from grade-0 judgements; a mined negative that is also a positive of
the query is dropped.

Two readings give the same rows. The builder's (``read_batches``) joins the folder column by column
with pyarrow (:mod:`~hf_unified_embed.data.adapters.beir_join`), in parts of the query order when
several processes share one large folder. The row path (:func:`read_beir`: ``max_rows``, and the check
that names file, line and field when the column path finds a problem) joins corpus, queries and
judgements in a temporary SQLite database on disk, so its memory stays flat however large the corpus is.
"""

from __future__ import annotations

import itertools
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hf_unified_embed.data.adapters.beir_join import beir_tables
from hf_unified_embed.data.adapters.beir_records import (
    DOCUMENT_SCHEMA,
    NEGATIVE,
    NEGATIVES_SCHEMA,
    POSITIVE,
    Link,
    document_columns,
    document_rows,
    duplicate_id_error,
    mined_negative_rows,
    qrels_links,
)
from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, SourceRow, register_source_format
from hf_unified_embed.errors import shown
from hf_unified_embed.utils.readers import is_json_array, iter_json_records
from hf_unified_embed.utils.table_blocks import (
    TableBatch,
    TextChunk,
    check_part,
    iter_text_chunks,
    json_line_numbers,
    json_lines_table,
    table_reader,
)

_BATCH = 20_000

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


def _documents(path: Path, include_title: bool) -> Iterator[list[tuple[str, str]]]:
    """``(id, text)`` pairs of a corpus or queries file, a block at a time."""
    if is_json_array(path):
        yield from _batched(document_rows(path, iter_json_records(path), include_title))
        return
    for chunk in iter_text_chunks(path):
        table = json_lines_table(chunk, DOCUMENT_SCHEMA, optional=("title",))
        columns = None if table is None else document_columns(table, include_title)
        if columns is None:
            yield list(document_rows(path, chunk.json_lines(), include_title))
        else:
            yield list(zip(columns[0].to_pylist(), columns[1].to_pylist()))


def _negative_links(chunk: TextChunk, file_index: int) -> list[Link] | None:
    """A JSON-lines block's mined negatives read with pyarrow; ``None`` where :func:`mined_negative_rows`
    might read it otherwise (ids that are no strings, a missing field)."""
    table = json_lines_table(chunk, NEGATIVES_SCHEMA)
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
        (query_ids[row], corpus_id, NEGATIVE, None, file_index, lines[row])
        for row, corpus_id in zip(parents, corpus_ids.to_pylist())
    ]


def _mined_negatives(path: Path, file_index: int) -> Iterator[Link]:
    if is_json_array(path):
        yield from mined_negative_rows(path, iter_json_records(path), file_index)
        return
    for chunk in iter_text_chunks(path):
        links = _negative_links(chunk, file_index)
        yield from links if links is not None else mined_negative_rows(path, chunk.json_lines(), file_index)


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
                raise duplicate_id_error(path) from None

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
        return self.connection.execute("SELECT MAX(grade) FROM links WHERE kind = ?", (POSITIVE,)).fetchone()[0]

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


def _folder_paths(folder: Path, qrels_split: str, negatives_file: str | None) -> dict[str, Path]:
    """The files of a BEIR folder, each checked to exist."""
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
    return paths


def _beir_batches(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    qrels_split: str = "train",
    negatives_file: str | None = None,
    part: tuple[int, int] | None = None,
    **options: Any,
) -> Iterator[TableBatch]:
    """The rows of :func:`read_beir` joined column by column (:mod:`.beir_join`); ``part`` with one folder."""
    check_part(files, part)
    for folder in files:
        paths = _folder_paths(folder, qrels_split, negatives_file)
        for table in beir_tables(paths, context, part=part, **options):
            # The rows again for the builder's row-by-row check, should a rule refuse the table.
            yield TableBatch(table, partial(_replayed, str(paths["qrels"]), table), recount=False)


def _replayed(location: str, table: pa.Table) -> Iterator[SourceRow]:
    return ((location, row) for row in table.to_pylist())


@register_source_format("beir")
# Each folder on its own, or a large one in parts; reading and joining costs ~4x a tab file per byte. The
# parts share the parse of the folder's files (beir_documents, beir_links) and each joins its share.
@table_reader(_beir_batches, per_file=True, splittable=True, cost=4.0)
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
        paths = _folder_paths(folder, qrels_split, negatives_file)
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
    join.load_links(paths["qrels"], qrels_links(paths["qrels"], 0, zero_grade_as_negatives))
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
            if kind == POSITIVE:
                if grade > top:
                    raise SourceFormatError(
                        f"grade {grade:g} exceeds max_grade {top:g}",
                        file=join.files[file_index],
                        line=line,
                        field="score",
                        expected=f"a grade in (0, {top:g}]; set options.max_grade to the qrels' highest grade",
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
