"""The BEIR join column by column: a folder's corpus, queries and judgements joined with pyarrow and numpy.

:func:`beir_tables` gives the rows :func:`~hf_unified_embed.data.adapters.beir.read_beir` gives, in the
same order, as Arrow tables: one row per query in the order queries first appear in the judgements
(qrels, then the mined negatives), positives in judgement order with ``grade / max_grade`` scores,
negatives (grade-0 judgements, then mined ones) with duplicate texts and the query's positive texts
dropped, cut at ``max_negatives``. Ids are joined to texts with hash lookups (``pc.index_in``) and rows
grouped with a stable sort, so the cost is a few passes over the columns, not a Python loop per link.
Memory: every file is read a block at a time; what stays is the ids (short), the texts' offsets (the
texts themselves are memory-mapped from scratch files, :mod:`.beir_documents`) and each link as two int32
positions and a flag (a judgement also keeps its grade); grouping, comparing and taking texts is done a
table of rows at a time. The 10M-row folder of ``bench/sources.py`` (4M queries, 4M passages, 21M links)
built in one process: 1.06 GB of heap at the peak, 1.4 GB PSS; one part of eight: 666 MB, as at 5M
(measured with bench/build.py).

A folder the row path would refuse (an unknown id, a duplicate id, a grade above ``max_grade``, a line
it reads otherwise) raises :class:`~hf_unified_embed.data.source_formats.SourceFormatError` here without
the row path's location: the builder then runs the row path, which names file, line and field. A block
that pyarrow cannot read exactly as the row path would is read record by record, as the row path reads it.

``part=(index, count)`` gives the rows of the ``index``-th of ``count`` equal ranges of the query order;
the parts' rows in order are the folder's rows. Each part needs every text and reads every link, but
keeps only its range's links (:func:`part_links`: two passes over the links, memory-mapped where the build
saved them); when the build gives the parts a shared scratch folder (``context.scratch``), each range of
the files is parsed by one part only (:mod:`.beir_documents`, :mod:`.beir_links`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from hf_unified_embed.data.adapters.beir_documents import Documents, read_documents, release_unused
from hf_unified_embed.data.adapters.beir_links import LinkPieces, piece_columns, read_links
from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError

#: Rows (queries) per output table, and texts per slice compared: bounds the memory of the join's output.
#: Each table's texts are fresh memory, which the kernel zeroes and two processes share the bandwidth for:
#: tables of 20,000 rows built a 1M folder's join in two processes 0.7-0.9 s sooner than tables of 50,000
#: (fresh huge pages 610-670 -> 420), as fast in one; 10,000 were slower in one (measured with bench/build.py).
_SLICE = 20_000
#: Output tables whose links are sorted together (see _links_by_table): 16 tables of 20,000 rows.
_TABLES_SORTED = 16


def _same_text_documents(texts: Documents, groups: np.ndarray, documents: np.ndarray) -> np.ndarray:
    """For each link (its row ``groups[i]`` and document ``documents[i]``), the smallest document of the same
    row whose text equals its document's text: the row path compares negatives by text, and two ids may hold
    one text. Only links of one row with texts of equal length can match, so only those (rare) texts are read
    and compared; the rest keep their own document, and no text of the corpus is hashed or sorted."""
    lengths = texts.lengths(documents)
    canonical = documents.copy()
    key = groups.astype(np.int64) * (int(lengths.max(initial=0)) + 1) + lengths
    by_key = np.lexsort((documents, key))
    sorted_keys, sorted_documents = key[by_key], documents[by_key]
    distinct = np.ones(len(by_key), dtype=bool)  # the first link of each (row and length, document)
    distinct[1:] = (sorted_keys[1:] != sorted_keys[:-1]) | (sorted_documents[1:] != sorted_documents[:-1])
    shared, count = np.unique(sorted_keys[distinct], return_counts=True)
    candidates = np.flatnonzero(np.isin(key, shared[count > 1]))
    if len(candidates):
        values = texts.take(documents[candidates]).to_pylist()
        smallest: dict[tuple[int, str], int] = {}
        for link, text in zip(candidates.tolist(), values):
            first = smallest.setdefault((int(groups[link]), text), int(documents[link]))
            smallest[(int(groups[link]), text)] = min(first, int(documents[link]))
        for link, text in zip(candidates.tolist(), values):
            canonical[link] = smallest[(int(groups[link]), text)]
    return canonical


class PartLinks(NamedTuple):
    """The links of one part's queries (in the row path's order) and what the whole folder's links decide."""

    rank: np.ndarray  # each link's query rank (int32): the order queries first appear in the folder's links
    documents: np.ndarray  # each link's position in the corpus (int32)
    positive: np.ndarray  # whether the link is a positive
    grades: np.ndarray  # the judgements' grades: a prefix of the links
    query_rows: np.ndarray  # the folder's queries by rank, as positions in queries.jsonl
    ranks: tuple[int, int]  # the part's ranks: [first, last)
    top_grade: float | None  # the largest grade of a positive judgement in the folder
    unknown: str | None  # "queries" or "corpus" when a link names an id that file lacks


