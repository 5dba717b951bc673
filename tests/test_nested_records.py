"""Nested records: a dotted column path (``query.text``) and lists of judged documents.

Hypothesis draws nested JSON shapes (how deep each text sits, keys that themselves hold dots, extra
fields), writes them as JSON lines, a JSON array or Parquet (struct columns), builds them as a user
would, and asserts the built rows against the drawn values. ``judged-documents`` draws lists of
documents judged by a boolean, a label or a score and checks the split into positives and negatives
against the rule ``positive_when`` states.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import SourceFormatError, build_unified
from hf_unified_embed.data.adapters.judged_documents import NO_POSITIVE

TEXTS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Z")), min_size=1, max_size=16)
KEYS = st.text(st.characters(min_codepoint=ord("a"), max_codepoint=ord("z")), min_size=1, max_size=5)
SUFFIXES = [".jsonl", ".json", ".parquet"]


def _nest(path: list[str], value: Any) -> Any:
    for key in reversed(path):
        value = {key: value}
    return value


def _merge(into: dict[str, Any], other: dict[str, Any]) -> None:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(records), path)
    elif path.suffix == ".json":
        path.write_text(json.dumps(records), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    anchor_path=st.lists(KEYS, min_size=1, max_size=4),
    positive_path=st.lists(KEYS, min_size=1, max_size=4),
    pairs=st.lists(st.tuples(TEXTS, TEXTS, st.integers(0, 5)), min_size=1, max_size=6),
    suffix=st.sampled_from(SUFFIXES),
    dotted_key=st.booleans(),
)
def test_a_dotted_column_path_reads_the_nested_field(
    tmp_path_factory: pytest.TempPathFactory,
    anchor_path: list[str],
    positive_path: list[str],
    pairs: list[tuple[str, str, int]],
    suffix: str,
    dotted_key: bool,
) -> None:
    # Neither path may be a prefix of the other (a text cannot also be an object).
    assume(anchor_path[: len(positive_path)] != positive_path[: len(anchor_path)])
    if dotted_key and len(anchor_path) > 1 and suffix != ".parquet":
        # A key that holds a dot is one key: {"a.b": {"c": text}} answers "a.b.c" too.
        anchor_path = [f"{anchor_path[0]}.{anchor_path[1]}", *anchor_path[2:]]
    records = []
    for anchor, positive, extra in pairs:
        record: dict[str, Any] = {"id": extra}
        _merge(record, _nest(anchor_path, anchor))
        _merge(record, _nest(positive_path, positive))
        _merge(record, _nest([anchor_path[0], "other"], "ignored") if len(anchor_path) > 1 else {})
        records.append(record)
    path = tmp_path_factory.mktemp("nested") / f"pairs{suffix}"
    _write(path, records)
    options = {"anchor_column": ".".join(anchor_path), "positive_column": ".".join(positive_path)}
    source = {
        "name": "nested",
        "format": "pairs",
        "data_files": str(path),
        "task_type": "retrieval",
        "options": options,
    }
    built = build_unified({"sources": [source]})["nested"]
    assert built["query"] == [anchor.strip() for anchor, _, _ in pairs]
    assert built["positives"] == [[positive.strip()] for _, positive, _ in pairs]


def test_a_path_that_stops_says_where(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"q": {"text": "a"}, "p": "b"}\n{"q": {"body": "c"}, "p": "d"}\n{"q": "e", "p": "f"}\n')
    source = {"name": "n", "format": "pairs", "data_files": str(path), "task_type": "retrieval"}
    source["options"] = {"anchor_column": "q.text", "positive_column": "p"}
    with pytest.raises(SourceFormatError) as info:
        build_unified({"sources": [source]})
    assert f"{path}:2, field 'q.text': no value at this path: 'q' has no 'text'; its keys are ['body']" in str(
        info.value
    )
    assert "options.anchor_column" in str(info.value)
    path.write_text('{"q": "e", "p": "f"}\n')
    with pytest.raises(
        SourceFormatError, match=r"pairs.jsonl:1, field 'q.text': no value at this path: 'q' holds str"
    ):
        build_unified({"sources": [source]})


# --- judged documents -----------------------------------------------------------------------------

#: The three kinds of judgment: how a document's judgment is drawn, and the `positive_when` that splits them.
LABELS = ["relevant", "partly relevant", "not relevant"]


@st.composite
def judged_queries(draw: st.DrawFn) -> tuple[str, Any, list[tuple[str, list[tuple[str, Any]]]]]:
    kind = draw(st.sampled_from(["boolean", "label", "labels", "score"]))
    if kind == "boolean":
        judgments, positive_when = st.booleans(), True
    elif kind == "label":
        judgments, positive_when = st.sampled_from(LABELS), "relevant"
    elif kind == "labels":
        judgments, positive_when = st.sampled_from(LABELS), ["relevant", "partly relevant"]
    else:
        judgments = st.one_of(st.integers(0, 3), st.floats(0, 3, allow_nan=False))
        positive_when = {"at_least": draw(st.sampled_from([1, 2, 1.5]))}
    queries = draw(
        st.lists(st.tuples(TEXTS, st.lists(st.tuples(TEXTS, judgments), max_size=5)), min_size=1, max_size=6)
    )
    return kind, positive_when, queries


def _is_positive(judgment: Any, positive_when: Any) -> bool:
    if isinstance(positive_when, dict):
        return judgment >= positive_when["at_least"]
    labels = positive_when if isinstance(positive_when, list) else [positive_when]
    return judgment in labels


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=judged_queries(), suffix=st.sampled_from(SUFFIXES), nested_query=st.booleans())
def test_judged_documents_split_by_the_rule(
    tmp_path_factory: pytest.TempPathFactory, drawn: tuple[str, Any, list], suffix: str, nested_query: bool
) -> None:
    kind, positive_when, queries = drawn
    records = [
        {
            "query": {"text": query, "id": index} if nested_query else query,
            "docs": [{"body": {"text": text}, "judgment": judgment} for text, judgment in documents],
        }
        for index, (query, documents) in enumerate(queries)
    ]
    if suffix == ".parquet" and (kind == "score" or not all(q[1] for q in queries)):
        # Arrow types a column by its values: mixed ints and floats, or an empty list, read back as
        # floats or a null type; keep the Parquet case to what a writer of one kind produces.
        assume(kind != "score" and all(documents for _, documents in queries))
    path = tmp_path_factory.mktemp("judged") / f"judged{suffix}"
    _write(path, records)
    options = {
        "query_column": "query.text" if nested_query else "query",
        "documents_column": "docs",
        "text_field": "body.text",
        "judgment_field": "judgment",
        "positive_when": positive_when,
    }
    expected = []
    for query, documents in queries:
        positives = [text.strip() for text, judgment in documents if _is_positive(judgment, positive_when)]
        negatives = [text.strip() for text, judgment in documents if not _is_positive(judgment, positive_when)]
        if positives:
            expected.append((query.strip(), positives, negatives))
    source = {"name": "judged", "format": "judged-documents", "data_files": str(path), "task_type": "retrieval"}
    source["options"] = options
    if not expected:
        with pytest.raises(Exception, match="every row was skipped"):
            build_unified({"sources": [source]})
        return
    built = build_unified({"sources": [source]})["judged"]
    assert list(zip(built["query"], built["positives"], built["negatives"])) == expected


def test_a_judgment_of_the_wrong_kind_names_the_document_and_the_option(tmp_path: Path) -> None:
    path = tmp_path / "judged.jsonl"
    path.write_text(
        json.dumps({"query": "q", "documents": [{"text": "a", "relevant": True}, {"text": "b", "relevant": 2}]}) + "\n"
    )
    source = {"name": "j", "format": "judged-documents", "data_files": str(path), "task_type": "retrieval"}
    with pytest.raises(SourceFormatError) as info:
        build_unified({"sources": [source]})
    message = str(info.value)
    assert f"{path}:1, field 'documents[1].relevant': got 2" in message
    assert "options.positive_when" in message


def test_skipped_queries_are_counted_and_a_csv_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "judged.jsonl"
    lines = [
        {"query": "q1", "documents": [{"text": "a", "relevant": True}, {"text": "b", "relevant": False}]},
        {"query": "q2", "documents": [{"text": "c", "relevant": False}]},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    recipe = tmp_path / "recipe.yaml"
    source = {"name": "j", "format": "judged-documents", "data_files": str(path), "task_type": "retrieval"}
    recipe.write_text(yaml.safe_dump({"sources": [source]}))
    assert main(["build", str(recipe), "-o", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert NO_POSITIVE in card
    csv_file = tmp_path / "judged.csv"
    csv_file.write_text("query,documents\nq,a\n")
    source["data_files"] = str(csv_file)
    recipe.write_text(yaml.safe_dump({"sources": [source]}))
    capsys.readouterr()
    assert main(["build", str(recipe), "-o", str(tmp_path / "out2")]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after datasets' progress bar
    assert error.startswith(f"error: {csv_file}, field 'documents':") and "holds no list" in error


@pytest.mark.parametrize("bad", [{"at_most": 1}, {"at_least": "x"}, 2.5, [], None])
def test_positive_when_is_checked_with_the_recipe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: Any
) -> None:
    path = tmp_path / "judged.jsonl"
    path.write_text(json.dumps({"query": "q", "documents": [{"text": "a", "relevant": True}]}) + "\n")
    recipe = tmp_path / "recipe.yaml"
    source = {"name": "j", "format": "judged-documents", "data_files": str(path), "task_type": "retrieval"}
    source["options"] = {"positive_when": bad}
    recipe.write_text(yaml.safe_dump({"sources": [source]}))
    assert main(["build", str(recipe), "-o", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert f"{recipe}: sources[0]: source 'j', field 'options': option 'positive_when'" in error
    assert "{at_least: a number}" in error
