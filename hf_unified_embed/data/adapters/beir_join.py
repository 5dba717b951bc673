"""The BEIR join column by column: a folder's corpus, queries and judgements joined with pyarrow and numpy.

:func:`beir_tables` gives the rows :func:`~hf_unified_embed.data.adapters.beir.read_beir` gives, in the
same order, as Arrow tables: one row per query in the order queries first appear in the judgements
(qrels, then the mined negatives), positives in judgement order with ``grade / max_grade`` scores,
negatives (grade-0 judgements, then mined ones) with duplicate texts and the query's positive texts
dropped, cut at ``max_negatives``. Ids are joined to texts with hash lookups (``pc.index_in``) and rows
grouped with a stable sort, so the cost is a few passes over the columns, not a Python loop per link.
Memory: every file is read a block at a time; what stays is the ids (short), the texts' offsets (the
texts themselves are memory-mapped from a scratch file) and each link as two int32 positions and a flag
(a judgement also keeps its grade); grouping, comparing and taking texts is done a table of rows at a
time. The 10M-row folder of ``bench/sources.py`` (4M queries, 4M passages, 21M links): under 1 GB a process.

A folder the row path would refuse (an unknown id, a duplicate id, a grade above ``max_grade``, a line
it reads otherwise) raises :class:`~hf_unified_embed.data.source_formats.SourceFormatError` here without
the row path's location: the builder then runs the row path, which names file, line and field. A block
that pyarrow cannot read exactly as the row path would is read record by record, as the row path reads it.

``part=(index, count)`` gives the rows of the ``index``-th of ``count`` equal ranges of the query order;
the parts' rows in order are the folder's rows (each part reads the whole folder, and joins its range).
"""

from __future__ import annotations

import mmap
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from hf_unified_embed.data.adapters.beir_records import (
    DOCUMENT_SCHEMA,
    NEGATIVES_SCHEMA,
    POSITIVE,
    document_columns,
    document_rows,
    mined_negative_rows,
    qrels_links,
)
from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError
from hf_unified_embed.utils.readers import is_json_array, iter_json_records
from hf_unified_embed.utils.table_blocks import iter_text_chunks, json_lines_table

#: Grades pyarrow parses exactly as Python's ``float`` does; others (``1_0``, `` 2``, ``inf``) go the row way.
_PLAIN_NUMBER = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"
#: Rows (queries) per output table, and texts per slice compared: bounds the memory of the join's output.
_SLICE = 50_000
#: Links whose ids are looked up together (see _Links).
_LOOKUP = 4_000_000
_QRELS_READ = pa_csv.ReadOptions(autogenerate_column_names=True, use_threads=False, block_size=1 << 24)
_QRELS_PARSE = pa_csv.ParseOptions(delimiter="\t", quote_char=False, double_quote=False, newlines_in_values=False)


class _TextFile:
    """Texts appended block by block to a bytes file in the scratch folder and memory-mapped back as one
    ``large_string`` array (its offsets in memory: 8 bytes a text), so a corpus of any size costs page
    cache, not heap, and is one array to take from."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle = open(path, "wb")  # noqa: SIM115 - closed in mapped()
        self.offsets = [np.zeros(1, dtype=np.int64)]
        self.size = 0
        self.mapping: mmap.mmap | None = None

    def add(self, texts: pa.Array) -> None:
        texts = texts.cast(pa.string())
        offsets = np.frombuffer(texts.buffers()[1], dtype=np.int32, count=len(texts) + 1, offset=4 * texts.offset)
        start, end = int(offsets[0]), int(offsets[-1])
        if end > start:
            self.handle.write(memoryview(texts.buffers()[2])[start:end])
        self.offsets.append(offsets[1:].astype(np.int64) - start + self.size)
        self.size += end - start

    def mapped(self) -> pa.Array:
        self.handle.close()
        offsets = np.concatenate(self.offsets)
        data = pa.py_buffer(b"")
        if self.size:
            with open(self.path, "rb") as handle:
                self.mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            data = pa.py_buffer(self.mapping)
        return pa.LargeStringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets), data)

    def drop_pages(self) -> None:
        """Take the pages read so far out of this process's resident memory (they stay in the page cache and
        come back on the next read). The texts a table takes are copies, so without this a part joining
        its queries' passages from all over a corpus would hold most of the corpus file resident."""
        if self.mapping is not None and hasattr(self.mapping, "madvise"):  # not on Windows
            self.mapping.madvise(mmap.MADV_DONTNEED)


