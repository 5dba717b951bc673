"""Old import paths of release 0.1, kept working for one release with a ``DeprecationWarning``.

The package was reorganised into sub-packages by concern (``recipe/``, ``training/``, ``utils/``,
``hub/``, ``gur_pairs/``, ``losses/gradcache/``, ...), and the package face now re-exports only the
headline names. Code written against the old layout keeps running: ``import hf_unified_embed.train``
(or any moved module) gets the module at its new path, and ``hf_unified_embed.redact`` (a name no
longer re-exported) resolves through the package's ``__getattr__``; both warn once, naming the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

PACKAGE = "hf_unified_embed"

#: Old module path → new module path (below the package). Sub-modules of a moved package follow it.
MOVED_MODULES: dict[str, str] = {
    "recipe.train_recipe": "recipe.train_recipe",
    "preflight": "recipe.preflight",
    "train": "recipe.run",
    "model_card": "recipe.model_card",
    "launch": "cli.launch",
    "backbones": "training.backbones",
    "publishing": "hub.publishing",
    "processes": "utils.processes",
    "plugins": "utils.plugins",
    "yaml_files": "utils.yaml_files",
    "locations": "utils.locations",
    "redaction": "utils.redaction",
    "stack": "utils.stack",
    "outputs": "utils.outputs",
    "typecheck": "utils.typecheck",
    "naming": "utils.naming",
    "cards": "utils.templates",
    "mining.pairs": "gur_pairs.pair_mining",
    "mining": "gur_pairs",
    "data.recipe": "data.build_recipe",
    "data.readers": "utils.readers",
    "data.registry": "data.source_formats",
    "sampling.plan": "sampling.batch_plan",
    "losses.base": "losses.embedding_loss",
    "losses._gradcache": "losses.gradcache.cached_loss",
    "losses._auto_mini_batch": "losses.gradcache.auto_mini_batch",
    "losses._minibatches": "losses.gradcache.minibatches",
    "losses._checks": "losses.common.input_checks",
    "losses._citations": "losses.common.citations",
    "losses._distributed": "losses.common.distributed",
    "losses._hidden_states": "losses.common.hidden_states",
    "losses._pair_scores": "losses.common.pair_scores",
    "losses._teacher_scores": "losses.common.teacher_scores",
    "losses._text_identity": "losses.common.text_identity",
    "merge.methods.base": "merge.methods.merge_method",
    "merge.config": "merge.merge_config",
    "negatives.config": "negatives.hard_negative_config",
    "negatives.search": "negatives.exact_search",
    "evaluation.kinds.base": "evaluation.kinds.evaluation_kind",
    "data.adapters.sts": "data.adapters.sts_scores",
}
del MOVED_MODULES["recipe.train_recipe"]  # ``hf_unified_embed.recipe`` itself is a package of the new layout


def new_module_path(old: str) -> str | None:
    """The new dotted path of a moved module ``hf_unified_embed.<old>``, or ``None`` if it did not move."""
    relative = old.removeprefix(PACKAGE + ".")
    if relative == old:
        return None
    for moved in sorted(MOVED_MODULES, key=len, reverse=True):
        if relative == moved or relative.startswith(moved + "."):
            return f"{PACKAGE}.{MOVED_MODULES[moved]}{relative[len(moved) :]}"
    return None


def warn_moved(old: str, new: str) -> None:
    warnings.warn(f"{old} has moved to {new}; the old path works for one release", DeprecationWarning, stacklevel=3)


class _Alias(importlib.abc.Loader):
    """Loads an old module path as the module at its new path (the same module object)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The module ran at its new path; the import system has set its ``__spec__`` to the old name's.
        module.__spec__ = self.own_spec


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds ``hf_unified_embed.<old path>`` for every module of :data:`MOVED_MODULES`."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = new_module_path(fullname)
        if new is None:
            return None
        warn_moved(fullname, new)
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install_finder() -> None:
    """Put the finder first (once): a sub-module of a moved package (``mining.lcs``) must resolve to the
    module at its new path, not be loaded a second time from the package's folder under its old name.
    It answers only the old paths, none of which exists as a file."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
