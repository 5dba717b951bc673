"""Every YAML config (build recipe, training recipe, suite, merge config) is read by one function."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_unified_embed.data import load_build_recipe
from hf_unified_embed.evaluation import EvaluationSuite
from hf_unified_embed.merge import MergeConfig, MergeError
from hf_unified_embed.recipe import RecipeError
from hf_unified_embed.yaml_files import read_yaml_mapping


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
