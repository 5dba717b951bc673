"""Values at the edges end in one line: a tiny shard size, a recipe nested thousands deep, a row cap of 26
digits, output names at and past the file system's limit, an output where nothing can be written, and an
instruction that leaves the curriculum's teacher no room for the text."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from _curriculum_helpers import unified_rows
from datasets import Dataset, DatasetDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import save_unified
from hf_unified_embed.data.shard_writer import shard_slices
from hf_unified_embed.errors import OutputError
from hf_unified_embed.schema import UNIFIED_FEATURES
from hf_unified_embed.utils.naming import BESIDE_NAME_BYTES, beside_name
from hf_unified_embed.utils.output_lock import lock_path
from hf_unified_embed.utils.outputs import StagedOutput, check_output

ROWS = [
    {"query": "A man plays a guitar.", "positives": ["A man is playing guitar."], "positive_scores": [0.9]},
    {"query": "A dog runs.", "positives": ["A cat sleeps."], "positive_scores": [0.1]},
    {"query": "Rain falls.", "positives": ["It is raining."], "positive_scores": [0.8]},
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    write_recipe(tmp_path)
    return tmp_path


def write_recipe(folder: Path, **source: object) -> Path:
    entry = {"name": "sts", "format": "unified", "data_files": "rows.jsonl", "task_type": "sts", **source}
    (folder / "build.yaml").write_text(yaml.safe_dump({"sources": [entry]}))
    return folder / "build.yaml"


def run(folder: Path, argv: list[str]) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.chdir(folder), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse
            code = int(exit_.code or 0)
    return code, err.getvalue().splitlines()


def one_error(code: int, lines: list[str]) -> str:
    assert code == 2, lines
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in "\n".join(lines), lines
    return errors[0]


# --- shard size -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", ["1", "1KB", "999999"])
def test_a_shard_size_below_the_minimum_is_refused_in_one_line(project: Path, size: str):
    code, lines = run(project, ["build", "build.yaml", "-o", "out", "--max-shard-size", size])
    assert one_error(code, lines).endswith(f"argument --max-shard-size: expected a size of at least 1MB, got {size!r}")
    assert not (project / "out").exists()


def test_shards_never_outnumber_the_rows():
    """A row larger than the shard size is a shard of its own (datasets' ``shard`` refused more shards than rows)."""
    dataset = Dataset.from_list([{"text": "x" * 500} for _ in range(5)])
    shards = shard_slices(dataset, max_shard_bytes=1)
    assert [len(shard) for shard in shards] == [1] * 5


# --- recipes ----------------------------------------------------------------------------------------------------


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(depth=st.integers(101, 5000), flow=st.booleans())
def test_a_recipe_nested_too_deep_is_one_line_naming_the_file(project: Path, depth: int, flow: bool):
    if flow:
        text = "sources: " + "[" * depth + "]" * depth + "\n"
    else:
        text = "sources:\n" + "".join("  " * level + f"- k{level}:\n" for level in range(depth))
    (project / "deep.yaml").write_text(text)
    code, lines = run(project, ["build", "deep.yaml", "-o", "out"])
    line = one_error(code, lines)
    assert line.startswith("error: deep.yaml:") and "nested deeper than 100 levels" in line, line


def test_a_recipe_nested_100_deep_is_read(project: Path):
    from hf_unified_embed.utils.yaml_files import read_yaml_mapping

    (project / "deep.yaml").write_text("a: " + "[" * 99 + "]" * 99 + "\n")
    assert read_yaml_mapping(project / "deep.yaml", ValueError)["a"] == _nested(98)


def _nested(depth: int) -> list:
    return [] if depth == 0 else [_nested(depth - 1)]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(max_rows=st.one_of(st.integers(sys.maxsize + 1, 10**40), st.integers(-(10**30), 0)))
def test_max_rows_out_of_a_machine_word_is_one_line(project: Path, max_rows: int):
    write_recipe(project, max_rows=max_rows)
    line = one_error(*run(project, ["build", "build.yaml", "-o", "out"]))
    assert "field 'max_rows'" in line and "expected a positive integer up to" in line, line


def test_max_rows_up_to_a_machine_word_builds(project: Path):
    write_recipe(project, max_rows=sys.maxsize)
    assert run(project, ["build", "build.yaml", "-o", "out"])[0] == 0


# --- output names -----------------------------------------------------------------------------------------------

#: One to four bytes in UTF-8.
NAME_CHARACTERS = st.sampled_from(["a", "Z", "7", "_", "-", ".", "é", "中", "😀"])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    # Short names, and names about the file system's limit (255 bytes), where the staging folder's and the
    # lock's names, longer than the output's, overflowed.
    name=st.one_of(
        st.lists(NAME_CHARACTERS, min_size=1, max_size=40), st.lists(NAME_CHARACTERS, min_size=60, max_size=300)
    ).map("".join),
    kind=st.sampled_from(["folder", "file"]),
)
def test_every_name_the_file_system_allows_is_an_output_and_no_other(tmp_path: Path, name: str, kind: str):
    if name.startswith(".") or name.strip(".") == "":
        name = f"a{name}"
    folder = Path(tempfile.mkdtemp(dir=tmp_path))  # one per example
    limit = os.pathconf(folder, "PC_NAME_MAX")
    target = folder / name
    if len(name.encode()) > limit:
        with pytest.raises(OutputError, match=f"allows at most {limit} bytes in a name"):
            check_output(target, overwrite=False, kind=kind)  # type: ignore[arg-type]
        return
    with StagedOutput(target, kind=kind) as stage:  # type: ignore[arg-type]
        assert len(stage.root.name.encode()) <= limit
        assert len(lock_path(target).name.encode()) <= limit
        if kind == "folder":
            (stage.path / "a.txt").write_text("a")
        else:
            stage.path.write_text("a")
    assert target.exists()
    assert sorted(path.name for path in folder.iterdir()) == [name], "nothing may stay beside the output"


