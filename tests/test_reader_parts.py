"""Reading one file in parts (``table_reader(splittable=...)``, ``read_batches(..., part=(index, count))``)
and the vectorised JSON-lines path of ``pairs`` / ``triplets``.

Properties, over generated file contents (random line lengths, blank lines, a header, a byte-order mark,
CRLF line ends, a last line with or without its line end) and counts 1..6:

* the parts' blocks and rows joined in index order are the whole file's, with the same line numbers,
  skip counts and located errors (an error in a later part names the line the whole read names);
* a block read with pyarrow gives exactly the rows the record-by-record path gives (strings and lists
  of strings mixed, nulls, blanks, empty lists), or is left to that path.

The examples are derandomized (the same ones on every run), so a failure is reproducible.
"""

from __future__ import annotations

import codecs
import io
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.data.source_formats import AdapterContext, get_source_format
from hf_unified_embed.errors import SourceFormatError
from hf_unified_embed.utils import table_blocks
from hf_unified_embed.utils.table_blocks import can_split, iter_text_chunks

EXAMPLES = int(os.environ.get("READER_PARTS_EXAMPLES", "60"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    derandomize=os.environ.get("READER_PARTS_RANDOM") != "1",
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
COUNTS = st.integers(min_value=1, max_value=6)
#: Small blocks, so that a part holds several blocks and a block boundary falls anywhere.
CHUNKS = st.sampled_from([None, 7, 64])

# Field text: tabs and line feeds are the structure, so they are left out of fields; a lone \r (a line end
# to Python, not to a part's byte range), U+2028 and U+0085 (line ends to str.splitlines only), quotes,
# spaces and other non-ASCII text stay.
FIELD = st.text(alphabet=st.sampled_from(list("ab é\"'{}[],:\u00a0\u2003\u2028\x85\rx")), max_size=12)


def _write(folder: Path, name: str, lines: list[str], *, bom: bool, newline: str, last_newline: bool) -> Path:
    path = folder / name
    text = newline.join(lines) + (newline if last_newline and lines else "")
    path.write_bytes((codecs.BOM_UTF8 if bom else b"") + text.encode("utf-8"))
    return path


def _error_of(read: Callable[[], None]) -> str | None:
    """The located error that ends ``read()`` (``None`` if none)."""
    try:
        read()
    except SourceFormatError as error:
        return str(error)
    return None


def _read(
    fmt: str, path: Path, part: tuple[int, int] | None = None, **options: Any
) -> tuple[list, str | None, Counter]:
    """``(rows, error, skipped)`` of the format's ``read_batches`` over ``path`` (or one part of it): each
    batch's rows from its table where there is one, else from its record-by-record path."""
    source_format = get_source_format(fmt)
    context = AdapterContext("test")
    batches = source_format.read.read_batches(
        [path], context, **{**source_format.defaults, **options}, **({} if part is None else {"part": part})
    )
    rows: list[Any] = []

    def read() -> None:
        for batch in batches:
            if batch.table is not None:
                rows.extend(batch.table.to_pylist())
            else:
                for _, row in batch.rows():
                    rows.append(row)

    return rows, _error_of(read), context.skipped


def _read_in_parts(fmt: str, path: Path, count: int, **options: Any) -> tuple[list, str | None, Counter]:
    """The parts read one after the other and joined in index order, stopping at the first error."""
    rows: list[Any] = []
    skipped: Counter[str] = Counter()
    for index in range(count):
        part_rows, error, part_skipped = _read(fmt, path, (index, count), **options)
        rows.extend(part_rows)
        skipped.update(part_skipped)
        if error is not None:
            return rows, error, skipped
    return rows, None, skipped


def _record_rows(fmt: str, path: Path, **options: Any) -> tuple[list, str | None, Counter]:
    """``(rows, error, skipped)`` of the adapter itself, record by record."""
    source_format = get_source_format(fmt)
    context = AdapterContext("test")
    rows: list[Any] = []

    def read() -> None:
        for _, row in source_format.read([path], context, **{**source_format.defaults, **options}):
            rows.append(row)

    return rows, _error_of(read), context.skipped


# Blocks and line numbers.

LINE = st.one_of(
    st.just(""),  # a blank line
    st.just("  "),
    st.lists(FIELD, min_size=1, max_size=4).map("\t".join),
)


@PROPERTY
@given(
    lines=st.lists(LINE, max_size=30),
    bom=st.booleans(),
    newline=st.sampled_from(["\n", "\r\n"]),
    last_newline=st.booleans(),
    header=st.booleans(),
    count=COUNTS,
    chunk_bytes=CHUNKS,
)
def test_parts_join_into_the_whole_files_records(
    lines: list[str], bom: bool, newline: str, last_newline: bool, header: bool, count: int, chunk_bytes: int | None
):
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder), "f.tsv", lines, bom=bom, newline=newline, last_newline=last_newline)

        def records(part: tuple[int, int] | None) -> list[tuple[int, list[str]]]:
            chunks = iter_text_chunks(path, header=header, chunk_bytes=chunk_bytes, part=part)
            return [record for chunk in chunks for record in chunk.delimited(delimiter="\t")]

        def data(part: tuple[int, int] | None) -> bytes:
            return b"".join(chunk.data for chunk in iter_text_chunks(path, chunk_bytes=chunk_bytes, part=part))

        whole = records(None)
        assert [record for index in range(count) for record in records((index, count))] == whole
        assert b"".join(data((index, count)) for index in range(count)) == data(None)


