"""A BEIR folder's links: its judgements (qrels) and mined negatives, each id as its position in the corpus
or queries, read block by block with pyarrow — once for all the parts of a build that join the folder.

Every part of a BEIR join needs to see every link (queries are ordered by their first link), so, as the
corpus is (:mod:`.beir_documents`), the qrels and negatives files are read in ranges, each range's links
looked up and saved once into the build's scratch (:mod:`.shared_ranges`), and every part reads all of
them, memory-mapped, keeping only its own queries' links (:func:`~.beir_join.part_links`). A block pyarrow
might read otherwise than the row path sends the whole qrels file the row way, in each part.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from hf_unified_embed.data.adapters.beir_documents import release_unused
from hf_unified_embed.data.adapters.beir_records import NEGATIVES_SCHEMA, POSITIVE, mined_negative_rows, qrels_links
from hf_unified_embed.data.adapters.id_positions import IdPositions
from hf_unified_embed.data.adapters.shared_ranges import shared_ranges
from hf_unified_embed.utils.readers import is_json_array, iter_json_records
from hf_unified_embed.utils.table_blocks import Part, iter_text_chunks, json_lines_table

#: Grades pyarrow parses exactly as Python's ``float`` does; others (``1_0``, `` 2``, ``inf``) go the row way.
_PLAIN_NUMBER = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"
#: Links whose ids are looked up together (see _Links).
_LOOKUP = 4_000_000
#: The positions of ids in queries.jsonl and corpus.jsonl.
_Lookups = tuple[IdPositions, IdPositions]
_QRELS_READ = pa_csv.ReadOptions(autogenerate_column_names=True, use_threads=False, block_size=1 << 24)
_QRELS_PARSE = pa_csv.ParseOptions(delimiter="\t", quote_char=False, double_quote=False, newlines_in_values=False)
#: The columns of the links, as :meth:`_Links.columns` gives them.
_COLUMNS = {"queries": np.int32, "documents": np.int32, "positive": bool, "grades": np.float64}
_Columns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
#: Links in the row path's order, in pieces: a range saved in the build's scratch (a folder of one ``.npy``
#: file per column) or columns in memory. Each piece's grades are a prefix of its links (its judgements).
LinkPieces = list[Path | _Columns]
#: A range of the judgements holding a block that only the row path reads as it should.
_ROW_WAY = "row-way"
#: The sub-folders of a saved range of links: its judgements and its mined negatives.
_JUDGEMENTS, _NEGATIVES = "judgements", "negatives"


def read_links(
    paths: dict[str, Path],
    query_ids: pa.ChunkedArray,
    corpus_ids: pa.ChunkedArray,
    zero_grade_as_negatives: bool,
    *,
    shared: Path | None = None,
    part: Part | None = None,
) -> LinkPieces:
    """Every link of the folder in the row path's order (judgements, then mined negatives), in pieces
    (:func:`piece_columns` gives each one's columns): query and document positions (int32, -1 for an
    unknown id), positive flags, and the judgements' grades (a prefix).

    With ``shared`` and ``part`` (as :func:`~hf_unified_embed.data.adapters.beir_documents.read_documents`)
    each range of the files is read by one part only.
    """
    negatives = paths.get("negatives")
    # Built once: the buckets of the files' ids are found on the first lookup and kept for every range.
    lookups = (IdPositions(query_ids), IdPositions(corpus_ids))
    if shared is None or part is None or part[1] == 1:
        links = _Links(lookups)
        if not _add_qrels(links, paths["qrels"], zero_grade_as_negatives):
            _judgements_row_by_row(links, paths["qrels"], zero_grade_as_negatives)
        if negatives is not None:
            _add_mined_negatives(links, negatives)
        return [links.columns()]
    ranged = negatives if negatives is not None and not is_json_array(negatives) else None
    # One range of the judgements and the same range of the mined negatives are read together: their ids are
    # looked up at once, so a part hashes the queries' and corpus' ids once, not once per file.
    folders = shared_ranges(
        paths["qrels"],
        f"links-{zero_grade_as_negatives}-{ranged}",
        shared,
        part,
        partial(_save_links, paths["qrels"], ranged, lookups, zero_grade_as_negatives),
    )
    # Each piece of links in order: a saved range, or links this part read itself.
    pieces: LinkPieces = [folder / _JUDGEMENTS for folder in folders]
    if any((folder / _ROW_WAY).exists() for folder in folders):
        links = _Links(lookups)
        _judgements_row_by_row(links, paths["qrels"], zero_grade_as_negatives)
        pieces = [links.columns()]
    if ranged is not None:
        pieces += [folder / _NEGATIVES for folder in folders]
    elif negatives is not None:  # one JSON document: not read in ranges
        links = _Links(lookups)
        _add_mined_negatives(links, negatives)
        pieces.append(links.columns())
    return pieces


def piece_columns(piece: Path | _Columns) -> _Columns:
    """The columns of one piece of :func:`read_links`; a saved range's are memory-mapped, so a part that
    keeps a few of its links does not hold the others."""
    if not isinstance(piece, Path):
        return piece
    queries, documents, positive, grades = (np.load(piece / f"{name}.npy", mmap_mode="r") for name in _COLUMNS)
    return queries, documents, positive, grades


def _save_links(
    qrels: Path,
    negatives: Path | None,
    lookups: _Lookups,
    zero_grade_as_negatives: bool,
    folder: Path,
    part: Part,
) -> None:
    """``part`` of the judgements into ``folder``/judgements (or the :data:`_ROW_WAY` mark where a block of
    it must go the row way) and ``part`` of the mined negatives into ``folder``/negatives."""
    links = _Links(lookups)
    if not _add_qrels(links, qrels, zero_grade_as_negatives, part):
        links.clear()
        (folder / _ROW_WAY).touch()
    judged = links.count()
    if negatives is not None:
        _add_mined_negatives(links, negatives, part)
    queries, documents, positive, grades = links.columns()
    # The grades are the judgements' alone (a prefix of the links): the negatives' piece has none.
    for name, rows, its_grades in (
        (_JUDGEMENTS, slice(0, judged), grades),
        (_NEGATIVES, slice(judged, None), grades[:0]),
    ):
        (folder / name).mkdir()
        for column_name, column in zip(_COLUMNS, (queries[rows], documents[rows], positive[rows], its_grades)):
            np.save(folder / name / f"{column_name}.npy", column)


class _Links:
    """Judgements and mined negatives in the order the row path inserts them, each id kept as its position
    in queries.jsonl or corpus.jsonl (-1: not there), so a link costs a few bytes, not two strings. Grades
    are kept for the judgements only, which come first: a mined negative's is 0 and never read.

    Ids are looked up :data:`_LOOKUP` links at a time: each lookup hashes the whole file's ids once (bucket
    by bucket, :mod:`.id_positions`), so a lookup per block of a large file would cost that many times the
    corpus."""

    def __init__(self, lookups: _Lookups) -> None:
        self.lookups = lookups
        self.pending: list[tuple[pa.Array, pa.Array]] = []
        self.queries: list[np.ndarray] = []
        self.documents: list[np.ndarray] = []
        self.positive: list[np.ndarray] = []
        self.grades: list[np.ndarray] = []

    def count(self) -> int:
        """The links added so far."""
        return sum(len(positive) for positive in self.positive)

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
            # More links follow: give back the lookup's hash tables and the links' ids, which pyarrow's
            # allocator would keep beside the next block's (10M rows: 100 MB less at the peak). After the
            # last lookup the caller gives back what the whole read kept.
            release_unused()

    def _look_up(self) -> None:
        if self.pending:
            # Looked up block by block where they lie: joined, the blocks' ids were held twice at the peak.
            query_ids = pa.chunked_array([ids for ids, _ in self.pending], pa.string())
            corpus_ids = pa.chunked_array([ids for _, ids in self.pending], pa.string())
            self.pending = []
            self.queries.append(self.lookups[0](query_ids))
            self.documents.append(self.lookups[1](corpus_ids))

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

    def columns(self) -> _Columns:
        """Query and document positions (int32), positive flags, and the judgements' grades (a prefix);
        each column's pieces are let go as it is joined, so the links are in memory once, not twice."""
        self._look_up()
        columns = []
        for name, dtype in _COLUMNS.items():
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