def part_links(pieces: LinkPieces, queries: int, part: tuple[int, int] | None) -> PartLinks:
    """The links of ``part``'s range of the query order, from every link of the folder (:func:`read_links`'s
    pieces) read twice a piece at a time: first for each query's first link (a scatter into one array of
    ``queries`` positions, written in reverse so that the first appearance wins), the ids the files lack
    and the largest positive grade; then for the part's links. So a part holds its own links and arrays the
    size of the queries file, not every link of the folder."""
    columns = [piece_columns(piece) for piece in pieces]  # saved ranges memory-mapped: nothing read yet
    total = sum(len(piece[0]) for piece in columns)
    position_type: type[np.signedinteger[Any]] = np.int32 if total < np.iinfo(np.int32).max else np.int64
    first: np.ndarray = np.full(queries, total, dtype=position_type)
    unknown_query = unknown_document = False
    top: float | None = None
    end = total
    for codes, documents, positive, grades in reversed(columns):
        end -= len(codes)
        unknown_query |= bool(len(codes)) and bool((codes < 0).any())
        unknown_document |= bool(len(documents)) and bool((documents < 0).any())
        if unknown_query or unknown_document:
            continue
        first[codes[::-1]] = np.arange(end + len(codes) - 1, end - 1, -1, dtype=position_type)
        judged = grades[positive[: len(grades)]]
        if len(judged):
            top = max(top, float(judged.max())) if top is not None else float(judged.max())
    unknown = "queries" if unknown_query else "corpus" if unknown_document else None
    seen = np.flatnonzero(first < total)
    query_rows = seen[np.argsort(first[seen], kind="stable")]
    del first, seen
    rank_of = np.full(queries, -1, dtype=np.int32)
    rank_of[query_rows] = np.arange(len(query_rows), dtype=np.int32)
    low, high = 0, len(query_rows)
    if part is not None:
        index, count = part
        low, high = index * len(query_rows) // count, (index + 1) * len(query_rows) // count
    read = columns if unknown is None else []
    # Which links of each piece are the part's (None: all), then its columns filled in place: each piece's
    # kept links joined at the end were held twice (~120 MB for a part of a 10M folder).
    masks: list[np.ndarray | None] = []
    for codes, _, _, _ in read:
        rank = rank_of[codes]
        mine = (rank >= low) & (rank < high)
        masks.append(None if mine.all() else mine)
    if len(read) == 1 and masks[0] is None:  # one part of one piece: its mapped columns, not copied
        codes, documents, positive, grades = read[0]
        kept = (rank_of[codes], *(np.asarray(column) for column in (documents, positive, grades)))
    else:
        kept = _kept_links(read, masks, rank_of)
    rank, documents, positive, grades = (column.astype(dtype, copy=False) for column, dtype in zip(kept, _TYPES))
    return PartLinks(rank, documents, positive, grades, query_rows, (low, high), top, unknown)


#: The types of :class:`PartLinks`' link columns.
_TYPES = (np.int32, np.int32, bool, np.float64)


def _kept_links(columns: list[Any], masks: list[np.ndarray | None], rank_of: np.ndarray) -> tuple[np.ndarray, ...]:
    """The links ``masks`` keep of each piece (``None``: all), in order, as the columns of
    :class:`PartLinks` (each link's query as its rank), each allocated once at its size."""
    sizes = [len(piece[0]) if mine is None else int(np.count_nonzero(mine)) for piece, mine in zip(columns, masks)]
    graded = [
        len(piece[3]) if mine is None else int(np.count_nonzero(mine[: len(piece[3])]))
        for piece, mine in zip(columns, masks)
    ]
    kept = (*(np.empty(sum(sizes), dtype) for dtype in _TYPES[:3]), np.empty(sum(graded), np.float64))
    at = graded_at = 0
    for (codes, documents, positive, grades), mine, size, grades_size in zip(columns, masks, sizes, graded):
        # Each piece's ranks are gathered again here rather than kept from the masks' pass: one piece's
        # at a time, not every piece's (4 bytes a link) beside the columns being filled.
        for out, column, start, length in (
            (kept[0], rank_of[codes], at, size),
            (kept[1], documents, at, size),
            (kept[2], positive, at, size),
            (kept[3], grades, graded_at, grades_size),
        ):
            target = out[start : start + length]
            if mine is None:
                target[:] = column
            else:
                np.compress(mine[: len(column)], column, out=target)
        at, graded_at = at + size, graded_at + grades_size
    return kept


