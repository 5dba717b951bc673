"""Data errors name their fix, and the delimited text formats read any file name with a ``delimiter`` option.

A missing column names the option that configures it (``options.anchor_column``, ...) and, for delimited
text, the header row it was looked for in; a score out of range names ``options.score_range``; a record
whose fields do not split like its header row names ``options.delimiter``. ``pairs`` and ``triplets`` read
``.txt`` tab files and, with ``delimiter`` (one character, checked when the recipe is read), a delimited
file of any name.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import AdapterContext, SourceFormatError, build_unified, get_source_format
from hf_unified_embed.errors import RecipeError

PROPERTY = settings(
    max_examples=25,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def read(format_name: str, path: Path, **options: object) -> list[dict]:
    context = AdapterContext(format_name)
    return [row for _, row in get_source_format(format_name).rows([path], context, options)]


def recipe(path: Path, fmt: str = "pairs", **options: object) -> dict:
    return {
        "sources": [
            {"name": "p", "format": fmt, "data_files": str(path), "task_type": "retrieval", "options": options}
        ]
    }


# --- delimiter ------------------------------------------------------------------------------------


def test_pairs_reads_a_txt_tab_file(tmp_path: Path) -> None:
    path = tmp_path / "pairs.txt"
    path.write_text("anchor\tpositive\nq one\tp one\nq two\tp two\n")
    assert read("pairs", path) == [
        {"query": "q one", "positives": ["p one"]},
        {"query": "q two", "positives": ["p two"]},
    ]


def test_delimiter_option_reads_any_extension_in_a_build(tmp_path: Path) -> None:
    path = tmp_path / "pairs.dat"
    path.write_text("anchor;positive;negative\nq;p;n\n")
    built = build_unified(recipe(path, "triplets", delimiter=";"))["p"]
    assert built["query"] == ["q"] and built["positives"] == [["p"]] and built["negatives"] == [["n"]]


def test_another_extension_without_delimiter_names_the_option(tmp_path: Path) -> None:
    path = tmp_path / "pairs.dat"
    path.write_text("anchor;positive\nq;p\n")
    with pytest.raises(
        SourceFormatError, match=r"pairs.dat, field 'delimiter': unsupported file type '.dat'.*options.delimiter"
    ):
        read("pairs", path)


@pytest.mark.parametrize("bad", [";;", "", 1, ["\t"]])
def test_delimiter_is_one_character_checked_with_the_recipe(tmp_path: Path, bad: object) -> None:
    path = tmp_path / "p.csv"
    path.write_text("anchor,positive\nq,p\n")
    with pytest.raises(
        RecipeError,
        match=r"option 'delimiter' of format 'pairs': input should be a string of exactly 1 character or null",
    ):
        build_unified(recipe(path, delimiter=bad))


@pytest.mark.parametrize("bad", ["\n", '"', ";;"])
def test_delimiter_checked_when_the_adapter_is_called_directly(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "p.dat"
    path.write_text("anchor,positive\nq,p\n")
    with pytest.raises(SourceFormatError, match=r"field 'delimiter'.*options.delimiter to be one character"):
        read("pairs", path, delimiter=bad)


def test_unknown_option_lists_delimiter(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("anchor,positive\nq,p\n")
    with pytest.raises(RecipeError, match=r"unknown option\(s\) \['delimeter'\].*'delimiter'"):
        build_unified(recipe(path, delimeter=";"))


def test_delimiter_for_a_json_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"anchor": "q", "positive": "p"}\n')
    with pytest.raises(
        SourceFormatError, match=r"p.jsonl, field 'delimiter': options.delimiter ';' is for delimited text"
    ):
        build_unified(recipe(path, delimiter=";"))


texts = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=12
).filter(lambda text: text.strip() == text and text.strip() != "" and "\x85" not in text)


@PROPERTY
@given(
    delimiter=st.sampled_from(["\t", ",", ";", "|", " ", "\x1f", "é"]),
    suffix=st.sampled_from([".txt", ".tsv", ".csv", ".dat", ""]),
    rows=st.lists(st.tuples(texts, texts), min_size=1, max_size=5),
    given_delimiter=st.booleans(),
)
def test_any_delimiter_and_suffix_round_trip(
    tmp_path_factory: pytest.TempPathFactory, delimiter: str, suffix: str, rows: list, given_delimiter: bool
) -> None:
    """A file written by ``csv`` with a delimiter reads back the same rows with that ``delimiter`` whatever its
    name; without the option, a suffix that implies another delimiter (or none) is one located error."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\n")
    writer.writerows([("anchor", "positive"), *rows])
    path = tmp_path_factory.mktemp("d") / f"pairs{suffix}"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    implied = {".txt": "\t", ".tsv": "\t", ".csv": ","}.get(suffix)
    options = {"delimiter": delimiter} if given_delimiter else {}
    if given_delimiter or implied == delimiter:
        assert read("pairs", path, **options) == [{"query": q, "positives": [p]} for q, p in rows]
        return
    with pytest.raises(SourceFormatError) as info:
        read("pairs", path, **options)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and "options." in message, message


