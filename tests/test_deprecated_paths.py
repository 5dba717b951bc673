"""The 0.1 layout keeps working for one release: every moved module path and every name the package
face no longer re-exports resolves to the same object, with a DeprecationWarning naming the new path."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import hf_unified_embed
from hf_unified_embed.utils.deprecation import MOVED_MODULES, new_module_path

#: Sub-modules of moved packages, imported through their old package path.
OLD_SUBMODULES = ("mining.lcs", "mining.documents", "mining.sentences")


@pytest.mark.parametrize("old", sorted(MOVED_MODULES) + list(OLD_SUBMODULES))
def test_old_module_path_is_the_new_module_with_a_warning(old: str) -> None:
    old_name = f"hf_unified_embed.{old}"
    new_name = new_module_path(old_name)
    assert new_name is not None
    sys.modules.pop(old_name, None)
    with pytest.warns(DeprecationWarning, match=rf"{old_name} has moved to {new_name}"):
        module = importlib.import_module(old_name)
    assert module is importlib.import_module(new_name)
    assert module.__name__ == new_name and module.__spec__.name == new_name


@pytest.mark.parametrize("name", sorted(hf_unified_embed._DEPRECATED))
def test_name_no_longer_re_exported_still_resolves(name: str) -> None:
    module = hf_unified_embed._DEPRECATED[name]
    with pytest.warns(DeprecationWarning, match=rf"import it from hf_unified_embed\.{module}"):
        value = getattr(hf_unified_embed, name)
    assert value is getattr(importlib.import_module(f"hf_unified_embed.{module}"), name)
    assert name not in hf_unified_embed.__all__


def test_headline_names_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for name in hf_unified_embed.__all__:
            getattr(hf_unified_embed, name)
    assert 30 <= len(hf_unified_embed.__all__) <= 42  # the losses, the run, and what the quick start imports


@pytest.mark.parametrize("name", ["SamplerConfig", "DataConfig", "KeepBaseConfig", "HubConfig", "SAMPLER_KINDS"])
def test_names_of_the_old_recipe_module_resolve_from_the_recipe_package(name: str) -> None:
    from hf_unified_embed.recipe import train_recipe

    with pytest.warns(DeprecationWarning, match=rf"hf_unified_embed\.recipe\.train_recipe\.{name}"):
        value = getattr(importlib.import_module("hf_unified_embed.recipe"), name)
    assert value is getattr(train_recipe, name)


def test_old_from_import_in_a_fresh_process() -> None:
    """What a user's 0.1 script does, in a process of its own: the finder is installed by importing the package."""
    code = (
        "import warnings; warnings.simplefilter('always')\n"
        "from hf_unified_embed.train import train_from_recipe\n"
        "from hf_unified_embed.recipe.run import train_from_recipe as new\n"
        "from hf_unified_embed.mining.pairs import mine_pairs\n"
        "from hf_unified_embed.gur_pairs.pair_mining import mine_pairs as new_pairs\n"
        "assert train_from_recipe is new and mine_pairs is new_pairs\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "hf_unified_embed.train has moved to hf_unified_embed.recipe.run" in result.stderr
    assert "hf_unified_embed.mining.pairs has moved to hf_unified_embed.gur_pairs.pair_mining" in result.stderr


def test_unknown_names_still_fail() -> None:
    with pytest.raises(AttributeError):
        hf_unified_embed.no_such_name  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("hf_unified_embed.no_such_module")
