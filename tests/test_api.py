"""The public API: every exported name imports, the TYPE_CHECKING block mirrors it, one error hierarchy."""

from __future__ import annotations

import argparse
import ast
import inspect
from pathlib import Path

import pytest

import hf_unified_embed
from hf_unified_embed import errors


def test_every_exported_name_imports() -> None:
    for name in hf_unified_embed.__all__:
        assert getattr(hf_unified_embed, name) is not None, name
    assert hf_unified_embed.GURLoss.__name__ == "GURLoss"


def test_type_checking_block_mirrors_the_exports() -> None:
    tree = ast.parse(Path(hf_unified_embed.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported = {
        (node.module.removeprefix("hf_unified_embed."), alias.name)
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    exported = {(module, name) for module, names in hf_unified_embed._EXPORTS.items() for name in names}
    assert imported == exported


def test_every_error_class_is_under_the_one_base() -> None:
    classes = [
        value for _, value in inspect.getmembers(errors, inspect.isclass) if value.__module__ == errors.__name__
    ]
    assert len(classes) >= 15
    for cls in classes:
        assert issubclass(cls, errors.HfUnifiedEmbedError), cls
        assert cls.__name__ in errors.__doc__, f"{cls.__name__} is missing from the table in errors.py"
    # Standard bases stay, so code written against them still catches the errors.
    assert issubclass(errors.OutputExistsError, FileExistsError)
    assert issubclass(errors.InputNotFoundError, FileNotFoundError)
    assert issubclass(errors.SourceFormatError, ValueError)


def test_one_name_per_meaning() -> None:
    from hf_unified_embed import data, evaluation, merge, schema
    from hf_unified_embed.data import source_formats as registry
    from hf_unified_embed.recipe import train_recipe as recipe

    assert recipe.RecipeError is errors.RecipeError
    assert data.SourceFormatError is registry.SourceFormatError is errors.SourceFormatError
    assert schema.UnifiedSchemaError is errors.UnifiedSchemaError
    assert merge.MergeError is errors.MergeError
    assert evaluation.EvaluationDataError is errors.EvaluationDataError
    assert not hasattr(data, "load_recipe") and not hasattr(recipe, "load_recipe")


def test_cli_catches_exactly_the_base(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from hf_unified_embed.cli import main as cli

    def raise_input_error(args: object) -> int:
        raise errors.InputError("data.tsv:3, field 'score': got 'x'")

    def raise_value_error(args: object) -> int:
        raise ValueError("a bug")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(parser, "parse_args", lambda argv: argparse.Namespace(func=raise_input_error, verbose=False))
    assert cli.main(["x"]) == 2
    assert capsys.readouterr().err == "error: data.tsv:3, field 'score': got 'x'\n"
    monkeypatch.setattr(parser, "parse_args", lambda argv: argparse.Namespace(func=raise_value_error, verbose=False))
    with pytest.raises(ValueError, match="a bug"):
        cli.main(["x"])
