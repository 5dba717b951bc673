"""The merged model's named prompts: the prompts its inputs were trained to be used with.

A model trained with instructions carries them as named prompts in ``config_sentence_transformers.json``
(:mod:`hf_unified_embed.training.published_prompts`); ``encode_query`` and ``encode(prompt_name=...)`` of
a user of the merged folder put them in front of the texts. A merge of such models keeps them:

* the merged models (``models``, not a ``base`` or specialists read alongside) that agree on their
  prompts give the merged folder those prompts, whatever the reference input's config says;
* models whose prompts disagree (different instructions, or one trained with instructions and one
  without) are refused in one line, before any tensor is merged, unless ``prompts_from`` names the
  model whose prompts to keep.

Empty prompts say "no instruction", so a model without prompts and one whose prompts are all empty agree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hf_unified_embed.errors import MergeError, shown

#: The sentence-transformers file that holds a saved model's prompts.
CONFIG_FILE = "config_sentence_transformers.json"


def folder_prompts(folder: Path) -> tuple[dict[str, str], str | None]:
    """``(prompts, default_prompt_name)`` of a model folder (``({}, None)`` for a plain transformers folder)."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        return {}, None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise MergeError(f"{path}: not a readable JSON file: {error}") from None
    prompts = config.get("prompts") or {}
    if not isinstance(prompts, Mapping) or not all(isinstance(text, str) for text in prompts.values()):
        raise MergeError(f"{path}: 'prompts' must map prompt names to texts, got {shown(prompts)}")
    return {str(name): text for name, text in prompts.items()}, config.get("default_prompt_name")


def _meaning(prompts: Mapping[str, str], default_name: str | None) -> tuple[tuple[tuple[str, str], ...], str | None]:
    # What a user gets from the prompts: an empty prompt is the same as none.
    return tuple(sorted((name, text) for name, text in prompts.items() if text)), default_name


def merged_prompts(
    models: Sequence[Path],
    folders: Mapping[Path, Path],
    labels: Mapping[Path, str],
    prompts_from: Path | None = None,
) -> tuple[dict[str, str], str | None]:
    """The prompts (and ``default_prompt_name``) of the merged folder.

    Args:
        models: the merged models, in order.
        folders: the local folder each was read from.
        labels: how the user named each (``models[1]``), for the error.
        prompts_from: the model whose prompts to keep when the models disagree.

    Returns:
        ``(prompts, default_prompt_name)``: those of ``prompts_from``, else of the first model (all agree).

    Raises:
        MergeError: the models' prompts disagree and ``prompts_from`` is not given; ``prompts_from`` is not
            one of ``models``.
    """
    read = {model: folder_prompts(folders[model]) for model in models}
    if prompts_from is not None:
        if prompts_from not in read:
            raise MergeError(
                f"prompts_from: {prompts_from} is not one of the merged models: {[str(model) for model in models]}"
            )
        return read[prompts_from]
    first = models[0]
    for model in models[1:]:
        if _meaning(*read[model]) != _meaning(*read[first]):
            raise MergeError(
                f"{labels.get(model, model)} ({model}) and {labels.get(first, first)} ({first}) have different "
                f"prompts ({_difference(read[first][0], read[model][0])}): a merged model can carry one set; "
                "name the input whose prompts to keep with --prompts-from (merge config: prompts_from)"
            )
    return read[first]


def prompts_source(
    prompts_from: int | str | Path | None, config_models: Sequence[Path], models: Sequence[Path]
) -> Path | None:
    """The merged model ``prompts_from`` names: an index into the config's ``models`` (else the method's), or a path."""
    if prompts_from is None:
        return None
    if isinstance(prompts_from, int):
        return (config_models or models)[prompts_from]
    return Path(prompts_from)


def _difference(first: Mapping[str, str], other: Mapping[str, str]) -> str:
    """The first prompt name the two sets give different texts, as ``'name': 'a' vs 'b'``."""
    for name in sorted(set(first) | set(other)):
        if first.get(name, "") != other.get(name, ""):
            return f"{shown(name)}: {shown(first.get(name, ''))} vs {shown(other.get(name, ''))}"
    return "default_prompt_name"


def write_prompts(folder: Path, prompts: Mapping[str, str], default_prompt_name: str | None) -> None:
    """Set the prompts of the merged ``folder``'s ``config_sentence_transformers.json`` (copied from the reference).

    A folder without that file is a plain transformers folder, which has no place for prompts; it is left as is.
    """
    path = folder / CONFIG_FILE
    if not path.is_file():
        return
    config: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    config["prompts"] = dict(prompts)
    config["default_prompt_name"] = default_prompt_name
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
