"""Scores written with a decimal comma: the ``decimal`` option of ``pairs``, and the errors without it.

A spreadsheet in a locale that writes ``7,8`` exports ``;``-separated text (often with a byte-order mark
and Windows line ends). ``decimal: ","`` reads those scores exactly as ``decimal: "."`` (the default)
reads ``7.8``; a decimal comma without the option is one located line naming the option (not
``score_range``, which is not the cause); a ``.`` under ``decimal: ","`` and thousands separators are
refused rather than guessed.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import SourceFormatError, build_unified
from hf_unified_embed.errors import RecipeError

#: A score as a spreadsheet writes it: up to three decimals, in [0, 10].
SCORES = st.decimals(min_value=0, max_value=10, places=3, allow_nan=False, allow_infinity=False)
TEXTS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Z")), min_size=1, max_size=12)


def _written(score: object, decimal: str) -> str:
    text = format(score, "f")
    return text.replace(".", ",") if decimal == "," else text


def _source(path: Path, **options: object) -> dict:
    return {
        "name": "sts",
        "format": "pairs",
        "data_files": str(path),
        "task_type": "sts",
        "options": {"anchor_column": "s1", "positive_column": "s2", "score_column": "score", **options},
    }


def _write_delimited(
    path: Path, rows: list[tuple[str, str, str]], delimiter: str, *, bom: bool = False, crlf: bool = False
) -> None:
    with open(path, "w", encoding="utf-8-sig" if bom else "utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter=delimiter, lineterminator="\r\n" if crlf else "\n")
        writer.writerow(["s1", "s2", "score"])
        writer.writerows(rows)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.tuples(TEXTS, TEXTS, SCORES), min_size=1, max_size=8),
    decimal=st.sampled_from([",", "."]),
    delimiter=st.sampled_from([";", "\t", ",", "|"]),
    bom=st.booleans(),
    crlf=st.booleans(),
    explicit=st.booleans(),
)
def test_scores_read_the_same_with_either_decimal_mark(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[tuple[str, str, object]],
    decimal: str,
    delimiter: str,
    bom: bool,
    crlf: bool,
    explicit: bool,
) -> None:
    # The csv writer quotes a "7,8" field when the delimiter is a comma too: the option still reads it.
    path = tmp_path_factory.mktemp("decimal") / "scores.dat"
    _write_delimited(path, [(a, b, _written(s, decimal)) for a, b, s in rows], delimiter, bom=bom, crlf=crlf)
    options: dict[str, object] = {"delimiter": delimiter, "score_range": [0, 10]}
    if decimal == "," or explicit:
        options["decimal"] = decimal
    built = build_unified({"sources": [_source(path, **options)]})["sts"]
    assert built["query"] == [a.strip() for a, _, _ in rows]
    assert [scores[0] for scores in built["positive_scores"]] == pytest.approx([float(s) / 10 for *_, s in rows])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scores=st.lists(SCORES, min_size=1, max_size=6), as_text=st.booleans())
def test_json_scores_follow_the_option_on_both_paths(
    tmp_path_factory: pytest.TempPathFactory, scores: list[object], as_text: bool
) -> None:
    # JSON lines are read a block at a time with pyarrow, which parses only "."; a text score under
    # decimal "," must be read record by record, with the same values.
    path = tmp_path_factory.mktemp("json") / "scores.jsonl"
    values = [_written(s, ",") if as_text else float(s) for s in scores]
    path.write_text("".join(json.dumps({"s1": "a", "s2": "b", "score": v}) + "\n" for v in values))
    built = build_unified({"sources": [_source(path, decimal=",", score_range=[0, 10])]})["sts"]
    assert [row[0] for row in built["positive_scores"]] == pytest.approx([float(s) / 10 for s in scores])


@pytest.mark.parametrize("value", ["7,8", "-0,5", " 4,25 "])
def test_a_decimal_comma_without_the_option_names_the_option(tmp_path: Path, value: str) -> None:
    path = tmp_path / "export.csv"
    _write_delimited(path, [("a", "b", "1"), ("c", "d", value)], ";")
    with pytest.raises(SourceFormatError) as info:
        build_unified({"sources": [_source(path, delimiter=";", score_range=[-1, 10])]})
    message = str(info.value)
    assert f"{path}:3, field 'score'" in message
    assert 'set options.decimal to ","' in message and "score_range" not in message


@pytest.mark.parametrize(
    ("value", "says"),
    [("7.8", 'decimal point, but options.decimal is ","'), ("1.234,5", "thousands separator")],
)
def test_a_point_under_decimal_comma_is_refused(tmp_path: Path, value: str, says: str) -> None:
    path = tmp_path / "export.csv"
    _write_delimited(path, [("a", "b", value)], ";")
    with pytest.raises(SourceFormatError, match=rf"export.csv:2, field 'score': got '{value}'.*{says}"):
        build_unified({"sources": [_source(path, delimiter=";", decimal=",", score_range=[0, 2000])]})


def test_thousands_separators_are_not_read_with_the_default_mark(tmp_path: Path) -> None:
    path = tmp_path / "export.tsv"
    _write_delimited(path, [("a", "b", "1,234.5")], "\t")
    with pytest.raises(SourceFormatError, match=r"export.tsv:2, field 'score': got '1,234.5'"):
        build_unified({"sources": [_source(path, score_range=[0, 2000])]})


def test_a_fixed_format_says_which_format_reads_decimal_commas(tmp_path: Path) -> None:
    path = tmp_path / "sts.tsv"
    path.write_text("3,5\tone\ttwo\n")
    with pytest.raises(SourceFormatError, match=r"sts.tsv:1, field 'score'.*decimal comma.*options.decimal"):
        build_unified(
            {"sources": [{"name": "s", "format": "semeval-sts", "data_files": str(path), "task_type": "sts"}]}
        )


@pytest.mark.parametrize("bad", [";", "comma", ",,", 1])
def test_the_option_is_checked_with_the_recipe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: object
) -> None:
    path = tmp_path / "export.csv"
    _write_delimited(path, [("a", "b", "0,5")], ";")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"sources": [_source(path, delimiter=";", decimal=bad)]}))
    assert main(["build", str(recipe), "-o", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0, error
    assert f"{recipe}: sources[0]: source 'sts'" in error and "option 'decimal'" in error
    assert not (tmp_path / "out").exists()
    with pytest.raises(RecipeError):
        build_unified({"sources": [_source(path, delimiter=";", decimal=bad)]})