def _add_qrels(links: _Links, path: Path, zero_grade_as_negatives: bool, part: Part | None = None) -> bool:
    """The judgements (of ``part`` of the file), block by block: a qrels file of millions of lines is never in
    memory as text. ``False`` (and the links added so far kept) where a block pyarrow might read otherwise
    than the row path: then the whole file goes the row way (:func:`_judgements_row_by_row`)."""
    for chunk in iter_text_chunks(path, part=part):
        table = _qrels_table(chunk.data)
        grades = None if table is None else table.column("f2")
        if table is not None and grades is not None and len(grades):
            plain = pc.match_substring_regex(grades, _PLAIN_NUMBER)
            if chunk.offset == 0 and not plain[0].as_py():
                if _python_number(grades[0].as_py()):  # not a header to the row path: "1_0", " 2", "inf"
                    return False
                if len(grades) > 1:  # the usual "query-id corpus-id score" header
                    table, grades, plain = table.slice(1), grades.slice(1), plain.slice(1)
                else:  # a header alone in its block: the row path decides what it is
                    table = None
            if table is not None and not pc.all(plain).as_py():
                table = None
        if table is None or grades is None:
            return False
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
    return True


def _python_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _judgements_row_by_row(links: _Links, path: Path, zero_grade_as_negatives: bool) -> None:
    links.clear()
    links.add_rows(qrels_links(path, 0, zero_grade_as_negatives), judgements=True)


def _add_mined_negatives(links: _Links, path: Path, part: Part | None = None) -> None:
    if part is None and is_json_array(path):
        links.add_rows(mined_negative_rows(path, iter_json_records(path), 1), judgements=False)
        return
    for chunk in iter_text_chunks(path, part=part):
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
