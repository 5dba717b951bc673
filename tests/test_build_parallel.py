"""The parallel, vectorised build: the same rows in the same order, skips, notes, Parquet files and errors
as the row-by-row build, whatever ``num_proc`` and however the files are cut into blocks."""

from __future__ import annotations

import codecs
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import (
    build_plan,
    build_tables,
    build_unified_with_report,
    load_build_recipe,
    render_dataset_card,
    task_summary,
    write_unified,
)
from hf_unified_embed.data.build_plan import Piece, balanced_groups
from hf_unified_embed.data.source_rows import build_source
from hf_unified_embed.errors import HfUnifiedEmbedError
from hf_unified_embed.utils import table_blocks

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"


def reference(recipe: Any) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, int]], dict[str, Any]]:
    """Rows, skips and notes per task of the row-by-row build (one UnifiedEmbedBuilder per source, in order)."""
    plan = load_build_recipe(recipe)
    rows, skipped, notes = {}, {}, {}
    for spec in plan.sources:
        dataset, skips, source_notes = build_source(spec, base_dir=plan.base_dir, cache_dir=tempfile.mkdtemp())
        for task in dict.fromkeys(dataset["task"]):
            rows[task] = [row for row in dataset.to_list() if row["task"] == task]
            skipped[task] = dict(skips)
            notes[task] = source_notes
    return rows, skipped, notes


def reference_error(recipe: Any) -> str:
    with pytest.raises(HfUnifiedEmbedError) as caught:
        reference(recipe)
    return str(caught.value)


def built(
    recipe: Any, num_proc: int
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, int]], dict[str, Any]]:
    result = build_unified_with_report(recipe, num_proc=num_proc)
    rows = {task: dataset.to_list() for task, dataset in result.dataset.items()}
    return rows, {task: dict(counts) for task, counts in result.skipped.items()}, result.notes


def write_tsv(path: Path, lines: list[str], *, newline: str = "\n", bom: bool = False) -> None:
    data = newline.join(lines) + newline
    path.write_bytes((codecs.BOM_UTF8 if bom else b"") + data.encode("utf-8"))