def _documents(path: Path, include_title: bool, scratch: Path) -> tuple[pa.Array, pa.Array, _TextFile]:
    """All ids (in memory: ids are short) and texts (memory-mapped: the array and its file) of a corpus or
    queries file."""
    ids: list[pa.Array] = []
    texts = _TextFile(scratch / f"{path.stem}.texts")

    def add(block_ids: pa.Array, block_texts: pa.Array) -> None:
        ids.append(block_ids)
        texts.add(block_texts)

    def add_rows(records: Any) -> None:
        pairs = list(document_rows(path, records, include_title))
        add(pa.array([pair[0] for pair in pairs], pa.string()), pa.array([pair[1] for pair in pairs], pa.string()))

    if is_json_array(path):
        add_rows(iter_json_records(path))
    else:
        for chunk in iter_text_chunks(path):
            table = json_lines_table(chunk, DOCUMENT_SCHEMA, optional=("title",))
            columns = None if table is None else document_columns(table, include_title)
            if columns is None:
                add_rows(chunk.json_lines())
            else:
                add(*columns)
            _release_unused()
    id_array = pa.chunked_array(ids, pa.string()).combine_chunks()
    if _has_duplicates(id_array):
        raise SourceFormatError("duplicate _id", file=path, field="_id", expected="unique ids")
    _release_unused()
    return id_array, texts.mapped(), texts


def _has_duplicates(ids: pa.Array) -> bool:
    """Whether two of ``ids`` (never null) are equal: neighbours after a sort. ``pc.count_distinct`` hashes
    them instead, at 7x the time and memory (2M ids: 3.7 s and 358 MB against 0.5 s and 49 MB)."""
    ordered = ids.take(pc.array_sort_indices(ids))
    return len(ordered) > 1 and bool(pc.any(pc.equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1))).as_py())


def _same_text_documents(texts: pa.Array, groups: np.ndarray, documents: np.ndarray) -> np.ndarray:
    """For each link (its row ``groups[i]`` and document ``documents[i]``), the smallest document of the same
    row whose text equals its document's text: the row path compares negatives by text, and two ids may hold
    one text. Only links of one row with texts of equal length can match, so only those (rare) texts are read
    and compared; the rest keep their own document, and no text of the corpus is hashed or sorted."""
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64, count=len(texts) + 1, offset=8 * texts.offset)
    lengths = np.diff(offsets)[documents]
    canonical = documents.copy()
    key = groups.astype(np.int64) * (int(lengths.max(initial=0)) + 1) + lengths
    by_key = np.lexsort((documents, key))
    sorted_keys, sorted_documents = key[by_key], documents[by_key]
    distinct = np.ones(len(by_key), dtype=bool)  # the first link of each (row and length, document)
    distinct[1:] = (sorted_keys[1:] != sorted_keys[:-1]) | (sorted_documents[1:] != sorted_documents[:-1])
    shared, count = np.unique(sorted_keys[distinct], return_counts=True)
    candidates = np.flatnonzero(np.isin(key, shared[count > 1]))
    if len(candidates):
        values = texts.take(pa.array(documents[candidates])).to_pylist()
        smallest: dict[tuple[int, str], int] = {}
        for link, text in zip(candidates.tolist(), values):
            first = smallest.setdefault((int(groups[link]), text), int(documents[link]))
            smallest[(int(groups[link]), text)] = min(first, int(documents[link]))
        for link, text in zip(candidates.tolist(), values):
            canonical[link] = smallest[(int(groups[link]), text)]
    return canonical