def test_names_beside_an_output_are_its_own(tmp_path: Path):
    long_a, long_b = "a" * 250, "a" * 249 + "b"
    assert beside_name("short") == "short"
    assert beside_name(long_a) != beside_name(long_b)
    assert len(beside_name(long_a).encode()) <= BESIDE_NAME_BYTES


def test_an_output_name_over_the_limit_is_one_line_before_any_work(project: Path):
    name = "x" * 300
    line = one_error(*run(project, ["build", "build.yaml", "-o", f"deeper/{name}"]))
    assert "bytes in a name" in line, line
    assert not (project / "deeper").exists()


def test_a_build_into_a_name_of_250_characters_works(project: Path):
    name = "b" * 250
    assert run(project, ["build", "build.yaml", "-o", name])[0] == 0
    assert (project / name / "README.md").is_file()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_output_where_nothing_can_be_written_says_so(project: Path):
    line = one_error(*run(project, ["build", "build.yaml", "-o", "/proc/x"]))
    assert line.startswith("error: cannot write the output /proc/x:"), line
    assert "another command" not in line


# --- the curriculum's instructions ------------------------------------------------------------------------------


def test_curriculum_refuses_an_instruction_that_leaves_no_room(tmp_path: Path, tiny_model_path: str):
    long_instruction = "Represent this question for retrieving the passages that answer it well: " * 8
    tasks = DatasetDict(
        {
            "alpha": Dataset.from_list(unified_rows("alpha", 6, long_instruction), features=UNIFIED_FEATURES),
            "beta": Dataset.from_list(unified_rows("beta", 5), features=UNIFIED_FEATURES),
        }
    )
    data = save_unified(tasks, tmp_path / "data")
    argv = ["curriculum", str(data), "--teacher", tiny_model_path, "-o", "out", "--iterations", "50"]
    line = one_error(*run(tmp_path, argv))
    assert "task 'alpha', field 'query_instruction'" in line and "max_seq_length" in line, line
    assert not (tmp_path / "out").exists()


def test_train_refuses_an_output_whose_checkpoint_folder_name_cannot_exist(tmp_path: Path, tiny_model_path: str):
    from _output_project import project_template

    with project_template(tmp_path, tiny_model_path) as project:
        name = "t" * 250  # a legal name; <name>-checkpoints is 262 bytes
        line = one_error(*run(project, ["train", "recipe.yaml", "-o", name]))
        assert "-checkpoints' is 262 bytes long" in line and "at most 255 bytes in a name" in line, line
        assert not (project / name).exists()
