"""The BEIR column path (``beir_join``, what the builder reads) against the row path (``read_beir``, SQLite):
the same rows in the same order and the same skips for any folder, whole or in parts; where the row path
refuses a folder, the column path refuses it too (the builder then names the place with the row path)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.data.adapters import beir_join, id_positions
from hf_unified_embed.data.adapters.beir import _beir_batches, read_beir
from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError
from hf_unified_embed.utils import table_blocks
from hf_unified_embed.utils.table_blocks import can_split

COLUMNS = ("query", "positives", "positive_scores", "negatives")

ids = st.sampled_from([f"d{i}" for i in range(8)])
#: Now and then an id the folder does not hold: both paths refuse the folder.
some_ids = st.one_of(ids, ids, ids, ids, ids, ids, ids, ids, ids, st.just("d-unknown"))
texts = st.sampled_from(["alpha", "beta", " beta ", "gamma delta", "epsilon", "zeta"])  # repeats on purpose
# "1_0" is a grade Python reads and pyarrow does not: the judgements then go the row way, in every part.
grades = st.sampled_from(["0", "1", "2", "3", "1.5", "-1", "2e0", ".5", "1", "2", "1_0"])


@st.composite
def folders(draw: Any) -> dict[str, Any]:
    corpus = {f"d{i}": (draw(texts), draw(st.sampled_from(["", "Title", None]))) for i in range(8)}
    queries = {f"q{i}": draw(texts) for i in range(6)}
    judgements = draw(
        st.lists(
            st.tuples(
                st.sampled_from([*queries, "q-unknown"] if draw(st.integers(0, 9)) == 0 else list(queries)),
                some_ids,
                grades,
            ),
            min_size=0,
            max_size=25,
        )
    )
    negatives = draw(
        st.lists(st.tuples(st.sampled_from(list(queries)), st.lists(ids, max_size=4)), min_size=0, max_size=6)
    )
    return {
        "corpus": corpus,
        "queries": queries,
        "judgements": judgements,
        "negatives": negatives,
        "header": draw(st.booleans()),
        "trec": draw(st.booleans()),
        "crlf": draw(st.booleans()),
    }


def write_folder(root: Path, spec: dict[str, Any]) -> Path:
    folder = root / "beir"
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w") as handle:
        for key, (text, title) in spec["corpus"].items():
            record = {"_id": key, "text": text} | ({} if title is None else {"title": title})
            handle.write(json.dumps(record) + "\n")
    with open(folder / "queries.jsonl", "w") as handle:
        for key, text in spec["queries"].items():
            handle.write(json.dumps({"_id": key, "text": text}) + "\n")
    end = "\r\n" if spec["crlf"] else "\n"
    lines = ["query-id\tcorpus-id\tscore"] if spec["header"] else []
    for query, document, grade in spec["judgements"]:
        lines.append(f"{query}\t0\t{document}\t{grade}" if spec["trec"] else f"{query}\t{document}\t{grade}")
    (folder / "qrels" / "train.tsv").write_bytes("".join(line + end for line in lines).encode())
    with open(folder / "negatives.jsonl", "w") as handle:
        for query, documents in spec["negatives"]:
            handle.write(json.dumps({"query-id": query, "corpus-ids": documents}) + "\n")
    return folder


def row_path(folder: Path, **options: Any) -> tuple[list[dict[str, Any]], Counter[str]]:
    context = AdapterContext("beir", Counter())
    return [row for _, row in read_beir([folder], context, **options)], context.skipped


def column_path(
    folder: Path, part: tuple[int, int] | None = None, scratch: Path | None = None, **options: Any
) -> tuple[list[dict], Counter[str]]:
    context = AdapterContext("beir", Counter(), scratch=scratch)
    tables = [batch.table for batch in _beir_batches([folder], context, part=part, **options)]
    rows = pa.concat_tables(tables).to_pylist() if tables else []
    return [{column: row[column] for column in COLUMNS} for row in rows], context.skipped


def normal(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{column: row.get(column, []) for column in COLUMNS} for row in rows]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    spec=folders(),
    mined=st.booleans(),
    zero=st.booleans(),
    title=st.booleans(),
    max_negatives=st.sampled_from([None, 0, 1, 3]),
    max_grade=st.sampled_from([None, 3.0, 10.0]),
    count=st.integers(1, 4),
    slice_rows=st.sampled_from([1, 2, 3, 50_000]),
    block_bytes=st.sampled_from([1, 40, table_blocks.CHUNK_BYTES]),
    bucket=st.sampled_from([None, 1, 3]),
    tables_sorted=st.sampled_from([1, 2, 16]),
)
def test_the_column_path_reads_what_the_row_path_reads(
    tmp_path_factory: pytest.TempPathFactory,
    spec: dict[str, Any],
    mined: bool,
    zero: bool,
    title: bool,
    max_negatives: int | None,
    max_grade: float | None,
    count: int,
    slice_rows: int,
    block_bytes: int,
    bucket: int | None,
    tables_sorted: int,
) -> None:
    """Any folder, whole or in 1-4 parts, read in blocks of one line, about 40 bytes or the default 4 MB
    (each file is read a block at a time) and joined in tables of 1, 2, 3 or 50,000 rows (the join works
    a table at a time; the links of 1, 2 or 16 tables are sorted together), its ids looked up in one
    table or, as a corpus of millions of ids is, in buckets (here of 1 or 3 ids). The parts share a
    scratch folder, as a build's do: the first parses the corpus and queries in ranges, one per part, and
    the others read its ranges."""
    one_table = id_positions._ONE_TABLE if bucket is None else 0
    with (
        patch.object(beir_join, "_SLICE", slice_rows),
        patch.object(beir_join, "_TABLES_SORTED", tables_sorted),
        patch.object(table_blocks, "CHUNK_BYTES", block_bytes),
        patch.object(id_positions, "_ONE_TABLE", one_table),
        patch.object(id_positions, "BUCKET", bucket or id_positions.BUCKET),
    ):
        folder = write_folder(tmp_path_factory.mktemp("beir"), spec)
        options = {
            "negatives_file": "negatives.jsonl" if mined else None,
            "zero_grade_as_negatives": zero,
            "include_title": title,
            "max_negatives": max_negatives,
            "max_grade": max_grade,
        }
        try:
            expected, expected_skips = row_path(folder, **options)
        except SourceFormatError:
            with pytest.raises(SourceFormatError):
                column_path(folder, **options)
            return
        rows, skips = column_path(folder, **options)
        assert rows == normal(expected)
        assert skips == expected_skips
        parts: list[dict[str, Any]] = []
        part_skips: Counter[str] = Counter()
        shared = tmp_path_factory.mktemp("scratch")
        for index in range(count):
            part_rows, skipped = column_path(folder, part=(index, count), scratch=shared, **options)
            parts += part_rows
            part_skips.update(skipped)
        assert parts == rows and part_skips == skips


@pytest.mark.parametrize("first", [False, True], ids=["second-line", "first-line"])
@pytest.mark.parametrize("grade", ["1_0", " 2", "inf", "nan", "two"])
def test_grades_pyarrow_would_read_otherwise_go_the_row_way(tmp_path: Path, grade: str, first: bool) -> None:
    """On the first line such a grade is no header to the row path (unless Python cannot read it either)."""
    spec = {
        "corpus": {"d0": ("alpha", None), "d1": ("beta", None)},
        "queries": {"q0": "question"},
        "judgements": [("q0", "d1", grade), ("q0", "d0", "1")] if first else [("q0", "d0", "1"), ("q0", "d1", grade)],
        "negatives": [],
        "header": False,
        "trec": False,
        "crlf": False,
    }
    folder = write_folder(tmp_path, spec)
    try:
        expected, _ = row_path(folder)
    except SourceFormatError:
        with pytest.raises(SourceFormatError):
            column_path(folder)
        return
    assert column_path(folder)[0] == normal(expected)


def test_a_folder_is_read_in_parts(tmp_path: Path) -> None:
    from hf_unified_embed.data.source_formats import get_source_format

    assert can_split(get_source_format("beir").read, tmp_path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    codes=st.lists(st.integers(0, 9), max_size=40),
    judged=st.integers(0, 40),
    cuts=st.lists(st.integers(0, 40), max_size=3),
    count=st.integers(1, 4),
    saved=st.booleans(),
)
def test_a_part_keeps_the_links_of_its_queries_alone(
    tmp_path: Path, codes: list[int], judged: int, cuts: list[int], count: int, saved: bool
) -> None:
    """``part_links`` over the folder's links in pieces (saved ranges, read memory-mapped, or in memory):
    each part holds its own queries' links in file order, and every part sees the folder's query order
    (queries by first link) and largest positive grade."""
    import numpy as np

    links = len(codes)
    judged = min(judged, links)
    queries = np.array(codes, dtype=np.int32)
    documents = np.arange(links, dtype=np.int32)
    positive = np.arange(links) % 3 == 0
    grades = (np.arange(judged) % 4).astype(np.float64)
    bounds = sorted({0, links, *(min(cut, links) for cut in cuts)})
    pieces: list[Any] = []
    for number, (start, end) in enumerate(itertools.pairwise(bounds)):
        columns = (queries[start:end], documents[start:end], positive[start:end], grades[start : min(end, judged)])
        if saved:
            folder = tmp_path / f"links-{len(cuts)}-{count}-{number}-{start}"
            folder.mkdir(exist_ok=True)
            for name, column in zip(("queries", "documents", "positive", "grades"), columns):
                np.save(folder / f"{name}.npy", column)
            pieces.append(folder)
        else:
            pieces.append(columns)
    order = list(dict.fromkeys(codes))  # queries by first link
    rank = np.array([order.index(code) for code in codes], dtype=np.int32)
    judged_positive = grades[positive[:judged]]
    top = float(judged_positive.max()) if len(judged_positive) else None
    seen: list[int] = []
    for index in range(count):
        part = beir_join.part_links(pieces, 10, (index, count))
        assert part.query_rows.tolist() == order and part.top_grade == top and part.unknown is None
        low, high = part.ranks
        assert (low, high) == (index * len(order) // count, (index + 1) * len(order) // count)
        mine = (rank >= low) & (rank < high)
        assert part.rank.tolist() == rank[mine].tolist()
        assert part.documents.tolist() == documents[mine].tolist()
        assert part.positive.tolist() == positive[mine].tolist()
        assert part.grades.tolist() == grades[mine[:judged]].tolist()
        seen += part.documents.tolist()
    assert sorted(seen) == list(range(links))  # every link is in one part


def test_part_links_names_the_file_that_lacks_an_id() -> None:
    import numpy as np

    def piece(queries: list[int], documents: list[int]) -> Any:
        return (np.array(queries, np.int32), np.array(documents, np.int32), np.ones(len(queries), bool), np.ones(0))

    assert beir_join.part_links([piece([0], [-1]), piece([-1], [0])], 2, (0, 2)).unknown == "queries"
    assert beir_join.part_links([piece([0], [0]), piece([1], [-1])], 2, None).unknown == "corpus"