class _Links:
    """Judgements and mined negatives in the order the row path inserts them, each id kept as its position
    in queries.jsonl or corpus.jsonl (-1: not there), so a link costs a few bytes, not two strings. Grades
    are kept for the judgements only, which come first: a mined negative's is 0 and never read.

    Ids are looked up :data:`_LOOKUP` links at a time: each lookup hashes the whole file's ids once, so a
    lookup per block of a large file would cost that many times the corpus."""

    def __init__(self, query_ids: pa.Array, corpus_ids: pa.Array) -> None:
        self.universe = (query_ids, corpus_ids)
        self.pending: list[tuple[pa.Array, pa.Array]] = []
        self.queries: list[np.ndarray] = []
        self.documents: list[np.ndarray] = []
        self.positive: list[np.ndarray] = []
        self.grades: list[np.ndarray] = []

    def clear(self) -> None:
        """Forget every link added so far."""
        self.pending, self.queries, self.documents, self.positive, self.grades = [], [], [], [], []

    def add(self, query_ids: pa.Array, corpus_ids: pa.Array, positive: np.ndarray, grades: np.ndarray | None) -> None:
        """Links in order; ``grades`` ``None`` for mined negatives, added after every judgement."""
        self.pending.append((query_ids.cast(pa.string()), corpus_ids.cast(pa.string())))
        self.positive.append(positive.astype(bool))
        if grades is not None:
            self.grades.append(grades.astype(np.float64))
        if sum(len(ids) for ids, _ in self.pending) >= _LOOKUP:
            self._look_up()

    def _look_up(self) -> None:
        if self.pending:
            query_ids = pa.chunked_array([ids for ids, _ in self.pending], pa.string()).combine_chunks()
            corpus_ids = pa.chunked_array([ids for _, ids in self.pending], pa.string()).combine_chunks()
            self.pending = []
            self.queries.append(_codes(query_ids, self.universe[0]))
            self.documents.append(_codes(corpus_ids, self.universe[1]))

    def add_rows(self, rows: Iterator[tuple[Any, ...]], judgements: bool) -> None:
        """Links read by the row path's generators: ``(query id, corpus id, kind, grade, file, line)``."""
        links = list(rows)
        self.add(
            pa.array([link[0] for link in links], pa.string()),
            pa.array([link[1] for link in links], pa.string()),
            np.array([link[2] == POSITIVE for link in links], dtype=bool),
            np.array([link[3] if link[3] is not None else 0.0 for link in links], dtype=np.float64)
            if judgements
            else None,
        )

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Query and document positions (int32), positive flags, and the judgements' grades (a prefix);
        each column's pieces are let go as it is joined, so the links are in memory once, not twice."""
        self._look_up()
        parts = {"queries": np.int32, "documents": np.int32, "positive": bool, "grades": np.float64}
        columns = []
        for name, dtype in parts.items():
            pieces = getattr(self, name)
            setattr(self, name, [])
            columns.append(np.concatenate(pieces) if pieces else np.zeros(0, dtype=dtype))
            del pieces
        return columns[0], columns[1], columns[2], columns[3]


def _qrels_table(data: bytes) -> pa.Table | None:
    """A block of judgements as text columns, or ``None`` where pyarrow might read it otherwise than the row
    path (a line of other than 3 or 4 fields, a blank-looking line, text that is not UTF-8)."""
    if not data.strip():
        return pa.table(
            {"f0": pa.array([], pa.string()), "f1": pa.array([], pa.string()), "f2": pa.array([], pa.string())}
        )
    try:
        table = pa_csv.read_csv(
            pa.py_buffer(data),
            read_options=_QRELS_READ,
            parse_options=_QRELS_PARSE,
            convert_options=pa_csv.ConvertOptions(column_types={f"f{i}": pa.string() for i in range(4)}),
        )
    except pa.ArrowException:
        return None
    if table.num_columns not in (3, 4):
        return None
    if table.num_columns == 4:  # TREC style: query-id, iteration, corpus-id, grade
        table = table.select(["f0", "f2", "f3"]).rename_columns(["f0", "f1", "f2"])
    # The row path skips a line whose only field is blank; pyarrow reads such a line as a row of other
    # width, which it refuses above, or leaves it out when it is empty. Whitespace-only first fields of a
    # 3-field row are ordinary ids to both.
    return table.combine_chunks()


