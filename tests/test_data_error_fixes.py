"""Data errors name their fix, and the delimited text formats read any file name with a ``delimiter`` option.

A missing column names the option that configures it (``options.anchor_column``, ...) and, for delimited
text, the header row it was looked for in; a score out of range names ``options.score_range``; a record
whose fields do not split like its header row names ``options.delimiter``. ``pairs`` and ``triplets`` read
``.txt`` tab files and, with ``delimiter`` (one character, checked when the recipe is read), a delimited
file of any name.

The data edges: a column named twice in a header row is refused with its positions; a lost quote is
reported at the line where it opens; option values (``score_range``, ``delimiter``, an ``sts`` source
without ``score_column``) are refused with the recipe and source named; a duplicate BEIR ``_id`` names
the id and its lines on both build paths; ``hub`` given one file says which format reads one file.
"""

from __future__ import annotations

import csv
import io
import json
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


@pytest.mark.parametrize("bad", [";;", "", 1, ["\t"], '"', "\n", "\r"])
def test_delimiter_is_one_character_checked_with_the_recipe(tmp_path: Path, bad: object) -> None:
    # Checked when the recipe is loaded: the error names the recipe, the source and the option.
    path = tmp_path / "p.csv"
    path.write_text("anchor,positive\nq,p\n")
    with pytest.raises(
        RecipeError,
        match=r"<recipe>: sources\[0\]: source 'p', field 'options': option 'delimiter' of format 'pairs': input "
        "should be one character other than a quote or a line end",
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


# --- data edges: duplicate header names, lost quotes, option values, duplicate ids, hub given a file ---


def build_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], *sources: dict, args: tuple = ()) -> tuple[int, str]:
    """``build`` of a recipe file holding ``sources``: the exit code and the last line of stderr (the
    error, after datasets' progress bars); the output folder must not exist after a failure."""
    recipe_file = tmp_path / "recipe.yaml"
    recipe_file.write_text(yaml.safe_dump({"sources": list(sources)}))
    out = tmp_path / "out"
    code = main(["build", str(recipe_file), "-o", str(out), *args])
    lines = capsys.readouterr().err.strip().splitlines()
    if code:
        assert not out.exists(), "a failed build left its output"
    return code, lines[-1] if lines else ""


COLUMN = st.text(st.characters(min_codepoint=ord("a"), max_codepoint=ord("z")), min_size=1, max_size=6)


@PROPERTY
@given(
    others=st.lists(COLUMN, min_size=1, max_size=4, unique=True),
    places=st.lists(st.integers(0, 5), min_size=2, max_size=3),
    delimiter=st.sampled_from([",", "\t", ";"]),
)
def test_a_column_named_twice_in_the_header_is_refused_with_its_positions(
    tmp_path_factory: pytest.TempPathFactory, others: list[str], places: list[int], delimiter: str
) -> None:
    # `question, answer, answer` read the second answer without a word; which one is meant is not the
    # reader's guess.
    header = [name for name in others if name != "answer"] or ["question"]
    for place in sorted(places):
        header.insert(min(place, len(header)), "answer")
    header.insert(0, "question") if "question" not in header else None
    positions = [index + 1 for index, name in enumerate(header) if name == "answer"]
    path = tmp_path_factory.mktemp("dup") / "faq.dat"
    path.write_text(delimiter.join(header) + "\n" + delimiter.join(f"v{i}" for i in range(len(header))) + "\n")
    with pytest.raises(SourceFormatError) as info:
        build_unified(recipe(path, anchor_column="question", positive_column="answer", delimiter=delimiter))
    message = str(info.value)
    assert f"{path}:1, field 'answer': the header row names this column {len(positions)} times" in message
    assert f"as fields {', '.join(map(str, positions))} of" in message


def test_a_duplicate_header_through_the_cli_and_in_sick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "faq.tsv"
    path.write_text("question\tanswer\tanswer\nq1\ta1\tb1\n")
    source = {"name": "faq", "format": "pairs", "data_files": str(path), "task_type": "retrieval"}
    source["options"] = {"anchor_column": "question", "positive_column": "answer"}
    code, error = build_cli(tmp_path, capsys, source)
    assert code == 2 and error.startswith(f"error: {path}:1, field 'answer':") and "fields 2, 3" in error
    sick = tmp_path / "sick.txt"
    sick.write_text("pair_ID\tsentence_A\tsentence_B\trelatedness_score\tsentence_A\n1\ta\tb\t4.5\tc\n")
    with pytest.raises(SourceFormatError, match=r"sick.txt:1, field 'sentence_A': .* 2 times, as fields 2, 5"):
        read("sick", sick)


@PROPERTY
@given(
    lines=st.integers(3, 16),
    data=st.data(),
    column=st.sampled_from([0, 1]),
    closed_later=st.booleans(),
    legit=st.booleans(),
)
def test_an_unclosed_quote_is_reported_where_it_opens(
    tmp_path_factory: pytest.TempPathFactory,
    lines: int,
    data: st.DataObject,
    column: int,
    closed_later: bool,
    legit: bool,
) -> None:
    # Rows 2..lines; the quote opens at line `opens`. A later properly quoted field (closed_later) closes it
    # in the wrong place; a legitimate multi-line quoted field before it must still read.
    opens = data.draw(st.integers(3 if legit else 2, lines), label="opens")
    rows = [[f"q{n}", f"a{n}"] for n in range(2, lines + 1)]
    text = "anchor,positive\n"
    for number, row in enumerate(rows, start=2):
        if number == opens:
            row[column] = f'"open {row[column]}'
        elif closed_later and number == lines and number > opens:
            row[1] = f'"{row[1]}"'
        text += ",".join(row) + "\n"
    if legit:  # line 2 becomes a quoted text over two lines: the lines after it move down by one
        text = text.replace("q2,a2\n", 'q2,"a2 first line\nsecond line"\n', 1)
        opens += 1
    path = tmp_path_factory.mktemp("quote") / "pairs.csv"
    path.write_text(text)
    with pytest.raises(SourceFormatError) as info:
        build_unified(recipe(path))
    assert info.value.line == opens, str(info.value)
    assert "a quoted field opens here" in str(info.value)


