"""Every value an error quotes is bounded (issue 37, item 8): ``errors.shown``, and one line on the command line.

Before: a build recipe whose ``license:`` was a YAML list of 4.8 million aliased elements was refused with
one error line of 25 MB (the list's whole ``repr``).
"""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.errors import ECHO_LIMIT, shown


def test_a_short_value_reads_as_its_repr_and_a_long_one_is_cut_and_counted() -> None:
    for value in ("text", 3, 2.5, None, [1, "a"], {"k": [1, 2]}, ("x",)):
        assert shown(value) == repr(value)
    long = "é" * 10_000
    assert shown(long) == repr("é" * ECHO_LIMIT) + "… (10,000 characters)"


@settings(max_examples=60, deadline=None)
@given(
    value=st.recursive(
        st.one_of(st.text(max_size=300), st.integers(), st.floats(allow_nan=True), st.none(), st.booleans()),
        lambda children: (
            st.lists(children, max_size=40) | st.dictionaries(st.text(max_size=20), children, max_size=20)
        ),
        max_leaves=400,
    )
)
def test_any_value_is_quoted_in_a_bounded_number_of_characters(value: object) -> None:
    text = shown(value)
    assert len(text) <= ECHO_LIMIT + 40
    if len(repr(value)) <= ECHO_LIMIT and not isinstance(value, (list, dict)):
        assert text == repr(value)


def _aliased_list_yaml(levels: int) -> str:
    """A YAML document whose ``license`` is a list of ``12 ** (levels + 1)`` elements built from aliases."""
    lines = ["anchors:", "  l0: &l0 [x, x, x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, levels + 1):
        lines.append(f"  l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 12)}]")
    lines += [
        "sources:",
        "  - name: t",
        "    format: unified",
        "    data_files: rows.jsonl",
        "    task_type: sts",
        f"    license: *l{levels}",
    ]
    return "\n".join(lines) + "\n"


def test_a_huge_aliased_license_list_is_refused_with_one_short_line(tmp_path: Path) -> None:
    (tmp_path / "build.yaml").write_text(_aliased_list_yaml(5))  # 12 ** 6 ≈ 3 million elements
    (tmp_path / "rows.jsonl").write_text('{"query": "a", "positives": ["b"], "positive_scores": [0.5]}\n')
    err = io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["build", str(tmp_path / "build.yaml"), "-o", str(tmp_path / "out")])
    lines = err.getvalue().splitlines()
    assert code == 2 and len(lines) == 1 and len(lines[0]) < 600, (code, len(err.getvalue()))
    assert "field 'license'" in lines[0] and "items)" in lines[0]
    assert time.monotonic() - start < 30
    assert not (tmp_path / "out").exists()


def _large(kind: str, size: int, char: str) -> object:
    """A large value a user could paste: a long text in a list, a long list, a wide mapping."""
    if kind == "text":
        return [char * size]
    if kind == "list":
        return list(range(size))
    return {f"{char}{index}": index for index in range(size // 10)}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    field=st.sampled_from(["license", "task_type", "format", "split", "query_instruction"]),
    value=st.builds(
        _large,
        st.sampled_from(["text", "list", "mapping"]),
        st.integers(2_000, 20_000),
        st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
    ),
)
def test_any_large_value_in_a_recipe_field_gives_one_bounded_line(tmp_path: Path, field: str, value: object) -> None:
    import yaml

    source = {"name": "t", "format": "unified", "data_files": "rows.jsonl", "task_type": "sts", field: value}
    (tmp_path / "build.yaml").write_text(yaml.safe_dump({"sources": [source]}))
    (tmp_path / "rows.jsonl").write_text('{"query": "a", "positives": ["b"], "positive_scores": [0.5]}\n')
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["build", str(tmp_path / "build.yaml"), "-o", str(tmp_path / "out")])
    lines = err.getvalue().splitlines()
    assert code == 2 and len(lines) == 1, err.getvalue()[:2000]
    assert len(lines[0]) < 1_200, lines[0][:2000]


def test_a_ten_megabyte_source_note_is_cut_in_the_card(tmp_path: Path) -> None:
    """Before: a 10 MB ``source:`` became a 31 MB dataset card (front matter, table and notes)."""
    import yaml
    from huggingface_hub import DatasetCard

    source = {
        "name": "t",
        "format": "unified",
        "data_files": "rows.jsonl",
        "task_type": "sts",
        "source": "s" * 10_000_000,
        "license": "my license, " * 20_000,
    }
    (tmp_path / "build.yaml").write_text(yaml.safe_dump({"sources": [source]}))
    (tmp_path / "rows.jsonl").write_text('{"query": "a", "positives": ["b"], "positive_scores": [0.5]}\n')
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        assert main(["build", str(tmp_path / "build.yaml"), "-o", str(tmp_path / "out")]) == 0
    card_file = tmp_path / "out" / "README.md"
    assert card_file.stat().st_size < 20_000
    notes = DatasetCard.load(card_file).data.to_dict()["source_notes"]["t"]
    assert notes["source"].endswith("… (10,000,000 characters; the rest is left out of the card)")
    assert len(notes["license"]) < 600