def _list_array(offsets: np.ndarray, values: pa.Array) -> pa.Array:
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
    corpus = read_documents(paths["corpus"], include_title, scratch, shared=context.scratch, part=part)
    queries = read_documents(paths["queries"], False, scratch, shared=context.scratch, part=part)
    pieces = read_links(paths, queries.ids, corpus.ids, zero_grade_as_negatives, shared=context.scratch, part=part)
    release_unused()
    links = part_links(pieces, len(queries), part)
    del pieces
    if links.unknown is not None:
        where = paths["queries"] if links.unknown == "queries" else paths["corpus"]
        raise SourceFormatError("an id of the judgements is not in the folder", file=where, field="_id")
    if not len(links.query_rows):
        return
    rank, documents, positive, grades = links.rank, links.documents, links.positive, links.grades
    queries.forget_ids()
    corpus.forget_ids()
    release_unused()  # the ids' blocks, which pyarrow's allocator would keep (tens of MB at 10M rows)
    # Every positive is a judgement; the largest grade is the folder's, whichever part reads it.
    top = max_grade if max_grade is not None else links.top_grade
    if top is not None and links.top_grade is not None and links.top_grade > top:
        raise SourceFormatError(f"a grade exceeds max_grade {top:g}", file=paths["qrels"], field="score")

    first, last = links.ranks
    queries_in_order = len(links.query_rows)
    # The part's own queries by rank: the folder's order (a position per query) is not kept past this.
    query_rows = links.query_rows[first:last].copy()
    del links
    has_positive = np.zeros(queries_in_order, dtype=bool)
    has_positive[rank[positive]] = True
    for _ in range(int((~has_positive[first:last]).sum())):
        context.skip("query without a positive judgement")
    # The part's rows: its queries that have a positive, by rank; the others' links are dropped.
    row_ranks = (first + np.flatnonzero(has_positive[first:last])).astype(np.int32)
    table_links = _links_by_table(rank, row_ranks, queries_in_order)
    join = _Join(rank, documents, positive, grades, top, corpus, max_negatives)
    # A slice of rows at a time: the links grouped, compared and taken from the mapped texts are those
    # of one table, so the join's working memory does not grow with the folder.
    for start, its_links in zip(range(0, len(row_ranks), _SLICE), table_links):
        ranks = row_ranks[start : start + _SLICE]
        yield join.table(ranks, its_links, queries.take(query_rows[ranks - first]))
        corpus.drop_pages()
        queries.drop_pages()


def _links_by_table(rank: np.ndarray, row_ranks: np.ndarray, queries: int) -> Iterator[np.ndarray]:
    """The links of each output table (:data:`_SLICE` of the rows ``row_ranks``), each table's in file order.

    Each link's table is kept (4 bytes a link) and the links are sorted by table :data:`_TABLES_SORTED`
    tables at a time: one sort of every link held the links' positions three times over (8 bytes each,
    ~280 MB for a 10M folder's part), the largest step of a part's memory once its ids were looked up."""
    table_of_rank = np.full(queries, -1, dtype=np.int32)
    table_of_rank[row_ranks] = np.arange(len(row_ranks), dtype=np.int32) // _SLICE
    link_tables = table_of_rank[rank]
    del table_of_rank
    tables = -(-len(row_ranks) // _SLICE)
    for low in range(0, tables, _TABLES_SORTED):
        high = min(low + _TABLES_SORTED, tables)
        selected = np.flatnonzero((link_tables >= low) & (link_tables < high))
        its_tables = link_tables[selected]
        order = selected[np.argsort(its_tables, kind="stable")]
        bounds = np.concatenate([[0], np.cumsum(np.bincount(its_tables - low, minlength=high - low))])
        del selected, its_tables
        for number in range(high - low):
            yield order[bounds[number] : bounds[number + 1]]


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
        corpus_texts: Documents,
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
                "positives": _list_array(positive_offsets, self.corpus_texts.take(self.documents[positives])),
                "positive_scores": _list_array(positive_offsets, pa.array(scores, pa.float64())),
                "negatives": _list_array(
                    _group_offsets(negative_groups, rows),
                    self.corpus_texts.take(self.documents[negatives]),
                ),
            }
        )
