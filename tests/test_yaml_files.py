"""Every YAML config (build recipe, training recipe, suite, merge config) is read by one function."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hf_unified_embed.data import load_build_recipe
from hf_unified_embed.errors import RecipeError, SuiteError
from hf_unified_embed.evaluation import EvaluationSuite
from hf_unified_embed.merge import MergeConfig, MergeError
from hf_unified_embed.recipe import load_train_recipe
from hf_unified_embed.utils.yaml_files import (
    DuplicateKeyError,
    load_yaml_text,
    read_yaml_mapping,
    relative_to_file,
    yaml_folder,
)

#: The one-line message of ``a: [unclosed``: file, line and column, what PyYAML expected and from where.
UNCLOSED = r"bad\.yaml:2:1: not valid YAML: expected ',' or '\]', but got '<stream end>' \(while parsing a flow sequence from line 1\)"


class ConfigError(ValueError):
    pass


def test_read_yaml_mapping(tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text("a: 1\n")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "bad.yaml").write_text("a: [unclosed\n")
    (tmp_path / "list.yaml").write_text("- 1\n")
    assert read_yaml_mapping(tmp_path / "ok.yaml", ConfigError) == {"a": 1}
    assert read_yaml_mapping(tmp_path / "empty.yaml", ConfigError) == {}
    for name, message in [
        ("missing.yaml", r"missing\.yaml: file does not exist"),
        ("bad.yaml", UNCLOSED),
        ("list.yaml", r"list\.yaml: expected a mapping at the top level, got list"),
    ]:
        with pytest.raises(ConfigError, match=message):
            read_yaml_mapping(tmp_path / name, ConfigError)


def test_each_config_reports_its_own_error_type(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [unclosed\n")
    with pytest.raises(ValueError, match=UNCLOSED):
        load_build_recipe(bad)
    with pytest.raises(ValueError, match=UNCLOSED):
        EvaluationSuite.from_yaml(bad)
    with pytest.raises(MergeError, match=UNCLOSED):
        MergeConfig.from_yaml(bad)
    assert issubclass(RecipeError, ValueError)


BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"  # a PNG header: 0x89 starts no UTF-8 character


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    path = tmp_path / "binary.yaml"
    path.write_bytes(BINARY)
    return path


def _only_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_binary_file_is_a_located_error_in_every_command(
    binary: Path, tmp_path: Path, tiny_model_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Recipe, build recipe, merge config and suite: exit 2 and one line naming the file and the byte offset."""
    from hf_unified_embed.cli.main import main

    expected = (
        f"error: {binary}:1: byte 0x89 at byte offset 0 is not UTF-8 (a YAML file must be UTF-8 text; "
        "is it a binary file?)"
    )
    for command in (
        ["train", str(binary)],
        ["train", str(binary), "--check"],
        ["build", str(binary), "-o", str(tmp_path / "out")],
        ["merge", str(binary)],
        ["evaluate", tiny_model_path, str(binary)],
    ):
        assert main(command) == 2, command
        assert _only_error_line(capsys) == expected, command
    assert sorted(p.name for p in tmp_path.iterdir()) == ["binary.yaml"]


def test_a_binary_suite_named_by_a_recipe_names_both(
    binary: Path, tmp_path: Path, tiny_model_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from hf_unified_embed.cli.main import main

    (tmp_path / "data").mkdir()
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "base_model": tiny_model_path,
                "data": str(tmp_path / "data"),
                "losses": {"sts": "CoDiEmbSTSLoss"},
                "evaluation": str(binary),
                "output_dir": str(tmp_path / "out"),
            }
        )
    )
    assert main(["train", str(recipe)]) == 2
    assert _only_error_line(capsys) == (
        f"error: {recipe}: evaluation: {binary}:1: byte 0x89 at byte offset 0 is not UTF-8 (a YAML file must be "
        "UTF-8 text; is it a binary file?)"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"a: 1\nb: 2\n\xff\xfe", r"bad\.yaml:3: byte 0xff at byte offset 10 is not UTF-8"),
        (b"a: 1\nb: caf\xe9\n", r"bad\.yaml:2: byte 0xe9 at byte offset 11 is not UTF-8"),
        (b"\xff\xfea\x00:\x00 \x001\x00", r"bad\.yaml:1: byte 0xff at byte offset 0 is not UTF-8"),  # UTF-16
        (b"a: 1\nb: x\x00y\n", r"bad\.yaml:2: not valid YAML: character U\+0000 is not allowed"),
        (b"a: 1\n  b: c: d\n", r"bad\.yaml:2:4: not valid YAML: mapping values are not allowed here"),
    ],
)
def test_bad_bytes_and_syntax_are_one_line_naming_file_and_line(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "bad.yaml").write_bytes(content)
    with pytest.raises(ConfigError, match=message) as raised:
        read_yaml_mapping(tmp_path / "bad.yaml", ConfigError)
    assert "\n" not in str(raised.value)


def test_a_byte_order_mark_is_allowed(tmp_path: Path) -> None:
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert read_yaml_mapping(tmp_path / "bom.yaml", ConfigError) == {"a": 1}


