"""The data side's error model: the naming rule, located input errors, `validate` and staged outputs.

Every case of issue 16 that concerns data: task names read from data or recipes cannot place a file
outside the output folder; bad bytes, corrupt Parquet, empty or fully filtered sources and failing
third-party adapters are located errors (exit code 2); `validate` never crashes.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from _curriculum_helpers import tiny_tasks
from datasets import Dataset, DatasetDict

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import SourceFormatError, build_unified, load_unified, register_source_format, save_unified
from hf_unified_embed.errors import (
    InputError,
    InputNotFoundError,
    NameRuleError,
    OutputError,
    UnifiedSchemaError,
)
from hf_unified_embed.schema import UNIFIED_FEATURES
from hf_unified_embed.utils.naming import task_name_problem

# Path escapes, hidden and dot names, the reserved config name, and names no Windows folder can have.
BAD_NAMES = ["../../../escaped", "../../x", "..", ".", ".hidden", "..x", "a/b", "all", "a.", "CON", "nul.txt", "Lpt1"]


def snapshot(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def write_recipe(folder: Path, name: str, fmt: str, data_file: str, **extra) -> Path:
    recipe = folder / "recipe.yaml"
    source = {"name": name, "format": fmt, "data_files": data_file, "task_type": "retrieval", **extra}
    recipe.write_text(yaml.safe_dump({"sources": [source]}))
    return recipe


@pytest.fixture
def nested(tmp_path: Path) -> Path:
    """Inputs three folders deep, so a `../../../` task name would land inside tmp_path if it escaped."""
    folder = tmp_path / "a" / "b" / "c"
    folder.mkdir(parents=True)
    return folder


# --- one naming rule ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_NAMES)
@pytest.mark.parametrize("fmt", ["unified", "medi"])
def test_bad_task_name_in_data_writes_nothing_anywhere(tmp_path: Path, nested: Path, capsys, fmt: str, bad: str):
    data = nested / "rows.jsonl"
    good = {"task": "fine", "query": "q0", "positives": ["p0"]}
    if fmt == "unified":
        records = [good, {"task": bad, "query": "q1", "positives": ["p1"]}]
    else:
        records = [{"query": ["", "q"], "pos": ["", "p"], "task_name": t} for t in ("fine", bad)]
    data.write_text("".join(json.dumps(record) + "\n" for record in records))
    recipe = write_recipe(nested, "src", fmt, "rows.jsonl")
    before = snapshot(tmp_path)
    assert main(["build", str(recipe), "-o", str(nested / "out")]) == 2
    err = capsys.readouterr().err
    assert f"rows.jsonl:2', task {bad!r}, row 1, field 'task'" in err, err
    assert snapshot(tmp_path) == before  # no output, no staging, nothing outside

    with pytest.raises(UnifiedSchemaError) as info:
        build_unified({"sources": [{"name": "src", "format": fmt, "data_files": str(data), "task_type": "retrieval"}]})
    assert info.value.field == "task" and info.value.row == 1
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_bad_recipe_source_name_names_recipe_index_and_field(nested: Path, capsys, bad: str):
    (nested / "rows.jsonl").write_text('{"anchor": "a", "positive": "b"}\n')
    recipe = write_recipe(nested, bad, "pairs", "rows.jsonl")
    assert main(["build", str(recipe), "-o", str(nested / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{recipe}: sources[0]: source {bad!r}, field 'name'" in err
    assert sorted(p.name for p in nested.iterdir()) == ["recipe.yaml", "rows.jsonl"]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        (".", "starting with a letter or digit"),
        (".hidden", "starting with a letter or digit"),
        ("..x", "starting with a letter or digit"),
        ("a..b", "without '..'"),
        ("a.", "not ending in '.'"),
        ("-a", "starting with a letter or digit"),
        ("a b", "ASCII letters"),
        ("x" * 97, "1-96"),
        ("CON", "Windows reserves it for a device"),
        ("con.txt", "Windows reserves it for a device"),
        ("COM1.tar.gz", "Windows reserves it for a device"),
        ("lpt9", "Windows reserves it for a device"),
        ("all", "reserved for the config that holds every task"),
        (3, "must be a string"),
    ],
)
def test_task_name_rule_pins_each_check(name, reason: str):
    problem = task_name_problem(name)
    assert problem is not None and reason in problem, problem


@pytest.mark.parametrize("name", ["stsb", "a.b", "v1.0", "x" * 96, "CONx", "console", "com10", "NULL", "a-b_c.d"])
def test_task_name_rule_accepts(name: str):
    assert task_name_problem(name) is None


def test_names_that_differ_only_in_case_are_refused(tmp_path: Path, capsys):
    """``stsb`` and ``STSB`` would be one folder on Windows and macOS: refused in a recipe and in save_unified."""
    source = {"format": "pairs", "data_files": "rows.jsonl", "task_type": "retrieval"}
    (tmp_path / "rows.jsonl").write_text('{"anchor": "a", "positive": "b"}\n')
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"sources": [{"name": "stsb", **source}, {"name": "STSB", **source}]}))
    assert main(["build", str(recipe), "-o", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {recipe}: task names 'stsb' and 'STSB' differ only in case: they would be one folder on "
        "Windows and macOS; rename one"
    )
    splits = [{"name": "a", "split": "train", **source}, {"name": "b", "split": "Train", **source}]
    recipe.write_text(yaml.safe_dump({"sources": splits}))
    assert main(["build", str(recipe), "-o", str(tmp_path / "out")]) == 2
    assert "split names 'train' and 'Train' differ only in case" in capsys.readouterr().err
    rows = tiny_tasks()["beta"]
    with pytest.raises(NameRuleError, match="task names 'beta' and 'BETA' differ only in case"):
        save_unified(DatasetDict({"beta": rows, "BETA": rows}), tmp_path / "saved")
    with pytest.raises(NameRuleError, match="split names 'train' and 'TRAIN' differ only in case"):
        save_unified({"train": DatasetDict({"beta": rows}), "TRAIN": DatasetDict({"beta": rows})}, tmp_path / "saved")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recipe.yaml", "rows.jsonl"]


@pytest.mark.parametrize("split", ["../x", "train-extra", "a/b", ""])
def test_bad_split_name_is_a_name_rule_error(tmp_path: Path, split: str):
    (tmp_path / "rows.jsonl").write_text('{"anchor": "a", "positive": "b"}\n')
    source = {"name": "s", "format": "pairs", "data_files": str(tmp_path / "rows.jsonl"), "split": split}
    with pytest.raises(NameRuleError, match=r"sources\[0\]: source 's', field 'split'"):
        build_unified({"sources": [source]})


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_save_unified_checks_every_name_before_writing(tmp_path: Path, bad: str):
    rows = tiny_tasks()["beta"]
    before = snapshot(tmp_path)
    with pytest.raises(NameRuleError, match="task"):
        save_unified(DatasetDict({"beta": rows, bad: rows}), tmp_path / "x" / "y" / "out")
    with pytest.raises(NameRuleError, match="split"):
        save_unified({"../up": DatasetDict({"beta": rows})}, tmp_path / "x" / "y" / "out")
    assert snapshot(tmp_path) == before


def test_save_unified_refuses_rows_of_another_task(tmp_path: Path):
    with pytest.raises(UnifiedSchemaError, match="belongs to task 'beta' but is stored under 'other'"):
        save_unified(DatasetDict({"other": tiny_tasks()["beta"]}), tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- a unified folder to break -------------------------------------------------------------------


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_unified(tiny_tasks(), tmp_path_factory.mktemp("unified") / "data")


@pytest.fixture
def copy(unified_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(unified_dir, target)
    return target


def rewrite_shard(folder: Path, task: str, change) -> Path:
    shard = folder / "data" / task / "train-00000-of-00001.parquet"
    pq.write_table(change(pq.read_table(shard)), shard)
    return shard


def validate_error(folder: Path, capsys) -> str:
    assert main(["validate", str(folder)]) == 2
    return capsys.readouterr().err


def test_card_with_escaping_config_name_or_path_is_refused(copy: Path, capsys):
    readme = copy / "README.md"
    text = readme.read_text()
    readme.write_text(text.replace("config_name: beta", "config_name: ../beta", 1))
    err = validate_error(copy, capsys)
    assert f"{readme}: configs[1] ('../beta'), field 'config_name'" in err
    with pytest.raises(InputError, match="config_name"):
        load_unified(copy)
    readme.write_text(text.replace("path: data/beta/train-*.parquet", "path: ../../etc/*.parquet", 1))
    assert "field 'data_files.path': got '../../etc/*.parquet'" in validate_error(copy, capsys)


def test_validate_wrong_column_type_names_file_column_and_both_types(copy: Path, capsys):
    shard = rewrite_shard(
        copy, "alpha", lambda t: t.set_column(t.schema.get_field_index("query"), "query", pa.array(range(len(t))))
    )
    err = validate_error(copy, capsys)
    assert f"file '{shard}', task 'alpha', field 'query': column has type int64, expected string" in err


def test_validate_extra_and_missing_columns(copy: Path, capsys):
    shard = rewrite_shard(copy, "beta", lambda t: t.append_column("label", pa.array([1] * len(t))))
    assert f"file '{shard}', task 'beta', field 'label': unexpected columns ['label']" in validate_error(copy, capsys)
    rewrite_shard(copy, "beta", lambda t: t.drop_columns(["label", "negatives"]))
    assert "field 'negatives': missing columns ['negatives']" in validate_error(copy, capsys)


def test_validate_truncated_parquet_names_the_file(copy: Path, capsys):
    shard = copy / "data" / "gamma" / "train-00000-of-00001.parquet"
    shard.write_bytes(shard.read_bytes()[:-40])
    err = validate_error(copy, capsys)
    assert f"{shard}: not a readable Parquet file" in err and "expected a complete Parquet file" in err
    with pytest.raises(SourceFormatError, match="not a readable Parquet file"):
        load_unified(copy)


def test_validate_row_of_another_task(copy: Path, capsys):
    tasks = pa.array(["beta"] * 7)
    rewrite_shard(copy, "alpha", lambda t: t.set_column(t.schema.get_field_index("task"), "task", tasks))
    assert "task 'beta', row 0, field 'task': the row belongs to task 'beta'" in validate_error(copy, capsys)


def test_validate_missing_task_folder_and_missing_shard(copy: Path, capsys):
    shutil.rmtree(copy / "data" / "gamma")
    err = validate_error(copy, capsys)
    assert "declares task 'gamma' split 'train', but" in err and "gamma/train-*.parquet does not exist" in err
    with pytest.raises(InputError, match="declares task 'gamma'"):
        load_unified(copy)


@pytest.mark.parametrize(
    ("stray", "kind"),
    [
        ("train-00000-of-00001.parquet", "stray file in the dataset root"),
        ("extra/", "stray folder in the dataset root"),
        ("data/delta/", "not a task declared in README.md"),
        ("data/alpha/train-extra-00000-of-00001.parquet", "not a shard of a declared split"),
        ("data/alpha/test-00000-of-00001.parquet", "not a shard of a declared split"),
        ("data/alpha/notes.txt", "not a shard of a declared split"),
        ("data/stray.parquet", "not a task declared in README.md"),
    ],
)
def test_validate_rejects_stray_entries(copy: Path, capsys, stray: str, kind: str):
    path = copy / stray
    if stray.endswith("/"):
        path.mkdir()
    else:
        shutil.copy(copy / "data" / "alpha" / "train-00000-of-00001.parquet", path)
    err = validate_error(copy, capsys)
    assert f"{path.as_posix().rstrip('/')}: {kind}" in err


def test_validate_allows_card_plots_plans_and_git_files(copy: Path, capsys):
    for name in ("curriculum_plan.json", "task_similarity.png", "NOTES.md", ".gitattributes"):
        (copy / name).write_text("x")
    assert main(["validate", str(copy)]) == 0
    assert "3 task(s) valid" in capsys.readouterr().out


def test_missing_folders_are_never_hub_lookups(tmp_path: Path, monkeypatch, capsys):
    from huggingface_hub import DatasetCard

    def no_hub(*args, **kwargs):
        raise AssertionError(f"Hub lookup for {args}")

    monkeypatch.setattr(DatasetCard, "load", no_hub)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    for name in ("./nope", str(tmp_path / "nope"), "~/surely-not-here-hfue", "outputs/data", "a/b/c"):
        with pytest.raises(InputNotFoundError, match="does not exist"):
            load_unified(name)
    assert main(["validate", "outputs/data"]) == 2
    assert "dataset folder outputs/data does not exist" in capsys.readouterr().err


def test_load_unified_unknown_task_and_split_name_the_folder(unified_dir: Path):
    with pytest.raises(
        InputError, match=r"unknown task\(s\) \['zeta'\]; the card declares \['alpha', 'beta', 'gamma'\]"
    ):
        load_unified(unified_dir, tasks=["zeta"])
    with pytest.raises(InputError, match=r"have no split 'test' \(they have \['train'\]\)"):
        load_unified(unified_dir, tasks=["alpha"], split="test")


# --- located input errors -----------------------------------------------------------------------


def stsb_lines(n: int) -> list[bytes]:
    return [f"g\tf\t2012\t{i}\t2.5\tfirst {i}.\tsecond {i}.\n".encode() for i in range(n)]


def stsb_recipe(path: Path) -> dict:
    return {"sources": [{"name": "s", "format": "stsb", "data_files": str(path), "task_type": "sts"}]}


@pytest.mark.parametrize("chunk", [None, 7])
def test_non_utf8_byte_names_file_line_offset_and_codec(tmp_path: Path, monkeypatch, chunk):
    lines = stsb_lines(5)
    lines[3] = lines[3].replace(b"first", b"fi\xe9rst")
    data = tmp_path / "s.tsv"
    data.write_bytes(b"".join(lines))
    offset = sum(len(line) for line in lines[:3]) + lines[3].index(b"\xe9")
    if chunk:  # the re-scan must find the byte across its read chunks too
        import hf_unified_embed.utils.text_files as text_files

        original = text_files.first_undecodable_byte
        monkeypatch.setattr(
            text_files, "first_undecodable_byte", lambda p, e="utf-8": original(p, e, chunk_size=chunk)
        )
    with pytest.raises(SourceFormatError) as info:
        build_unified(stsb_recipe(data))
    message = str(info.value)
    assert f"{data}:4: byte 0xe9 at byte offset {offset} cannot be decoded as utf-8" in message
    assert info.value.line == 4 and isinstance(info.value.__cause__, UnicodeDecodeError)


def test_truncated_utf8_sequence_at_end_of_file(tmp_path: Path):
    data = tmp_path / "p.jsonl"
    content = b'{"anchor": "a", "positive": "b"}\n{"anchor": "\xc3'
    data.write_bytes(content)
    offset = content.index(b"\xc3")
    with pytest.raises(SourceFormatError, match=rf"p.jsonl:2: byte 0xc3 at byte offset {offset} cannot be decoded"):
        build_unified(
            {"sources": [{"name": "p", "format": "pairs", "data_files": str(data), "task_type": "retrieval"}]}
        )


def test_corrupt_parquet_input_names_the_file(tmp_path: Path, capsys):
    data = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"anchor": ["a"] * 50, "positive": ["b"] * 50}), data)
    data.write_bytes(data.read_bytes()[:-30])
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"sources": [{"name": "p", "format": "pairs", "data_files": "pairs.parquet"}]}))
    assert main(["build", str(recipe), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"error: {data}: cannot be read as Parquet after 0 rows" in err and "DatasetGenerationError" not in err


def test_empty_file_and_all_rows_skipped_name_source_files_and_reasons(tmp_path: Path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(
        InputError, match=rf"source 'p' \(format 'pairs', split 'train'; files {empty}\): the files hold no rows"
    ):
        build_unified({"sources": [{"name": "p", "format": "pairs", "data_files": str(empty)}]})
    medi = tmp_path / "medi.jsonl"
    medi.write_text('{"query": ["", "q"], "pos": ["", "p"], "task_name": "t1"}\n' * 3)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "sources": [
                    {
                        "name": "m",
                        "format": "medi",
                        "data_files": "medi.jsonl",
                        "task_type": "retrieval",
                        "options": {"tasks": ["t2"]},
                    }
                ]
            }
        )
    )
    assert main(["build", str(recipe), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert (
        f"source 'm' (format 'medi', split 'train'; files {medi}): every row was skipped (3: 3 'task not selected')"
        in err
    )
    assert "corresponds to no data" not in err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"format": "tsv-pairs"},
            "field 'format': unknown source format 'tsv-pairs'; expected one of ['answer-selection',",
        ),
        (
            {"options": {"colour": 1}},
            "field 'options': unknown option(s) ['colour'] for format 'pairs'; its options are [",
        ),
        (
            {"format": "stsb", "options": {"colour": 1}},
            "field 'options': unknown option(s) ['colour'] for format 'stsb'; it takes none",
        ),
    ],
)
def test_unknown_format_or_option_names_recipe_and_source_before_staging(
    tmp_path: Path, capsys, monkeypatch, change: dict, message: str
):
    from hf_unified_embed.utils.outputs import StagedOutput

    def staging_started(self):
        raise AssertionError("the output was staged before the recipe was checked")

    monkeypatch.setattr(StagedOutput, "__enter__", staging_started)
    (tmp_path / "rows.jsonl").write_text('{"anchor": "a", "positive": "b"}\n')
    recipe = write_recipe(tmp_path, "src", "pairs", "rows.jsonl", **change)
    assert main(["build", str(recipe), "-o", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {recipe}: sources[0]: source 'src', {message}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recipe.yaml", "rows.jsonl"]


def test_failing_third_party_adapter_is_wrapped_with_source_and_files(tmp_path: Path):
    @register_source_format("test-broken")
    def read_broken(files, context):
        """Fails like careless code does."""
        yield f"{files[0]}:1", {"query": "q", "positives": ["p"]}
        raise KeyError("oops")

    @register_source_format("test-latin1")
    def read_latin1(files, context):
        """Reads with its own open(), so only the builder can locate the bad byte."""
        for path in files:
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                yield f"{path}:{number}", {"query": line, "positives": [line]}

    data = tmp_path / "x.txt"
    data.write_bytes(b"fine\nna\xefve\n")
    source = {"name": "x", "data_files": str(data), "task_type": "retrieval"}
    with pytest.raises(
        SourceFormatError, match=rf"source 'x': the 'test-broken' reader failed on {data}: KeyError"
    ) as info:
        build_unified({"sources": [{**source, "format": "test-broken"}]})
    assert isinstance(info.value.__cause__, KeyError)
    with pytest.raises(SourceFormatError, match=rf"{data}:2: byte 0xef at byte offset 7"):
        build_unified({"sources": [{**source, "format": "test-latin1"}]})


def test_unwritable_output_fails_before_reading_any_input(tmp_path: Path, capsys):
    # The input is broken too: the output error must come first, before a row is read.
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    recipe = write_recipe(tmp_path, "p", "pairs", "bad.jsonl")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["build", str(recipe), "-o", str(blocker / "out")]) == 2
    assert f"error: cannot write the output {blocker / 'out'}" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
def test_read_only_output_parent_fails_before_the_build(tmp_path: Path, capsys):
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    recipe = write_recipe(tmp_path, "p", "pairs", "bad.jsonl")
    parent = tmp_path / "locked"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        assert main(["build", str(recipe), "-o", str(parent / "out")]) == 2
    finally:
        parent.chmod(0o700)
    assert "cannot write the output" in capsys.readouterr().err


def test_input_inside_the_output_is_refused(tmp_path: Path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "rows.jsonl").write_text('{"anchor": "a", "positive": "b"}\n')
    recipe = write_recipe(tmp_path, "p", "pairs", "out/rows.jsonl")
    assert main(["build", str(recipe), "-o", str(out), "--overwrite"]) == 2
    assert "overlaps the input" in capsys.readouterr().err
    assert (out / "rows.jsonl").is_file()


def test_output_exists_error_is_still_a_file_exists_error(unified_dir: Path):
    with pytest.raises(FileExistsError):
        save_unified(tiny_tasks(), unified_dir)
    assert issubclass(OutputError, OSError)


def test_unified_rows_with_wrong_types_are_located(tmp_path: Path):
    data = tmp_path / "u.jsonl"
    rows = [
        {"query": "q", "positives": "one text, not a list"},
        {"query": "q", "positives": ["p"], "positive_scores": ["0.5"]},
    ]
    for number, (record, field) in enumerate(zip(rows, ["positives", "positive_scores"])):
        data.write_text(json.dumps(record) + "\n")
        with pytest.raises(UnifiedSchemaError) as info:
            build_unified(
                {"sources": [{"name": "u", "format": "unified", "data_files": str(data), "task_type": "retrieval"}]}
            )
        assert info.value.field == field, number


def test_saved_dataset_round_trips_through_validate(tmp_path: Path, capsys):
    data = Dataset.from_list(
        [
            {
                "task": "one",
                "task_type": "sts",
                "query_instruction": "",
                "document_instruction": "",
                "query": "a",
                "positives": ["b"],
                "negatives": [],
                "positive_scores": [0.5],
                "negative_scores": [],
            }
        ],
        features=UNIFIED_FEATURES,
    )
    out = save_unified({"train": DatasetDict({"one": data}), "test.v2": DatasetDict({"one": data})}, tmp_path / "o")
    assert main(["validate", str(out)]) == 0
    assert sorted(load_unified(out, split="test.v2")) == ["one"]


# --- `sample` prints commands that work when pasted ------------------------------------------------


@pytest.mark.parametrize("folder", ["my sample", "~", "it's here", "-dash"])
def test_sample_prints_commands_quoted_for_the_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], folder: str
) -> None:
    import shlex

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # a "~" that the shell or a command expanded lands here
    assert main(["sample", "--", folder]) == 0
    commands = [line.strip() for line in capsys.readouterr().out.splitlines() if line.startswith("  hf-unified-embed")]
    assert len(commands) == 4
    for command in commands:
        words = shlex.split(command, comments=True)  # what a POSIX shell passes, quotes removed
        paths = [word for word in words[2:] if "/" in word and not word.startswith("YOUR_NAME")]
        assert paths, command
        for word in paths:
            # The path names the written folder, read from the current one, also after `~` expansion.
            resolved = Path(word).expanduser().resolve()
            assert resolved.is_relative_to((tmp_path / folder).resolve()), (command, word)
    build = shlex.split(commands[0], comments=True)
    assert (tmp_path / build[2]).is_file()
    if folder == "my sample":  # the printed build runs as printed
        assert main(build[1:]) == 0, capsys.readouterr().err
        assert (tmp_path / folder / "outputs" / "data" / "README.md").is_file()
