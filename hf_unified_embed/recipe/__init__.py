"""The recipe run: one YAML file (or mapping) that names everything a unified training run needs.

* :mod:`~hf_unified_embed.recipe.train_recipe`: the recipe's sections as validated data classes;
* :mod:`~hf_unified_embed.recipe.preflight`: every check that can run before data or a model loads;
* :mod:`~hf_unified_embed.recipe.run`: the run itself (data → curriculum → model → losses → trainer →
  saved model → evaluation → push), :func:`train_from_recipe`;
* :mod:`~hf_unified_embed.recipe.model_card`: the card of a trained model and everything a run puts in it.

The launcher (``hf-unified-embed-torchrun``) is a command line: :mod:`hf_unified_embed.cli.launch`.
Names load on first use, so reading a recipe does not import the training stack.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from hf_unified_embed.utils.lazy_exports import lazy_attribute

_EXPORTS = {
    "DEFAULT_BASE_MODEL_ID": "hf_unified_embed.utils.locations",
    "packaged_minilm_path": "hf_unified_embed.utils.locations",
    "TrainRecipe": "hf_unified_embed.recipe.train_recipe",
    "load_train_recipe": "hf_unified_embed.recipe.train_recipe",
    "recipe_from_dict": "hf_unified_embed.recipe.train_recipe",
    "preflight": "hf_unified_embed.recipe.preflight",
    "TrainingOutcome": "hf_unified_embed.recipe.run",
    "check_recipe": "hf_unified_embed.recipe.run",
    "train_from_recipe": "hf_unified_embed.recipe.run",
    "UnifiedModelCardData": "hf_unified_embed.recipe.model_card",
}

if TYPE_CHECKING:
    from hf_unified_embed.recipe.model_card import UnifiedModelCardData
    from hf_unified_embed.recipe.preflight import preflight
    from hf_unified_embed.recipe.run import TrainingOutcome, check_recipe, train_from_recipe
    from hf_unified_embed.recipe.train_recipe import TrainRecipe, load_train_recipe, recipe_from_dict
    from hf_unified_embed.utils.locations import DEFAULT_BASE_MODEL_ID, packaged_minilm_path

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS and not name.startswith("_"):
        # In 0.1 ``hf_unified_embed.recipe`` was the module that is now ``recipe.train_recipe``.
        train_recipe = importlib.import_module("hf_unified_embed.recipe.train_recipe")
        if hasattr(train_recipe, name):
            warnings.warn(
                f"hf_unified_embed.recipe.{name} has moved to hf_unified_embed.recipe.train_recipe.{name}; "
                "the old path works for one release",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(train_recipe, name)
    return lazy_attribute(globals(), _EXPORTS, name)