# --- duplicate keys (issue 31): refused at any depth, with both lines and the key path --------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\nb: 2\na: 3\n", r"dup\.yaml:3: duplicate key 'a' at the top level \(first at line 1\)"),
        (
            "training_args:\n  learning_rate: 5.0e-5\n  learning_rate: 5.0\n",
            r"dup\.yaml:3: duplicate key 'learning_rate' in 'training_args' \(first at line 2\)",
        ),
        (
            "training_args: {learning_rate: 5.0e-5, learning_rate: 5.0}\n",
            r"dup\.yaml:1: duplicate key 'learning_rate' in 'training_args' \(first at line 1\)",
        ),
        (
            "sources:\n  - name: a\n  - name: b\n    task_type: sts\n    options: {x: 1}\n    task_type: retrieval\n",
            r"dup\.yaml:6: duplicate key 'task_type' in 'sources\[1\]' \(first at line 4\)",
        ),
        ("a:\n  b:\n    - c: {d: 1, d: 2}\n", r"dup\.yaml:3: duplicate key 'd' in 'a\.b\[0\]\.c' \(first at line 3\)"),
        ("'a': 1\na: 2\n", r"dup\.yaml:2: duplicate key 'a' at the top level"),  # quoting makes no other key
        ("0x10: a\n16: b\n", r"dup\.yaml:2: duplicate key '16' \(the same key as '0x10'\) at the top level"),
        # An anchored mapping is checked where it is written, once, however often it is used.
        ("base: &b {x: 1, x: 2}\nrun: *b\n", r"dup\.yaml:1: duplicate key 'x' in 'base' \(first at line 1\)"),
        # A mapping merged in with << is checked too, and an explicit key is still given once only.
        ("run:\n  <<: {x: 1,\n    x: 2}\n", r"dup\.yaml:3: duplicate key 'x' in 'run\.<<' \(first at line 2\)"),
        (
            "base: &b {x: 1}\nrun:\n  <<: *b\n  x: 3\n  x: 4\n",
            r"dup\.yaml:5: duplicate key 'x' in 'run' \(first at line 4\)",
        ),
        (
            "a: &a {x: 1}\nb: &b {y: 2}\nrun:\n  <<: *a\n  <<: *b\n",
            r"dup\.yaml:5: duplicate key '<<' in 'run' \(first at line 4\); merge several mappings with one "
            r"'<<: \[\*a, \*b\]'",
        ),
    ],
)
def test_a_duplicate_key_is_an_error_naming_both_lines(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "dup.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message) as raised:
        read_yaml_mapping(tmp_path / "dup.yaml", ConfigError)
    assert "\n" not in str(raised.value)
    # PyYAML alone keeps the last value without a word: the reason for the strict loader.
    yaml.safe_load(text)


def test_merge_keys_keep_their_meaning(tmp_path: Path) -> None:
    """An explicit key overrides a merged one, and of two merged mappings the first wins: both allowed."""
    (tmp_path / "merge.yaml").write_text(
        "defaults: &defaults {learning_rate: 5.0e-5, warmup_steps: 0.1}\n"
        "other: &other {learning_rate: 1.0, seed: 3}\n"
        "run:\n  <<: *defaults\n  learning_rate: 2.0e-5\n"
        "both:\n  <<: [*defaults, *other]\n"
        "again: *defaults\n"
    )
    data = read_yaml_mapping(tmp_path / "merge.yaml", ConfigError)
    assert data["run"] == {"learning_rate": 2.0e-5, "warmup_steps": 0.1}
    # The first merged mapping wins, as the merge key type says (PyYAML 6.0.4 alone picks by the identity
    # of the key's string object: here the last one, 1.0; for a one-letter key, which Python interns, the first).
    assert data["both"] == {"learning_rate": 5.0e-5, "warmup_steps": 0.1, "seed": 3}
    assert data["again"] == data["defaults"] == {"learning_rate": 5.0e-5, "warmup_steps": 0.1}


def test_load_yaml_text_is_the_strict_safe_load() -> None:
    assert load_yaml_text("a: [1, {b: 2}]") == yaml.safe_load("a: [1, {b: 2}]")
    with pytest.raises(DuplicateKeyError) as raised:
        load_yaml_text("{b: 1, b: 2}")
    assert (raised.value.key, raised.value.line, raised.value.first_line, raised.value.where) == ("b", 1, 1, "")
    assert isinstance(raised.value, yaml.YAMLError)
    with pytest.raises(yaml.constructor.ConstructorError, match="could not determine a constructor"):
        load_yaml_text("a: !!python/object:os.system ls")  # still a SafeLoader


def test_each_config_reports_a_duplicate_key_as_its_own_error_type(tmp_path: Path) -> None:
    dup = tmp_path / "dup.yaml"
    dup.write_text("a: 1\na: 2\n")
    expected = r"dup\.yaml:2: duplicate key 'a' at the top level \(first at line 1\)"
    with pytest.raises(RecipeError, match=expected):
        load_build_recipe(dup)
    with pytest.raises(RecipeError, match=expected):
        load_train_recipe(dup)
    with pytest.raises(SuiteError, match=expected):
        EvaluationSuite.from_yaml(dup)
    with pytest.raises(MergeError, match=expected):
        MergeConfig.from_yaml(dup)


def test_relative_to_file(tmp_path: Path) -> None:
    folder = tmp_path / "recipes"
    assert relative_to_file("../data", folder) == str(tmp_path / "data")
    assert relative_to_file("./out/../run", folder) == str(folder / "run")
    for kept in ("/abs/path", "~/data", "https://example.com/x", ""):
        assert relative_to_file(kept, folder) == kept
    link = tmp_path / "link.yaml"
    link.symlink_to(folder / "real.yaml")
    assert yaml_folder(link) == folder  # a file's own folder, as build recipes and suites always had it