def test_lines_before_a_block_are_counted_as_python_reads_lines(tmp_path: Path):
    # \n, \r\n and a lone \r each end a line, also where a block of the count ends between \r and \n;
    # the offsets asked for go forward (counting on) and back (counting again).
    data = b"a\rb\r\nc\n\r\r\n\n" * 5
    path = tmp_path / "f.tsv"
    path.write_bytes(data)
    starts = [0] + [index + 1 for index, byte in enumerate(data) if byte == ord("\n")]
    for block_bytes in (1, 2, 3, 1 << 22):
        counter = table_blocks.LineCounter(path, block_bytes)
        for offset in starts + starts[::-3]:
            expected = len(io.StringIO(data[:offset].decode(), newline=None).readlines())
            assert counter(offset) == expected, (offset, block_bytes)
    whole = [record for chunk in iter_text_chunks(path) for record in chunk.delimited(delimiter="\t")]
    for count in range(1, 7):
        chunks = [chunk for index in range(count) for chunk in iter_text_chunks(path, part=(index, count))]
        assert [record for chunk in chunks for record in chunk.delimited(delimiter="\t")] == whole


def test_part_spans_cover_the_file_in_order(tmp_path: Path):
    path = tmp_path / "f.jsonl"
    data = b'{"a": 1}\n' * 3 + b"x" * 40 + b"\n" + b"y"
    path.write_bytes(data)
    with open(path, "rb") as handle:
        for count in range(1, 10):
            spans = [table_blocks.part_span(handle, index, count) for index in range(count)]
            assert spans[0][0] == 0 and spans[-1][1] == len(data)
            assert all(spans[i][1] == spans[i + 1][0] for i in range(count - 1))
            for index, (start, end) in enumerate(spans):
                assert start == 0 or data[start - 1 : start] == b"\n"
                chunks = list(iter_text_chunks(path, part=(index, count)))
                assert b"".join(chunk.data for chunk in chunks) == data[start:end]
                if chunks:
                    assert chunks[0].first_line == 1 + data[:start].count(b"\n")


# STS tab files (no quoting): whole, in parts and record by record.


def _stsb_line(score: str, first: str, second: str) -> str:
    return "\t".join(["main-news", "MSRvid", "2012test", "0001", score, first, second])


STSB_LINE = st.one_of(
    st.just(""),
    st.builds(_stsb_line, st.sampled_from(["0", "2.5", "5.000", "4"]), FIELD, FIELD),
)


@PROPERTY
@given(
    lines=st.lists(STSB_LINE, max_size=25),
    broken=st.one_of(st.none(), st.integers(min_value=0, max_value=30)),
    bom=st.booleans(),
    newline=st.sampled_from(["\n", "\r\n"]),
    last_newline=st.booleans(),
    count=COUNTS,
    chunk_bytes=CHUNKS,
)
def test_stsb_parts_rows_and_errors_are_the_whole_files(
    lines: list[str],
    broken: int | None,
    bom: bool,
    newline: str,
    last_newline: bool,
    count: int,
    chunk_bytes: int | None,
):
    if broken is not None:
        lines.insert(min(broken, len(lines)), "too\tfew\tfields")  # a located error, often in a later part
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(table_blocks, "CHUNK_BYTES", chunk_bytes or table_blocks.CHUNK_BYTES)
        path = _write(Path(folder), "stsb.tsv", lines, bom=bom, newline=newline, last_newline=last_newline)
        expected = _record_rows("stsb", path)
        assert _read("stsb", path) == expected
        assert _read_in_parts("stsb", path, count) == expected