def _add_qrels(links: _Links, path: Path, zero_grade_as_negatives: bool) -> None:
    """The judgements, block by block (a qrels file of millions of lines is never in memory as text); a
    block pyarrow might read otherwise sends the whole file the row way. Judgements are the first links."""
    for number, chunk in enumerate(iter_text_chunks(path)):
        table = _qrels_table(chunk.data)
        grades = None if table is None else table.column("f2")
        if table is not None and grades is not None and len(grades):
            plain = pc.match_substring_regex(grades, _PLAIN_NUMBER)
            if number == 0 and not plain[0].as_py():
                if len(grades) > 1:  # the usual "query-id corpus-id score" header
                    table, grades, plain = table.slice(1), grades.slice(1), plain.slice(1)
                else:  # a header alone in its block: the row path decides what it is
                    table = None
            if table is not None and not pc.all(plain).as_py():
                table = None
        if table is None or grades is None:
            links.clear()
            links.add_rows(qrels_links(path, 0, zero_grade_as_negatives), judgements=True)
            return
        values = pc.cast(grades, pa.float64()).to_numpy(zero_copy_only=False)
        positive = values > 0
        keep = positive | zero_grade_as_negatives
        rows = pa.array(np.flatnonzero(keep))
        links.add(
            table.column("f0").take(rows).combine_chunks(),
            table.column("f1").take(rows).combine_chunks(),
            positive[keep],
            np.where(positive, values, 0.0)[keep],
        )


def _add_mined_negatives(links: _Links, path: Path) -> None:
    if is_json_array(path):
        links.add_rows(mined_negative_rows(path, iter_json_records(path), 1), judgements=False)
        return
    for chunk in iter_text_chunks(path):
        _release_unused()
        table = json_lines_table(chunk, NEGATIVES_SCHEMA)
        lists = None if table is None else table.column("corpus-ids").combine_chunks()
        if table is None or lists is None or pc.list_flatten(lists).null_count:
            links.add_rows(mined_negative_rows(path, chunk.json_lines(), 1), judgements=False)
            continue
        corpus_ids = pc.list_flatten(lists)
        parents = pc.list_parent_indices(lists)
        count = len(corpus_ids)
        links.add(
            table.column("query-id").combine_chunks().take(parents),
            corpus_ids,
            np.zeros(count, dtype=bool),
            None,
        )


def _codes(values: pa.Array, universe: pa.Array) -> np.ndarray:
    """The position of each value in ``universe`` (-1 where absent)."""
    positions = pc.fill_null(pc.index_in(values, value_set=universe), -1)
    return positions.to_numpy(zero_copy_only=False).astype(np.int32)


def _first_seen_order(codes: np.ndarray, universe: int) -> tuple[np.ndarray, np.ndarray]:
    """Each code's rank (int32) in the order of first appearance, and the distinct codes (all in
    ``range(universe)``) in that order — by scatter, not by sorting the links."""
    position_type: type[np.signedinteger[Any]] = np.int32 if len(codes) < np.iinfo(np.int32).max else np.int64
    first: np.ndarray = np.full(universe, len(codes), dtype=position_type)
    # With repeated codes the last write wins: written in reverse, the first appearance does.
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1, dtype=position_type)
    seen = np.flatnonzero(first < len(codes))
    distinct = seen[np.argsort(first[seen], kind="stable")]
    del first
    rank = np.empty(universe, dtype=np.int32)
    rank[distinct] = np.arange(len(distinct), dtype=np.int32)
    return rank[codes], distinct