def test_quoted_fields_over_several_lines_still_read(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    path.write_text('anchor,positive\nq1,"a ""quoted"" text\nover two lines"\nq2,a2\n"q3\n",a3\n')
    built = build_unified(recipe(path))["p"]
    assert built["positives"] == [['a "quoted" text\nover two lines'], ["a2"], ["a3"]]
    path.write_text('anchor,positive\nq1,a1\nq2,a2\n"q3\n')
    with pytest.raises(SourceFormatError, match=r"pairs.csv:4: a quoted field opens here .* runs on to line 4"):
        build_unified(recipe(path))


@pytest.mark.parametrize(
    ("fmt", "options", "says"),
    [
        ("pairs", {"score_column": "score", "score_range": [5, 0]}, "option 'score_range' of format 'pairs'"),
        ("pairs", {"score_column": "score", "score_range": [1, 1]}, "option 'score_range' of format 'pairs'"),
        ("hub", {"score_column": "score", "score_range": [2, -2]}, "option 'score_range' of format 'hub'"),
        ("pairs", {"score_column": "score", "delimiter": '"'}, "option 'delimiter' of format 'pairs'"),
        ("answer-selection", {"delimiter": "\n"}, "option 'delimiter' of format 'answer-selection'"),
        ("semeval-sts", {"max_score": 0}, "option 'max_score' of format 'semeval-sts'"),
        ("pairs", {}, "options.score_column"),
        ("hub", {}, "options.score_column"),
    ],
)
def test_option_value_errors_name_recipe_and_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, options: dict, says: str
) -> None:
    path = tmp_path / "scores.csv"
    path.write_text("anchor,positive,score\nq,p,0.5\n")
    source = {"name": "similar", "format": fmt, "data_files": str(path), "task_type": "sts", "options": options}
    code, error = build_cli(tmp_path, capsys, source)
    assert code == 2
    assert error.startswith(f"error: {tmp_path / 'recipe.yaml'}: sources[0]: source 'similar', field 'options':")
    assert says in error


@pytest.mark.parametrize("processes", ["1", "2"])
@pytest.mark.parametrize("twice", ["corpus", "queries"])
def test_a_duplicate_beir_id_names_the_id_and_its_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], processes: str, twice: str
) -> None:
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    corpus = [{"_id": f"d{n}", "text": f"document {n}"} for n in range(6)]
    queries = [{"_id": f"q{n}", "text": f"query {n}"} for n in range(4)]
    if twice == "corpus":
        corpus.insert(4, {"_id": "d2", "text": "another text"})
    else:
        queries.append({"_id": "q1", "text": "again"})
    (folder / "corpus.jsonl").write_text("".join(json.dumps(record) + "\n" for record in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(record) + "\n" for record in queries))
    (folder / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{n}\td{n}\t1\n" for n in range(4))
    )
    source = {"name": "b", "format": "beir", "data_files": str(folder), "task_type": "retrieval"}
    code, error = build_cli(tmp_path, capsys, source, args=("--num-proc", processes))
    assert code == 2
    expected = (
        f"error: {folder / 'corpus.jsonl'}:5, field '_id': duplicate _id 'd2' on lines 3 and 5"
        if twice == "corpus"
        else f"error: {folder / 'queries.jsonl'}:5, field '_id': duplicate _id 'q1' on lines 2 and 5"
    )
    assert error.startswith(expected), error


def test_hub_given_one_file_says_what_it_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "train.parquet"
    path.write_bytes(b"")
    source = {"name": "h", "format": "hub", "data_files": str(path), "task_type": "retrieval"}
    code, error = build_cli(tmp_path, capsys, source)
    assert code == 2
    assert error.startswith(f"error: {path}, field 'data_files': format 'hub' reads a Hub dataset id or a folder")
    assert "not one file" in error and "format 'pairs'" in error and "Couldn't find" not in error


def test_an_option_refused_while_reading_names_its_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "copy"
    folder.mkdir()
    source = {"name": "h", "format": "hub", "data_files": str(folder), "task_type": "retrieval"}
    source["options"] = {"positive_columns": []}
    code, error = build_cli(tmp_path, capsys, source)
    assert code == 2
    assert error.startswith("error: source 'h' (format 'hub'): field 'positive_columns': no positive column")


def test_answer_selection_reports_a_lost_quote_where_it_opens(tmp_path: Path) -> None:
    path = tmp_path / "trecqa.csv"
    path.write_text('qid,qtext,aid,atext,label\n1,"q one,1,a1,1\n1,q one,2,a2,0\n2,q two,3,"a3\n""x""",1\n')
    with pytest.raises(SourceFormatError, match=r"trecqa.csv:2: a quoted field opens here .* runs on to line 4"):
        read("trecqa", path)
    path.write_text('qid,qtext,aid,atext,label\n1,q one,1,"a1\nsecond line",1\n2,q two,3,a3,1\n')
    rows = read("trecqa", path)
    assert [row["positives"] for row in rows] == [["a1\nsecond line"], ["a3"]]