# --- errors that name their fix ----------------------------------------------------------------


def test_missing_json_column_names_the_option(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"question": "q", "positive": "p"}\n')
    with pytest.raises(SourceFormatError) as info:
        read("pairs", path)
    assert "p.jsonl:1, field 'anchor': column missing; the record has ['positive', 'question']" in str(info.value)
    assert "options.anchor_column" in str(info.value)
    with pytest.raises(SourceFormatError, match=r"field 'neg'.*options.negative_column"):
        read("triplets", path, anchor_column="question", negative_column="neg")


def test_headerless_tsv_names_the_header_row_and_option(tmp_path: Path) -> None:
    path = tmp_path / "p.tsv"
    path.write_text("q one\tp one\n")
    with pytest.raises(SourceFormatError) as info:
        read("pairs", path)
    message = str(info.value)
    assert "p.tsv:1, field 'anchor': column not in the header row ['q one', 'p one']" in message
    assert "options.anchor_column" in message and "header row naming its columns" in message


def test_wrong_delimiter_names_the_one_the_header_holds(tmp_path: Path) -> None:
    path = tmp_path / "p.tsv"
    path.write_text("anchor,positive\nq,p\n")
    with pytest.raises(SourceFormatError, match=r"the row holds ',': set options.delimiter to ','"):
        read("pairs", path)


@pytest.mark.parametrize("line", ["q\n", "q\tp\tmore text\n"])
def test_fields_that_do_not_split_like_the_header_name_the_delimiter(tmp_path: Path, line: str) -> None:
    path = tmp_path / "p.tsv"
    path.write_text("anchor\tpositive\nok\tfine\n" + line)
    with pytest.raises(
        SourceFormatError, match=r"p.tsv:3: \d field\(s\) split at '\\t' where the header row has 2.*options.delimiter"
    ):
        read("pairs", path)


def test_a_trailing_empty_field_is_no_error(tmp_path: Path) -> None:
    path = tmp_path / "p.tsv"
    path.write_text("anchor\tpositive\nq\tp\t\n")
    assert read("pairs", path) == [{"query": "q", "positives": ["p"]}]


def test_score_out_of_range_names_score_range(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("anchor,positive,score\nq,p,4\n")
    with pytest.raises(
        SourceFormatError,
        match=r"p.csv:2, field 'score': got '4' \(expected a number in \[0, 1\]; set options.score_range",
    ):
        read("pairs", path, score_column="score")


def test_missing_score_column_names_its_option(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("anchor,positive\nq,p\n")
    with pytest.raises(SourceFormatError, match=r"field 'label'.*options.score_column"):
        read("pairs", path, score_column="label")


def test_sick_and_answer_selection_columns_name_their_options(tmp_path: Path) -> None:
    path = tmp_path / "x.tsv"
    path.write_text("pair_ID\tsentence_A\tsentence_B\tscore\n1\ta\tb\t3\n")
    with pytest.raises(SourceFormatError, match=r"field 'relatedness_score'.*options.score_column"):
        read("sick", path)
    path.write_text("question,candidate,label\nq,a,1\n")
    with pytest.raises(
        SourceFormatError, match=r"field 'question'.*set options.delimiter to ','.*options.question_column"
    ):
        read("answer-selection", path)


def test_build_cli_prints_the_fix_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.tsv").write_text("anchor,positive\nq,p\n")
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe(tmp_path / "p.tsv")))
    assert main(["build", str(path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "options.delimiter" in lines[0] and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_label_grade_and_difficulty_errors_name_their_options(tmp_path: Path) -> None:
    path = tmp_path / "x.tsv"
    path.write_text("question\tcandidate\tlabel\nq\ta\tyes\n")
    with pytest.raises(SourceFormatError, match=r"x.tsv:2, field 'label': got 'yes'.*options.positive_label"):
        read("answer-selection", path)
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "a document"}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "a query"}\n')
    (beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t3\n")
    with pytest.raises(SourceFormatError, match=r"grade 3 exceeds max_grade 2.*set options.max_grade"):
        read("beir", beir, max_grade=2)
    (beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1 d1 1\n")
    with pytest.raises(SourceFormatError, match=r"train.tsv:2: found 1 tab-separated fields"):
        read("beir", beir)
    unified = tmp_path / "u.jsonl"
    unified.write_text('{"query": "q", "positives": ["p"]}\n')
    with pytest.raises(SourceFormatError, match=r"field 'difficulty'.*options.with_difficulty"):
        read("unified", unified, with_difficulty=True)


def test_a_tab_written_in_yaml_as_backslash_t_builds_a_dat_file(tmp_path: Path, capsys) -> None:
    (tmp_path / "pairs.dat").write_text("anchor\tpositive\nq one\tp one\n")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "sources:\n  - name: p\n    format: pairs\n    data_files: pairs.dat\n    task_type: retrieval\n"
        '    options: {delimiter: "\\t"}\n'
    )
    assert main(["build", str(recipe), "-o", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    assert "wrote 1 rows in 1 task(s)" in capsys.readouterr().out