def _list_array(offsets: np.ndarray, values: pa.Array) -> pa.Array:
    if pa.types.is_large_string(values.type):  # texts taken from a mapped file: the schema's strings
        values = values.cast(pa.string())
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)


def _group_offsets(groups: np.ndarray, count: int) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.bincount(groups, minlength=count))])


def beir_tables(
    paths: dict[str, Path],
    context: AdapterContext,
    *,
    zero_grade_as_negatives: bool = False,
    max_grade: float | None = None,
    include_title: bool = True,
    max_negatives: int | None = None,
    part: tuple[int, int] | None = None,
) -> Iterator[pa.Table]:
    """The rows of one BEIR folder (``paths``: corpus, queries, qrels, optional negatives) as tables of at
    most :data:`_SLICE` rows."""
    with tempfile.TemporaryDirectory(prefix="beir-join-", dir=context.scratch) as scratch:
        yield from _joined(
            paths, context, Path(scratch), zero_grade_as_negatives, max_grade, include_title, max_negatives, part
        )


def _joined(
    paths: dict[str, Path],
    context: AdapterContext,
    scratch: Path,
    zero_grade_as_negatives: bool,
    max_grade: float | None,
    include_title: bool,
    max_negatives: int | None,
    part: tuple[int, int] | None,
) -> Iterator[pa.Table]:
    corpus_ids, corpus_texts, corpus_file = _documents(paths["corpus"], include_title, scratch)
    query_ids, query_texts, query_file = _documents(paths["queries"], False, scratch)
    links = _Links(query_ids, corpus_ids)
    _add_qrels(links, paths["qrels"], zero_grade_as_negatives)
    if "negatives" in paths:
        _add_mined_negatives(links, paths["negatives"])
    link_queries, documents, positive, grades = links.columns()
    del links
    _release_unused()
    if not len(link_queries):
        return
    if (link_queries < 0).any() or (documents < 0).any():
        where = paths["queries"] if (link_queries < 0).any() else paths["corpus"]
        raise SourceFormatError("an id of the judgements is not in the folder", file=where, field="_id")
    rank, query_rows = _first_seen_order(link_queries, len(query_ids))  # query_rows: positions in queries.jsonl
    del link_queries, query_ids, corpus_ids
    positive_grades = grades[positive[: len(grades)]]  # every positive is a judgement, and judgements come first
    top = max_grade if max_grade is not None else (float(positive_grades.max()) if len(positive_grades) else None)
    if top is not None and len(positive_grades) and float(positive_grades.max()) > top:
        raise SourceFormatError(f"a grade exceeds max_grade {top:g}", file=paths["qrels"], field="score")

    first, last = 0, len(query_rows)
    if part is not None:
        index, count = part
        first, last = index * len(query_rows) // count, (index + 1) * len(query_rows) // count
    has_positive = np.zeros(len(query_rows), dtype=bool)
    has_positive[rank[positive]] = True
    for _ in range(int((~has_positive[first:last]).sum())):
        context.skip("query without a positive judgement")
    # The part's rows: its queries that have a positive, by rank; the others' links are dropped.
    row_ranks = (first + np.flatnonzero(has_positive[first:last])).astype(np.int32)
    slices = _links_by_slice(rank, row_ranks, len(query_rows))
    join = _Join(rank, documents, positive, grades, top, corpus_texts, max_negatives)
    # A slice of rows at a time: the links grouped, compared and taken from the mapped texts are those
    # of one table, so the join's working memory does not grow with the folder.
    for number, start in enumerate(range(0, len(row_ranks), _SLICE)):
        ranks = row_ranks[start : start + _SLICE]
        its_links = slices.order[slices.bounds[number] : slices.bounds[number + 1]]
        yield join.table(ranks, its_links, query_texts.take(pa.array(query_rows[ranks])).cast(pa.string()))
        corpus_file.drop_pages()
        query_file.drop_pages()