def stsb_line(
    i: int, score: str = "3.2", first: str | None = None, second: str | None = None, extra: bool = False
) -> str:
    first = f"A man plays flute number {i}." if first is None else first
    second = f"A man is playing a flute {i} times." if second is None else second
    return f"main-captions\tMSRvid\t2012test\t{i:04d}\t{score}\t{first}\t{second}" + (
        "\tsrc-a\tsrc-b" if extra else ""
    )


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recipe of many sources, several of many files, with the odd corners of real files."""
    root = tmp_path_factory.mktemp("synthetic")
    # STS-B: a byte-order mark, CRLF line ends, blank and whitespace lines, Unicode spaces around the
    # sentences, 9-field lines, and scores that Arrow and Python parse alike ("5", "+1.5", "4.") or only
    # Python does (" 3.2", with a space: that block is read line by line).
    write_tsv(
        root / "stsb-a.tsv",
        [stsb_line(i, score=("5", "+1.5", "4.", "0.000", "2.75")[i % 5], extra=i % 4 == 0) for i in range(40)]
        + ["", "   ", stsb_line(40, first="\u3000 Spaced\xa0out \x1c", second="\u2003Tabbed  \x85")],
        bom=True,
    )
    write_tsv(root / "stsb-b.tsv", [stsb_line(i, score=" 3.2") for i in range(50, 60)], newline="\r\n")
    write_tsv(root / "stsb-c.tsv", [stsb_line(i) for i in range(60, 90)])
    write_tsv(
        root / "sick.txt",
        ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
        + [f"{i}\tKids play {i}\tChildren playing {i}\t{1 + i % 5}.0\tNEUTRAL" for i in range(1, 30)],
    )
    for part in range(3):
        lines = []
        for i in range(12):
            score = "" if i % 4 == 0 else f"{(i + part) % 6}.00"
            lines.append(f"{score}\tSentence {part}-{i}\tOther sentence {part}-{i}")
        write_tsv(root / f"semeval-{part}.tsv", lines, newline="\r" if part == 2 else "\n")
    write_tsv(
        root / "msrp.tsv",
        ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        + [f'{i % 2}\t{i}\t{i + 1}\tA "quoted" string {i}\tAnother string {i}' for i in range(25)],
        bom=True,
    )
    for part in range(2):
        lines = ["QuestionID\tQuestion\tSentenceID\tSentence\tLabel"]
        for q in range(8):
            for c in range(3):
                correct = int(c == q % 3) if q % 4 else 0
                lines.append(f"Q{part}{q}\thow is {part}-{q} made?\tS{c}\tcandidate {c} of {part}-{q}\t{correct}")
        write_tsv(root / f"wikiqa-{part}.tsv", lines)
    for part in range(2):
        folder = root / f"beir-{part}"
        (folder / "qrels").mkdir(parents=True)
        (folder / "corpus.jsonl").write_text(
            "".join(
                json.dumps({"_id": f"d{i}", "title": f"T{i}", "text": f"passage {part}-{i}"}) + "\n" for i in range(12)
            )
        )
        (folder / "queries.jsonl").write_text(
            "".join(json.dumps({"_id": f"q{i}", "text": f"query {part}-{i}"}) + "\n" for i in range(6))
        )
        (folder / "qrels" / "train.tsv").write_text(
            "query-id\tcorpus-id\tscore\n"
            + "".join(f"q{i}\td{2 * i}\t{1 + i % 3}\nq{i}\td{2 * i + 1}\t0\n" for i in range(6))
        )
    # A folder with numeric ids (read record by record), null and blank titles, blank lines and mined
    # negatives, some with numeric corpus ids.
    folder = root / "mined"
    (folder / "qrels").mkdir(parents=True)
    corpus = [{"_id": i, "title": (None, "", "  Title  ")[i % 3], "text": f"  numeric passage {i} "} for i in range(8)]
    corpus_lines = [json.dumps(record) for record in corpus]
    corpus_lines.insert(3, "")
    (folder / "corpus.jsonl").write_text("\n".join(corpus_lines) + "\n")
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": f"query {i}"}) + "\n" for i in range(4))
    )
    (folder / "qrels" / "train.tsv").write_text("".join(f"q{i}\t{2 * i}\t1\n" for i in range(4)))
    (folder / "negatives.jsonl").write_text(
        json.dumps({"query-id": "q0", "corpus-ids": ["1", "3", "0"]})
        + "\n\n"
        + json.dumps({"query-id": "q1", "corpus-ids": [5, 7]})
        + "\n"
        + json.dumps({"query-id": "q2", "corpus-ids": ["6", "6", "1"]})
        + "\n"
    )
    pair_lines = [
        json.dumps({"anchor": f" anchor {i} ", "positive": f"positive {i}", "score": i % 5, "extra": [i]})
        for i in range(30)
    ]
    pair_lines[7] = json.dumps({"anchor": "anchor 7", "positive": ["positive 7a", "positive 7b"], "score": 2.5})
    pair_lines.insert(12, "   ")
    (root / "pairs-a.jsonl").write_text("\n".join(pair_lines) + "\n")
    pq.write_table(
        pa.table(
            {
                "anchor": [f"parquet anchor {i}" for i in range(20)],
                "positive": [f"p {i}" for i in range(20)],
                "score": [float(i % 5) for i in range(20)],
            }
        ),
        root / "pairs-b.parquet",
        row_group_size=7,
    )
    (root / "pairs-c.json").write_text(
        json.dumps([{"anchor": "array anchor", "positive": "array positive", "score": 1}])
    )
    (root / "pairs-d.csv").write_text('anchor,positive,score\n"csv, anchor",csv positive,3\n')
    (root / "triplets-a.jsonl").write_text(
        "".join(
            json.dumps({"anchor": f"a{i}", "positive": f"p{i}", "negative": [f"n{i}", f"m{i}"]}) + "\n"
            for i in range(15)
        )
    )
    pq.write_table(
        pa.table({"anchor": ["x", "y"], "positive": [["px"], ["py", "pz"]], "negative": ["nx", "ny"]}),
        root / "triplets-b.parquet",
    )
    (root / "medi.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "query": ["Represent a question: ", f"q{i}"],
                    "pos": ["Represent a doc: ", f"d{i}"],
                    "neg": ["Represent a doc: ", f"n{i}"],
                    "task_name": f"medi-{i % 2}",
                }
            )
            + "\n"
            for i in range(10)
        )
    )
    sources = [
        {"name": "stsb", "format": "stsb", "data_files": "stsb-*.tsv", "task_type": "sts", "query_instruction": "Q: "},
        {"name": "sick", "format": "sick", "data_files": "sick.txt", "task_type": "sts"},
        {"name": "semeval", "format": "semeval-sts", "data_files": "semeval-*.tsv", "task_type": "sts"},
        {
            "name": "msrp",
            "format": "msrp",
            "data_files": "msrp.tsv",
            "task_type": "retrieval",
            "options": {"positives_only": True},
        },
        {"name": "wikiqa", "format": "wikiqa", "data_files": "wikiqa-*.tsv", "task_type": "retrieval"},
        {
            "name": "beir",
            "format": "beir",
            "data_files": "beir-*",
            "task_type": "retrieval",
            "options": {"zero_grade_as_negatives": True},
        },
        {
            "name": "mined",
            "format": "beir",
            "data_files": "mined",
            "task_type": "retrieval",
            "options": {"negatives_file": "negatives.jsonl", "max_negatives": 2},
        },
        {
            "name": "pairs",
            "format": "pairs",
            "data_files": "pairs-*",
            "task_type": "sts",
            "options": {"score_column": "score", "score_range": [0, 4]},
        },
        {
            "name": "triplets",
            "format": "triplets",
            "data_files": "triplets-*",
            "task_type": "retrieval",
            "document_instruction": "D: ",
        },
        {"name": "medi", "format": "medi", "data_files": "medi.jsonl", "task_type": "retrieval"},
        {"name": "capped", "format": "stsb", "data_files": "stsb-c.tsv", "task_type": "sts", "max_rows": 7},
    ]
    recipe = root / "recipe.yaml"
    recipe.write_text(json.dumps({"sources": sources}))
    return recipe


@pytest.mark.parametrize("num_proc", [1, 2])
def test_synthetic_recipe_matches_the_row_by_row_build(synthetic: Path, num_proc: int):
    expected = reference(synthetic)
    rows, skipped, notes = built(synthetic, num_proc)
    assert list(rows) == list(expected[0])  # the same tasks in the same order
    for task in expected[0]:
        assert rows[task] == expected[0][task], task
        assert skipped[task] == expected[1][task], task
    assert skipped["semeval"] == {"no gold score": 9} and skipped["msrp"] == {"not a paraphrase": 13}
    assert notes == {task: value for task, value in expected[2].items() if value}


@pytest.mark.parametrize("num_proc", [1, 2])
def test_summaries_gathered_while_building_are_those_of_the_rows(synthetic: Path, num_proc: int, tmp_path: Path):
    # build prints these without reading the rows again: each piece's summary, merged in row order.
    result = build_unified_with_report(synthetic, num_proc=num_proc)
    assert list(result.summaries) == list(result.dataset)
    for task, dataset in result.dataset.items():
        assert result.summaries[task] == task_summary(dataset), task
    # So the card build writes from them is the card of the rows.
    splits = {"train": dict(result.dataset)}
    known = {("train", task): summary for task, summary in result.summaries.items()}
    card = render_dataset_card(splits, sources=result.sources, skipped=result.skipped, notes=result.notes)
    assert (
        render_dataset_card(
            splits, sources=result.sources, skipped=result.skipped, notes=result.notes, summaries=known
        )
        == card
    )
    # write_unified measures each split's Arrow bytes once, for the shards and the card: its README is the card.
    folder = write_unified(
        splits,
        tmp_path,
        sources=result.sources,
        skipped=result.skipped,
        notes=result.notes,
        summaries=known,
        validate=False,
    )
    assert (folder / "README.md").read_text(encoding="utf-8") == card


def test_blocks_of_a_few_lines_give_the_same_rows(synthetic: Path, monkeypatch: pytest.MonkeyPatch):
    # Blocks of ~100 bytes: many blocks per file, each converted (or read line by line) on its own.
    expected = reference(synthetic)[0]
    monkeypatch.setattr(table_blocks, "CHUNK_BYTES", 100)
    assert built(synthetic, 2)[0] == expected


def test_plain_blocks_take_the_vectorised_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    write_tsv(tmp_path / "stsb.tsv", [stsb_line(i) for i in range(100)])
    pq.write_table(
        pa.table({"anchor": ["a", "b"], "positive": ["c", "d"], "negative": ["e", "f"]}), tmp_path / "t.parquet"
    )
    row_by_row: Counter[str] = Counter()
    original = build_tables.row_tables

    def counting(rows, spec, *args):
        for table in original(rows, spec, *args):
            row_by_row[spec.name] += table.num_rows
            yield table

    monkeypatch.setattr(build_tables, "row_tables", counting)
    recipe = {
        "sources": [
            {"name": "stsb", "format": "stsb", "data_files": str(tmp_path / "stsb.tsv"), "task_type": "sts"},
            {"name": "t", "format": "triplets", "data_files": str(tmp_path / "t.parquet"), "task_type": "retrieval"},
        ]
    }
    result = build_unified_with_report(recipe)
    assert len(result.dataset["stsb"]) == 100 and len(result.dataset["t"]) == 2
    assert not row_by_row


def _cli_build(recipe: Path, out: Path, num_proc: int) -> None:
    assert main(["build", str(recipe), "-o", str(out), "--num-proc", str(num_proc)]) == 0


def _parquet_files(folder: Path) -> dict[str, pa.Table]:
    return {
        path.relative_to(folder).as_posix(): pq.read_table(path)
        for path in sorted((folder / "data").rglob("*.parquet"))
    }


@pytest.mark.parametrize("recipe", ["sample", "synthetic"])
def test_cli_writes_the_same_parquet_with_one_or_two_processes(recipe: str, synthetic: Path, tmp_path: Path, capsys):
    path = SAMPLE_RECIPE if recipe == "sample" else synthetic
    _cli_build(path, tmp_path / "one", 1)
    _cli_build(path, tmp_path / "two", 2)
    one, two = _parquet_files(tmp_path / "one"), _parquet_files(tmp_path / "two")
    assert list(one) == list(two) and one
    for name in one:
        assert one[name].equals(two[name]), name
    assert (tmp_path / "one" / "README.md").read_text() == (tmp_path / "two" / "README.md").read_text()
    expected = reference(path)[0]
    for task, rows in expected.items():
        split = next((spec.split for spec in load_build_recipe(path).sources if spec.name == task), "train")
        assert one[f"data/{task}/{split}-00000-of-00001.parquet"].to_pylist() == rows


def _broken(tmp_path: Path, case: str) -> dict[str, Any]:
    """A recipe whose first error a single-process build reports in its own words."""
    good = [stsb_line(i) for i in range(20)]
    stsb = {"name": "stsb", "format": "stsb", "data_files": str(tmp_path / "stsb-*.tsv"), "task_type": "sts"}
    write_tsv(tmp_path / "stsb-a.tsv", good)
    second = [stsb_line(i) for i in range(20, 40)]
    sources: list[dict[str, Any]] = [stsb]
    if case == "score":
        second[12] = stsb_line(32, score="6.5")
    elif case == "blank-sentence":
        second[3] = stsb_line(23, second="  \xa0")
    elif case == "short-line":
        second[5] = "main\tMSRvid\t2012\t0001\t3.0"
    elif case == "undecodable":
        write_tsv(tmp_path / "stsb-b.tsv", second)
        data = (tmp_path / "stsb-b.tsv").read_bytes()
        (tmp_path / "stsb-b.tsv").write_bytes(data[:300] + b"\xff" + data[300:])
        return {"sources": sources}
    elif case in ("empty-positive", "json-null", "two-objects", "parquet-null"):
        lines = [json.dumps({"anchor": f"a{i}", "positive": f"p{i}", "negative": f"n{i}"}) for i in range(10)]
        (tmp_path / "t-a.jsonl").write_text("\n".join(lines) + "\n")
        if case == "empty-positive":
            lines[6] = json.dumps({"anchor": "a6", "positive": [], "negative": "n6"})
        elif case == "json-null":
            lines[4] = json.dumps({"anchor": "a4", "positive": None, "negative": "n4"})
        else:
            lines[2] = lines[2] + " " + lines[3]
        (tmp_path / "t-b.jsonl").write_text("\n".join(lines) + "\n")
        if case == "parquet-null":
            (tmp_path / "t-b.jsonl").unlink()
            pq.write_table(
                pa.table({"anchor": ["a", None], "positive": ["p", "q"], "negative": ["n", "m"]}),
                tmp_path / "t-b.parquet",
            )
        sources.append(
            {"name": "t", "format": "triplets", "data_files": str(tmp_path / "t-*"), "task_type": "retrieval"}
        )
    elif case == "empty-source-first":
        write_tsv(tmp_path / "semeval.tsv", ["\tunlabeled\tpair", "\tanother\tpair"])
        sources.insert(
            0,
            {"name": "sem", "format": "semeval-sts", "data_files": str(tmp_path / "semeval.tsv"), "task_type": "sts"},
        )
        second[1] = stsb_line(21, score="nope")
    elif case == "instructions-differ":
        for part, instruction in enumerate(("A: ", "B: ")):
            rows = [
                {
                    "task": "u",
                    "task_type": "retrieval",
                    "query_instruction": instruction,
                    "query": f"q{i}",
                    "positives": ["p"],
                }
                for i in range(4)
            ]
            (tmp_path / f"u-{part}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        sources.append({"name": "u", "format": "unified", "data_files": str(tmp_path / "u-*.jsonl")})
    elif case == "task-twice":
        (tmp_path / "u.jsonl").write_text(
            json.dumps({"task": "stsb", "task_type": "sts", "query": "q", "positives": ["p"], "positive_scores": [1]})
            + "\n"
        )
        sources.append({"name": "u", "format": "unified", "data_files": str(tmp_path / "u.jsonl")})
    write_tsv(tmp_path / "stsb-b.tsv", second)
    return {"sources": sources}


@pytest.mark.parametrize(
    "case",
    [
        "score",
        "blank-sentence",
        "short-line",
        "undecodable",
        "empty-positive",
        "json-null",
        "two-objects",
        "parquet-null",
        "empty-source-first",
        "instructions-differ",
        "task-twice",
    ],
)
def test_errors_are_those_of_the_row_by_row_build(tmp_path: Path, case: str):
    recipe = _broken(tmp_path, case)
    if case == "task-twice":  # a check of build_unified, not of one source's rows
        expected = "<recipe>: task 'stsb' is produced by two sources; build one split at a time (split=...) or rename a source"
    else:
        expected = reference_error(recipe)
    for num_proc in (1, 2):
        with pytest.raises(HfUnifiedEmbedError) as caught:
            build_unified_with_report(recipe, num_proc=num_proc)
        assert str(caught.value) == expected, (num_proc, expected)
    # rows are numbered within the source, across its files
    if case == "empty-positive":
        assert "row 16, field 'positives'" in expected
    if case == "instructions-differ":
        assert "row 4, field 'query_instruction'" in expected


def test_python_whitespace_is_what_str_strip_removes():
    assert "".join(c for c in map(chr, range(0x110000)) if c.isspace()) == table_blocks.PY_WHITESPACE


def test_sources_that_start_processes_or_load_datasets_build_alike(tmp_path: Path):
    # raw-text with its own num_proc runs in the main process (a pool worker may not start processes);
    # a hub source (datasets.load_dataset of a local folder) runs in a worker.
    document = "Tom chases Jerry in the house. Jerry runs from Tom in the house. Spike sleeps all day long."
    (tmp_path / "docs.txt").write_text("\n".join([document, document.replace("house", "garden")] * 3) + "\n")
    hub = tmp_path / "hub" / "data"
    hub.mkdir(parents=True)
    pq.write_table(
        pa.table({"anchor": ["a1", "a2", "a3"], "positive": ["p1", "p2", "p3"]}), hub / "train-00000-of-00001.parquet"
    )
    recipe = {
        "sources": [
            {
                "name": "gur",
                "format": "raw-text",
                "data_files": str(tmp_path / "docs.txt"),
                "options": {"num_proc": 2, "window": 5},
            },
            {"name": "hub", "format": "hub", "data_files": str(tmp_path / "hub"), "task_type": "retrieval"},
            {"name": "stsb", "format": "stsb", "data_files": str(tmp_path / "stsb.tsv"), "task_type": "sts"},
        ]
    }
    write_tsv(tmp_path / "stsb.tsv", [stsb_line(i) for i in range(5)])
    expected = reference(recipe)
    rows, _skipped, notes = built(recipe, 2)
    assert rows == expected[0] and rows["gur"] and len(rows["hub"]) == 3
    assert notes["hub"] == expected[2]["hub"]


def test_answer_selection_remembers_finished_questions_on_disk_past_a_limit(tmp_path: Path, monkeypatch):
    from hf_unified_embed.data.adapters import answer_selection

    lines = ["QuestionID\tQuestion\tSentenceID\tSentence\tLabel"]
    lines += [f"Q{q}\tquestion {q}?\tS{c}\tcandidate {c} of {q}\t{int(c == 1)}" for q in range(30) for c in range(3)]
    write_tsv(tmp_path / "wikiqa.tsv", lines)
    recipe = {
        "sources": [
            {"name": "w", "format": "wikiqa", "data_files": str(tmp_path / "wikiqa.tsv"), "task_type": "retrieval"}
        ]
    }
    expected = reference(recipe)[0]
    monkeypatch.setattr(answer_selection, "QUESTIONS_IN_MEMORY", 3)
    assert built(recipe, 1)[0] == expected
    write_tsv(tmp_path / "wikiqa.tsv", [*lines, "Q5\tquestion 5?\tS9\tagain\t1"])  # question 5 comes back at the end
    with pytest.raises(HfUnifiedEmbedError, match=r"wikiqa.tsv:92, field 'Question': question appears again"):
        build_unified_with_report(recipe, num_proc=1)


@pytest.mark.parametrize("num_proc", [2, 3])
def test_one_large_folder_is_read_in_parts_with_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, num_proc: int
) -> None:
    # One BEIR folder holding most of the input (the shape of MS MARCO) and a small tab file: the folder
    # is cut into num_proc parts of its query order, and the rows come back whole and in order.
    folder = tmp_path / "big"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": f"passage {i} " + "word " * (i % 40)}) + "\n" for i in range(400))
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": f"query {i}"}) + "\n" for i in range(200))
    )
    (folder / "qrels" / "train.tsv").write_text(
        "".join(f"q{(7 * i) % 200}\td{(3 * i) % 400}\t{i % 3}\n" for i in range(600))
    )
    (folder / "negatives.jsonl").write_text(
        "".join(json.dumps({"query-id": f"q{i}", "corpus-ids": [f"d{i}", f"d{i + 1}"]}) + "\n" for i in range(200))
    )
    write_tsv(tmp_path / "small.tsv", [f"main-captions\tMSRvid\t2012\t{i}\t{i % 5}.0\ta {i}\tb {i}" for i in range(5)])
    recipe = {
        "sources": [
            {"name": "small", "format": "stsb", "data_files": str(tmp_path / "small.tsv"), "task_type": "sts"},
            {
                "name": "big",
                "format": "beir",
                "data_files": str(folder),
                "task_type": "retrieval",
                "options": {"negatives_file": "negatives.jsonl", "zero_grade_as_negatives": True},
            },
        ]
    }
    plan = load_build_recipe(recipe)
    planned = build_plan.plan_sources(plan.sources, plan.base_dir, num_proc)
    assert [piece.part for piece in planned[1].pieces] == [(index, num_proc) for index in range(num_proc)]
    rows, skipped, _ = built(recipe, num_proc)
    assert (rows, skipped) == built(recipe, 1)[:2] == reference(recipe)[:2]

    # A folder larger than a part may be: parts of at most that many bytes, as many per process, so a
    # part's memory does not grow with the folder; the same rows.
    size = build_plan.input_size(folder)
    monkeypatch.setattr(build_plan, "_LARGEST_PART_BYTES", size // (2 * num_proc) + 1)
    planned = build_plan.plan_sources(plan.sources, plan.base_dir, num_proc)
    assert [piece.part for piece in planned[1].pieces] == [(index, 2 * num_proc) for index in range(2 * num_proc)]
    assert planned[0].pieces[0].part is None  # the small file stays whole
    assert built(recipe, num_proc)[:2] == (rows, skipped)


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(
        st.text(alphabet=st.sampled_from([*table_blocks.PY_WHITESPACE, "a", "é", "\u200b", "y"]), max_size=6),
        max_size=8,
    ),
    cut=st.integers(0, 8),
)
def test_a_blank_text_is_found_as_str_strip_finds_it(texts: list[str], cut: int) -> None:
    """The row check's blank test (first characters, then only the suspects stripped) against ``str.strip``,
    on one array and on the same texts in two chunks."""
    expected = any(not text.strip() for text in texts)
    assert table_blocks.has_blank_text(pa.array(texts, pa.string())) == expected
    chunks = [pa.array(texts[:cut], pa.string()), pa.array(texts[cut:], pa.string())]
    assert table_blocks.has_blank_text(pa.chunked_array(chunks, pa.string())) == expected


@settings(max_examples=200, deadline=None)
@given(
    pieces=st.lists(st.tuples(st.floats(0.01, 100.0), st.sampled_from([None, 2, 3])), min_size=1, max_size=12),
    count=st.integers(1, 4),
)
def test_groups_hold_every_piece_once_balanced_and_parts_first(
    pieces: list[tuple[float, int | None]], count: int
) -> None:
    """Each piece in one group; no group heavier than the lightest by more than the heaviest piece (the
    greedy largest-first bound); with several groups, in each the parts of large files first, then whole
    pieces, each in piece order, so the parts that share a file's parsed ranges start together."""
    given_pieces = [
        Piece(number, source=number, files=(f"f{number}",), weight=weight, part=None if parts is None else (0, parts))
        for number, (weight, parts) in enumerate(pieces)
    ]
    groups = balanced_groups(given_pieces, count)
    assert sorted(piece.number for group in groups for piece in group) == list(range(len(pieces)))
    assert len(groups) <= count
    loads = [sum(piece.weight for piece in group) for group in groups]
    if count > 1 and len(groups) == count:
        assert max(loads) - min(loads) <= max(piece.weight for piece in given_pieces) + 1e-9
    for group in groups:
        keys = [(piece.part is None and count > 1, piece.number) for piece in group]  # one process: piece order
        assert keys == sorted(keys)
