"""Every source adapter on the real shared files or a small fixture in the adapter's own format."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hf_unified_embed.data import (
    AdapterContext,
    SourceFormatError,
    get_source_format,
    register_source_format,
    source_format_names,
)
from hf_unified_embed.utils.readers import resolve_files


def read(format_name: str, data_files, **options):
    context = AdapterContext(format_name)
    rows = [row for _, row in get_source_format(format_name).rows(resolve_files(data_files), context, options)]
    return rows, context.skipped


def test_registry_lists_builtin_formats_and_presets():
    names = set(source_format_names())
    assert {
        "stsb",
        "sick",
        "semeval-sts",
        "answer-selection",
        "trecqa",
        "wikiqa",
        "beir",
        "msrp",
        "pairs",
        "triplets",
        "medi",
        "codiemb",
        "unified",
    } <= names
    assert get_source_format("wikiqa").defaults["question_column"] == "Question"


def test_unknown_format_and_option_are_clear_errors():
    with pytest.raises(SourceFormatError, match=r"unknown source format 'nope'.*expected one of"):
        get_source_format("nope")
    with pytest.raises(SourceFormatError, match=r"unknown option\(s\) \['colour'\]"):
        get_source_format("stsb").rows([], AdapterContext("x"), {"colour": 1})


def test_a_new_format_is_one_decorated_generator(tmp_path: Path):
    @register_source_format("test-lines")
    def read_lines(files, context, *, prefix: str = ""):
        """Each line is a query whose positive is the same line."""
        for path in files:
            for number, text in enumerate(path.read_text().splitlines(), start=1):
                yield f"{path}:{number}", {"query": prefix + text, "positives": [text]}

    (tmp_path / "a.txt").write_text("one\ntwo\n")
    rows, _ = read("test-lines", tmp_path / "a.txt", prefix="> ")
    assert [r["query"] for r in rows] == ["> one", "> two"]


# --- real shared data ------------------------------------------------------------------------


def test_stsb(shared_data: Path):
    rows, _ = read("stsb", shared_data / "sts/stsbenchmark/sts-train.csv")
    assert len(rows) == 5749
    assert rows[0] == {
        "query": "A plane is taking off.",
        "positives": ["An air plane is taking off."],
        "positive_scores": [1.0],
    }
    assert rows[1]["positive_scores"] == [pytest.approx(3.8 / 5)]


def test_sick(shared_data: Path):
    rows, _ = read("sick", shared_data / "sts/sick2014/SICK_train.txt")
    assert len(rows) == 4500
    assert rows[0]["positive_scores"] == [pytest.approx((4.5 - 1) / 4)]
    assert all(0 <= r["positive_scores"][0] <= 1 for r in rows)


def test_semeval_skips_and_counts_unlabeled_rows(shared_data: Path):
    rows, skipped = read("semeval-sts", str(shared_data / "sts/semeval/2015/*.tsv"))
    assert len(rows) == 3000 and skipped == {"no gold score": 5500}
    rows, skipped = read("semeval-sts", shared_data / "sts/semeval/2012/MSRpar.train.tsv")
    assert len(rows) == 750 and not skipped and rows[0]["positive_scores"] == [pytest.approx(0.8)]


def test_wikiqa_groups_by_question(shared_data: Path):
    rows, skipped = read("wikiqa", shared_data / "ir/wikiqa/train.tsv")
    assert len(rows) == 872  # the README's count of questions with a correct sentence
    assert skipped == {"question without a correct candidate": 1245, "row with 7 fields instead of 5": 13}
    first = rows[0]
    assert first["query"] == "how are glacier caves formed?"
    assert first["positives"] == ["A glacier cave is a cave formed within the ice of a glacier ."]
    assert len(first["negatives"]) == 4


def test_wikiqa_as_passage_joins_a_questions_candidates_in_file_order(shared_data: Path, tmp_path: Path):
    rows, skipped = read("wikiqa", shared_data / "ir/wikiqa/train.tsv", as_passage=True)
    sentences, _ = read("wikiqa", shared_data / "ir/wikiqa/train.tsv")
    assert len(rows) == 872 and skipped["question without a correct candidate"] == 1245
    first = rows[0]
    assert first["query"] == "how are glacier caves formed?" and first["negatives"] == []
    # The answer (4th line) stays where the paragraph has it, between the wrong candidates.
    assert first["positives"] == [
        "A partly submerged glacier cave on Perito Moreno Glacier . The ice facade is approximately 60 m high "
        "Ice formations in the Titlis glacier cave A glacier cave is a cave formed within the ice of a glacier . "
        '"Glacier caves are often called ice caves , but this term is properly used to describe bedrock caves '
        'that contain year-round ice."'
    ]
    for passage, sentence_row in zip(rows, sentences, strict=True):
        assert all(answer in passage["positives"][0] for answer in sentence_row["positives"])
    fixture = tmp_path / "x.tsv"
    fixture.write_text("question\tcandidate\tlabel\nq\tb\t0\nq\ta\t1\nq\tc\t0\nr\td\t0\n", encoding="utf-8")
    rows, skipped = read("answer-selection", fixture, as_passage=True)
    assert rows == [{"query": "q", "positives": ["b a c"], "negatives": []}]
    assert skipped == {"question without a correct candidate": 1}


def test_trecqa_several_positives_and_hard_negatives(shared_data: Path):
    rows, skipped = read("trecqa", shared_data / "ir/trecqa/train.csv")
    assert len(rows) + skipped["question without a correct candidate"] == 93
    assert sum(len(r["positives"]) > 1 for r in rows) > 40
    assert sum(len(r["negatives"]) for r in rows) > 3000


def test_msrp_labels_as_scores(shared_data: Path):
    rows, _ = read("msrp", shared_data / "pair/msrp/msr-para-train.tsv")
    assert len(rows) == 3576
    assert rows[0]["query"].startswith("Amrozi accused his brother") and rows[0]["positive_scores"] == [1.0]
    assert rows[1]["positive_scores"] == [0.0]
    positives, skipped = read("msrp", shared_data / "pair/msrp/msr-para-train.tsv", positives_only=True)
    assert len(positives) + skipped["not a paraphrase"] == 3576


def test_beir_graded_qrels(shared_data: Path):
    rows, _ = read("beir", shared_data / "ir/msmarco-dl-subset", qrels_split="test")
    assert len(rows) == 43  # the judged queries, in qrels order
    assert sum(len(r["positives"]) for r in rows) == 1601 + 1804 + 697
    assert {round(s, 4) for r in rows for s in r["positive_scores"]} == {0.3333, 0.6667, 1.0}
    assert rows[0]["query"] == "anthropological definition of environment"


# --- fixtures in each format's own layout ---------------------------------------------------


@pytest.fixture
def beir_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": "T" if i == 0 else "", "text": f"doc {i}"} for i in range(6)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (folder / "queries.jsonl").write_text('{"_id": "q2", "text": "second"}\n{"_id": "q1", "text": "first"}\n')
    (folder / "qrels/train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t2\nq1\td1\t1\nq1\td5\t0\nq2\td2\t1\n")
    (folder / "negatives.jsonl").write_text(
        '{"query-id": "q1", "corpus-ids": ["d3", "d0", "d4"]}\n{"query-id": "q2", "corpus-ids": ["d4"]}\n'
    )
    return folder


def test_beir_mined_negatives_and_grade_zero(beir_folder: Path):
    rows, _ = read("beir", beir_folder, negatives_file="negatives.jsonl")
    assert rows[0] == {
        "query": "first",
        "positives": ["T doc 0", "doc 1"],
        "positive_scores": [1.0, 0.5],
        "negatives": ["doc 3", "doc 4"],
    }
    assert rows[1]["query"] == "second" and rows[1]["negatives"] == ["doc 4"]
    rows, _ = read("beir", beir_folder, zero_grade_as_negatives=True, max_grade=4, include_title=False)
    assert rows[0]["negatives"] == ["doc 5"] and rows[0]["positive_scores"] == [0.5, 0.25]


def test_beir_unknown_corpus_id_names_qrels_line(beir_folder: Path):
    with open(beir_folder / "qrels/train.tsv", "a") as handle:
        handle.write("q2\tmissing\t1\n")
    with pytest.raises(SourceFormatError, match=r"qrels/train.tsv:6, field 'corpus-id': corpus id 'missing'"):
        read("beir", beir_folder)


def test_pairs_jsonl_csv_parquet_with_score_range(tmp_path: Path):
    (tmp_path / "p.jsonl").write_text('{"a": "x", "b": "y", "s": 4}\n{"a": "u", "b": "v", "s": 2}\n')
    (tmp_path / "p.csv").write_text("a,b,s\nx,y,4\n")
    pq.write_table(pa.table({"a": ["x"], "b": ["y"], "s": [4.0]}), tmp_path / "p.parquet")
    for name in ("p.jsonl", "p.csv", "p.parquet"):
        rows, _ = read(
            "pairs", tmp_path / name, anchor_column="a", positive_column="b", score_column="s", score_range=[0, 5]
        )
        assert rows[0] == {"query": "x", "positives": ["y"], "positive_scores": [pytest.approx(0.8)]}
    with pytest.raises(SourceFormatError, match=r"p.jsonl:1, field 'anchor': column missing"):
        read("pairs", tmp_path / "p.jsonl")
    with pytest.raises(
        SourceFormatError,
        match=r"p.jsonl:1, field 's': got 4 \(expected a number in \[0, 1\]; set options.score_range",
    ):
        read("pairs", tmp_path / "p.jsonl", anchor_column="a", positive_column="b", score_column="s")


def test_triplets_with_list_negatives(tmp_path: Path):
    (tmp_path / "t.jsonl").write_text(
        '{"anchor": "q", "positive": "p", "negative": ["n1", "n2"]}\n{"anchor": "q2", "positive": "p2", "negative": "n3"}\n'
    )
    rows, _ = read("triplets", tmp_path / "t.jsonl")
    assert rows[0]["negatives"] == ["n1", "n2"] and rows[1]["negatives"] == ["n3"]


def test_medi_json_array_with_task_names(tmp_path: Path):
    records = [
        {
            "query": ["Represent the question: ", "what is x?"],
            "pos": ["Represent the answer: ", "x is y"],
            "neg": ["Represent the answer: ", "z"],
            "task_name": "qa",
        },
        {
            "query": ["Represent the title: ", "A"],
            "pos": ["Represent the title: ", "B"],
            "neg": ["Represent the title: ", "C"],
            "task_name": "titles",
        },
    ]
    (tmp_path / "medi.json").write_text(json.dumps(records, indent=1))
    rows, _ = read("medi", tmp_path / "medi.json")
    assert [r["task"] for r in rows] == ["qa", "titles"]
    assert (
        rows[0]["query_instruction"] == "Represent the question:"
        and rows[0]["document_instruction"] == "Represent the answer:"
    )
    assert rows[0]["negatives"] == ["z"]
    rows, skipped = read("medi", tmp_path / "medi.json", tasks=["titles"])
    assert len(rows) == 1 and skipped["task not selected"] == 1


def test_codiemb_rows(tmp_path: Path):
    lines = [
        {
            "task_type": "sts",
            "query": ["Represent the sentence", "", "a"],
            "positives": [["Represent the sentence", "", "b"]],
            "negatives": [],
            "positive_scores": [1.0],
            "negative_scores": [],
        },
        {
            "task_type": "ir",
            "query": ["Find passages", "Be brief:", "q"],
            "positives": [["", "", "p"]],
            "negatives": [["", "", "n"]],
            "positive_scores": [],
            "negative_scores": [],
        },
    ]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
    rows, _ = read("codiemb", tmp_path / "c.jsonl")
    assert rows[0]["task_type"] == "sts" and rows[0]["document_instruction"] == "Represent the sentence"
    assert rows[1] == {
        "task_type": "retrieval",
        "query_instruction": "Find passages",
        "document_instruction": "",
        "query": "Be brief: q",
        "positives": ["p"],
        "negatives": ["n"],
        "positive_scores": [],
        "negative_scores": [],
    }
    (tmp_path / "bad.jsonl").write_text(json.dumps({**lines[0], "positive_scores": [3.0]}) + "\n")
    with pytest.raises(SourceFormatError, match=r"bad.jsonl:1, field 'positive_scores'"):
        read("codiemb", tmp_path / "bad.jsonl")


def test_unified_passthrough_and_difficulty(tmp_path: Path):
    row = {"task": "t", "query": "q", "positives": ["p"], "difficulty": 0.2}
    (tmp_path / "u.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(SourceFormatError, match="with_difficulty"):
        read("unified", tmp_path / "u.jsonl")
    rows, _ = read("unified", tmp_path / "u.jsonl", with_difficulty=True)
    assert rows == [row]


@pytest.mark.parametrize(
    ("format_name", "content", "match"),
    [
        (
            "stsb",
            "g\tf\t2012\t1\t7.5\ta\tb\n",
            r"x.tsv:1, field 'score': got '7.5' \(expected a number in \[0, 5\]; for another range use format 'pairs'",
        ),
        ("stsb", "g\tf\t2012\t1\t5\ta\n", r"x.tsv:1: found 6 tab-separated fields"),
        ("semeval-sts", "4\t\tb\n", r"x.tsv:1, field 'sentence1'"),
        ("answer-selection", "question\tcandidate\tlabel\nq\ta\tyes\n", r"x.tsv:2, field 'label': got 'yes'"),
        (
            "answer-selection",
            "question\tcandidate\tlabel\nq\ta\t1\nr\tb\t0\nq\tc\t0\n",
            r"x.tsv:4, field 'question': question appears again",
        ),
        ("wikiqa", "QuestionID\tQ\tSentence\tLabel\n", r"x.tsv:1, field 'Question': column not in the header row"),
    ],
)
def test_malformed_input_names_file_line_and_field(tmp_path: Path, format_name: str, content: str, match: str):
    (tmp_path / "x.tsv").write_text(content)
    with pytest.raises(SourceFormatError, match=match):
        read(format_name, tmp_path / "x.tsv")


def test_missing_file(tmp_path: Path):
    with pytest.raises(SourceFormatError, match=r"nothing.tsv, field 'data_files': file not found"):
        read("stsb", tmp_path / "nothing.tsv")