@PROPERTY
@given(
    lines=st.lists(st.one_of(st.just(""), st.builds("\t".join, st.lists(FIELD, min_size=4, max_size=4))), max_size=25),
    labels=st.lists(st.sampled_from(["1", "2.5", "", "9"]), min_size=25, max_size=25),
    bom=st.booleans(),
    count=COUNTS,
)
def test_sick_parts_map_columns_by_the_header_and_skip_it_once(
    lines: list[str], labels: list[str], bom: bool, count: int
):
    # Scores come from the generated labels: out of range ("9") or blank, a located error in some part.
    body = [line if not line else f"{labels[i]}\t{line}" for i, line in enumerate(lines)]
    header = "relatedness_score\tpair_ID\tsentence_A\tsentence_B\textra"
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder), "sick.tsv", [header, *body], bom=bom, newline="\n", last_newline=True)
        expected = _record_rows("sick", path)
        assert _read("sick", path) == expected
        assert _read_in_parts("sick", path, count) == expected


def test_semeval_skip_counts_add_up_over_parts(tmp_path: Path):
    lines = [f"{'' if i % 3 == 0 else i % 5}\tfirst {i}\tsecond {i}" for i in range(200)]
    path = _write(tmp_path, "sts.tsv", lines, bom=False, newline="\n", last_newline=True)
    expected = _record_rows("semeval-sts", path)
    assert expected[2] == {"no gold score": 67}
    for count in range(1, 7):
        assert _read_in_parts("semeval-sts", path, count) == expected


# pairs / triplets JSON lines: pyarrow or record by record, whole or in parts.

TEXT_VALUE = st.one_of(FIELD, st.none(), st.just("   "), st.integers(0, 3))
TEXTS_VALUE = st.one_of(TEXT_VALUE, st.lists(st.one_of(FIELD, st.none()), max_size=4))


def _triplet(anchor: Any, positive: Any, negative: Any, drop: str | None) -> str:
    record = {"anchor": anchor, "positive": positive, "negative": negative, "other": [1, {"x": None}]}
    if drop is not None:
        del record[drop]
    return json.dumps(record, ensure_ascii=False)


def _clean_triplets(number: int) -> list[str]:
    return [
        json.dumps({"anchor": f"q{i} ", "positive": f" p{i}", "negative": [f"n{i}", f"m{i}"][: i % 3]})
        for i in range(number)
    ]


@PROPERTY
@given(
    lines=st.lists(
        st.one_of(
            st.just(""),
            st.builds(
                _triplet, TEXT_VALUE, TEXTS_VALUE, TEXTS_VALUE, st.one_of(st.none(), st.sampled_from(["negative"]))
            ),
        ),
        max_size=12,
    ),
    clean=st.integers(min_value=0, max_value=20),
    count=COUNTS,
    chunk_bytes=CHUNKS,
)
def test_triplets_vectorised_and_parts_give_the_record_rows(
    lines: list[str], clean: int, count: int, chunk_bytes: int | None
):
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(table_blocks, "CHUNK_BYTES", chunk_bytes or table_blocks.CHUNK_BYTES)
        path = _write(
            Path(folder), "t.jsonl", _clean_triplets(clean) + lines, bom=False, newline="\n", last_newline=True
        )
        expected = _record_rows("triplets", path)
        assert _read("triplets", path) == expected
        assert _read_in_parts("triplets", path, count) == expected


def _read_tables(fmt: str, path: Path, **options: Any) -> list[pa.Table | None]:
    source_format = get_source_format(fmt)
    batches = source_format.read.read_batches([path], AdapterContext("test"), **{**source_format.defaults, **options})
    return [batch.table for batch in batches]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@pytest.mark.parametrize(
    ("positive", "negative"),
    [("p", ["n", "m"]), (["p"], "n"), ("p", "n"), (["p", "q"], []), ("p", [])],
)
def test_a_text_beside_a_list_of_texts_is_read_by_pyarrow(tmp_path: Path, positive: Any, negative: Any):
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(json.dumps({"anchor": "a", "positive": positive, "negative": negative}) + "\n" for _ in range(5))
    )
    tables = _read_tables("triplets", path)
    assert tables and all(table is not None for table in tables)
    assert tables[0].to_pylist()[0] == {"query": "a", "positives": _as_list(positive), "negatives": _as_list(negative)}
    assert _read("triplets", path)[0] == _record_rows("triplets", path)[0]


