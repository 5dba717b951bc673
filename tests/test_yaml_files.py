"""Every YAML config (build recipe, training recipe, suite, merge config) is read by one function."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hf_unified_embed.data import load_build_recipe
from hf_unified_embed.errors import RecipeError
from hf_unified_embed.evaluation import EvaluationSuite
from hf_unified_embed.merge import MergeConfig, MergeError
from hf_unified_embed.utils.yaml_files import read_yaml_mapping

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