class _Slices(NamedTuple):
    order: np.ndarray  # the links of the part's rows, a table's after another's, each in file order
    bounds: np.ndarray  # table k's links: order[bounds[k] : bounds[k + 1]]


def _links_by_slice(rank: np.ndarray, row_ranks: np.ndarray, queries: int) -> _Slices:
    """The links of the rows ``row_ranks`` bucketed by output table (:data:`_SLICE` rows each) with one
    stable sort, so each table's links are found without a pass over every link."""
    table_of_rank = np.full(queries, -1, dtype=np.int32)
    table_of_rank[row_ranks] = np.arange(len(row_ranks), dtype=np.int32) // _SLICE
    link_tables = table_of_rank[rank]
    del table_of_rank
    selected = np.flatnonzero(link_tables >= 0).astype(np.int32)
    tables = link_tables[selected]
    del link_tables
    by_table = np.argsort(tables, kind="stable")
    counts = np.bincount(tables, minlength=-(-len(row_ranks) // _SLICE))
    return _Slices(selected[by_table], np.concatenate([[0], np.cumsum(counts)]))


def _release_unused() -> None:
    """Give back to the system what pyarrow's allocator keeps of the blocks read so far: it would keep
    hundreds of megabytes of a corpus's freed blocks, which numpy (the join's arrays) does not reuse."""
    pa.default_memory_pool().release_unused()


class _Join:
    """The rows of given query ranks from the folder's links (each link's query rank, document position,
    whether it is positive, and the judgements' grades)."""

    def __init__(
        self,
        rank: np.ndarray,
        documents: np.ndarray,
        positive: np.ndarray,
        grades: np.ndarray,
        top: float | None,
        corpus_texts: pa.Array,
        max_negatives: int | None,
    ) -> None:
        self.rank, self.documents, self.positive, self.grades = rank, documents, positive, grades
        self.top, self.corpus_texts, self.max_negatives = top, corpus_texts, max_negatives

    def table(self, ranks: np.ndarray, links: np.ndarray, queries: pa.Array) -> pa.Table:
        """The rows of ``ranks`` (ascending, each with a positive) from their ``links`` (in file order), whose
        query texts are ``queries``."""
        rows = len(ranks)
        order = links[np.argsort(self.rank[links], kind="stable")]  # by query, each query's links in order
        groups = np.searchsorted(ranks, self.rank[order])
        is_positive = self.positive[order]
        positives = order[is_positive]
        scores = self.grades[positives] / self.top if self.top else self.grades[positives]

        # Negatives are compared by text (as the row path does): equal texts share a code.
        negatives = order[~is_positive]
        negative_groups = groups[~is_positive]
        canonical = _same_text_documents(self.corpus_texts, groups, self.documents[order])
        width = len(self.corpus_texts)
        negative_keys = negative_groups.astype(np.int64) * width + canonical[~is_positive]
        positive_keys = groups[is_positive].astype(np.int64) * width + canonical[is_positive]
        _, first_of_key = np.unique(negative_keys, return_index=True)
        unique = np.zeros(len(negatives), dtype=bool)
        unique[first_of_key] = True
        keep = unique & ~np.isin(negative_keys, positive_keys)
        if self.max_negatives is not None:
            kept_groups = negative_groups[keep]
            starts = np.searchsorted(kept_groups, kept_groups, side="left")
            position = np.arange(len(kept_groups)) - starts
            keep[np.flatnonzero(keep)[position >= self.max_negatives]] = False
        negatives, negative_groups = negatives[keep], negative_groups[keep]

        positive_offsets = _group_offsets(groups[is_positive], rows)
        return pa.table(
            {
                "query": queries,
                "positives": _list_array(
                    positive_offsets, self.corpus_texts.take(pa.array(self.documents[positives]))
                ),
                "positive_scores": _list_array(positive_offsets, pa.array(scores, pa.float64())),
                "negatives": _list_array(
                    _group_offsets(negative_groups, rows),
                    self.corpus_texts.take(pa.array(self.documents[negatives])),
                ),
            }
        )