@pytest.mark.parametrize("score", [3, 2.5, "4", "4.5"])
def test_pairs_scores_as_numbers_or_texts_are_read_by_pyarrow(tmp_path: Path, score: Any):
    path = tmp_path / "p.jsonl"
    rows = [{"anchor": f"a{i}", "positive": ["p", "q"] if i % 2 else "p", "score": score} for i in range(4)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    options = {"score_column": "score", "score_range": (0, 5)}
    rows_of_pairs = _record_rows("pairs", path, **options)
    # A text column holding lists in some rows and texts in others is left to the record path.
    assert _read("pairs", path, **options) == rows_of_pairs
    path.write_text("".join(json.dumps({**row, "positive": "p"}) + "\n" for row in rows))
    assert all(table is not None for table in _read_tables("pairs", path, **options))
    assert _read("pairs", path, **options) == _record_rows("pairs", path, **options)


def test_the_realistic_triplets_and_stsb_shapes_are_vectorised(tmp_path: Path):
    triplets = tmp_path / "t.jsonl"
    triplets.write_text("\n".join(_clean_triplets(300)) + "\n")
    stsb = _write(
        tmp_path,
        "s.tsv",
        [_stsb_line("3.2", f"a {i}", f"b {i}") for i in range(300)],
        bom=True,
        newline="\n",
        last_newline=False,
    )
    for fmt, path in (("triplets", triplets), ("stsb", stsb)):
        for count in (1, 3):
            for index in range(count):
                tables = _read_tables(fmt, path, part=(index, count))
                assert all(table is not None for table in tables), (fmt, index, count)


# Which files split, and what a file that does not split reads in parts.


def test_can_split_by_format_and_file(tmp_path: Path):
    lines = tmp_path / "t.jsonl"
    lines.write_text(json.dumps({"anchor": "a", "positive": "p", "negative": "n"}) + "\n")
    array = tmp_path / "t.json"
    array.write_text(json.dumps([{"anchor": "a", "positive": "p", "negative": "n"}]))
    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"anchor": ["a"], "positive": ["p"], "negative": ["n"]}), table)
    quoted = tmp_path / "t.csv"
    quoted.write_text('anchor,positive,negative\n"a\nb",p,n\n')
    triplets = get_source_format("triplets").read
    assert triplets.splittable and can_split(triplets, lines)
    assert not any(can_split(triplets, path) for path in (array, table, quoted))
    for fmt in ("stsb", "sick", "semeval-sts", "msrp", "pairs"):
        assert get_source_format(fmt).read.splittable, fmt
    for fmt in ("answer-selection", "medi", "unified"):
        assert not can_split(get_source_format(fmt).read, lines), fmt
    for path in (array, table, quoted):
        expected = _record_rows("triplets", path)
        assert expected[0] and _read("triplets", path, (0, 1)) == expected
        assert _read("triplets", path, (0, 2)) == expected and _read("triplets", path, (1, 2)) == ([], None, {})


def test_a_part_needs_one_file_and_an_index_below_its_count(tmp_path: Path):
    path = _write(tmp_path, "s.tsv", [_stsb_line("1", "a", "b")], bom=False, newline="\n", last_newline=True)
    read_batches = get_source_format("stsb").read.read_batches
    for files, part in (([path, path], (0, 2)), ([path], (2, 2)), ([path], (-1, 2))):
        with pytest.raises(ValueError, match="part="):
            list(read_batches(files, AdapterContext("test"), part=part))


@pytest.mark.parametrize("fmt", ["stsb", "triplets"])
def test_an_error_in_the_last_part_names_the_line_the_whole_read_names(tmp_path: Path, fmt: str):
    if fmt == "stsb":
        lines = [_stsb_line("1", f"a {i}", f"b {i}") for i in range(100)]
        lines[89] = "too\tfew"
        path = _write(tmp_path, "s.tsv", lines, bom=True, newline="\r\n", last_newline=True)
    else:
        lines = _clean_triplets(100)
        lines[89] = json.dumps({"anchor": "a", "positive": ["p", None], "negative": []})
        path = _write(tmp_path, "t.jsonl", lines, bom=False, newline="\n", last_newline=True)
    rows, error, _ = _read(fmt, path)
    assert len(rows) == 89 and error is not None and f"{path.name}:90" in error
    before = sum(len(_read(fmt, path, (index, 3))[0]) for index in range(2))
    part_rows, part_error, _ = _read(fmt, path, (2, 3))
    assert part_error == error and before > 60 and before + len(part_rows) == 89
