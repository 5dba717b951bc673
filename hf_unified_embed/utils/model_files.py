"""The files of a local model folder checked before a library reads them: each damaged one named in one line.

transformers and sentence-transformers read a model folder's JSON files and weights wherever they need
them, and a damaged file surfaces as whatever their code meets first: a ``SafetensorError`` traceback for
a truncated ``model.safetensors``, ``'int' object is not subscriptable`` for a ``modules.json`` that holds
numbers, a JSON error that does not say which of the folder's files it read. :func:`model_files_problem`
reads what a load would read — each JSON file of the folder and of the modules ``modules.json`` lists,
and the header of each safetensors file (which ``safetensors`` checks against the file's size) — and
says which file is damaged and how, so the caller can refuse the folder before any model code runs.
Only headers are read: a few milliseconds for a model of any size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hf_unified_embed.errors import one_line, shown

#: JSON files whose top level is a list; every other JSON file of a model folder holds an object.
_LIST_FILES = ("modules.json",)
#: The JSON files a load reads besides a sharded model's ``*.index.json``: transformers', the tokenizer's,
#: PEFT's and sentence-transformers' (each module's ``config.json`` included). Other JSON files of a model
#: folder are not read by a load and may hold anything: all-MiniLM-L6-v2 ships a ``data_config.json`` list.
_READ_FILES = (
    "modules.json",
    "config.json",
    "config_sentence_transformers.json",
    "sentence_bert_config.json",
    "generation_config.json",
    "adapter_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)
#: The keys of a ``modules.json`` entry that sentence-transformers reads, with their JSON types.
_MODULE_KEYS: dict[str, type | tuple[type, ...]] = {"idx": int, "name": str, "path": str, "type": str}


def model_files_problem(folder: str | Path) -> str | None:
    """What is wrong with the files of the local model folder ``folder``, or ``None`` if nothing is found.

    Args:
        folder: a model folder (sentence-transformers, transformers or a PEFT adapter).

    Returns:
        One line naming the damaged file and the problem (``<file>: not valid JSON (...)``,
        ``<file>: not a readable safetensors file (...)``), or ``None``.
    """
    folder = Path(folder).expanduser()
    modules = folder / "modules.json"
    module_folders = [folder]
    if modules.is_file():
        entries, problem = _json(modules)
        if problem is None:
            problem = _modules_problem(modules, entries)
        if problem is not None:
            return problem
        module_folders += [folder / entry["path"] for entry in entries if entry["path"]]
    for module_folder in dict.fromkeys(module_folders):
        for path in _files(module_folder, "*.json"):
            if path != modules and _is_read(path.name):
                problem = _json(path)[1]
                if problem is not None:
                    return problem
        for path in _files(module_folder, "*.safetensors"):
            problem = _safetensors_problem(path)
            if problem is not None:
                return problem
    return None


def _is_read(name: str) -> bool:
    return name in _READ_FILES or name.endswith(".index.json")


def _files(folder: Path, pattern: str) -> Iterator[Path]:
    if folder.is_dir():
        yield from sorted(path for path in folder.glob(pattern) if path.is_file())


def _json(path: Path) -> tuple[Any, str | None]:
    """``(value, None)`` for a JSON file of the top-level type its name calls for, else ``(None, problem)``."""
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as error:
        return None, f"{path}: not UTF-8 text (byte {error.start}); restore the file from the model's source"
    except ValueError as error:  # JSONDecodeError, and numbers too long to convert
        return None, f"{path}: not valid JSON ({one_line(error, 200)}); restore the file from the model's source"
    except OSError as error:
        return None, f"{path}: cannot be read ({error.strerror or error})"
    expected = list if path.name in _LIST_FILES else dict
    if not isinstance(value, expected):
        kind = "a JSON list" if expected is list else "a JSON object"
        return None, f"{path}: expected {kind}, got {type(value).__name__}"
    return value, None


def _modules_problem(path: Path, entries: list[Any]) -> str | None:
    """Why the entries of a ``modules.json`` cannot name a model's modules: an entry that is not an object, a
    key of the wrong type, a module folder outside the model folder. A missing folder is no problem: a module
    without weights or configuration (``Normalize``) may be saved without one."""
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            return f"{path}: entry {index} is {type(entry).__name__}, expected an object with path and type"
        for key, kind in _MODULE_KEYS.items():
            value = entry.get(key)
            if key in ("path", "type") and key not in entry:
                return f"{path}: entry {index} has no {shown(key)}"
            if key in entry and (not isinstance(value, kind) or isinstance(value, bool)):
                return f"{path}: entry {index}, field {shown(key)}: got {shown(value)}, expected {kind.__name__}"  # type: ignore[union-attr]
        module = (path.parent / entry["path"]).resolve()
        if not module.is_relative_to(path.parent.resolve()):
            return f"{path}: entry {index}, field 'path': {shown(entry['path'])} is outside the model folder"
    return None


def _safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a complete safetensors file (header, tensor offsets against the file size)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            handle.keys()
    except (SafetensorError, OSError, ValueError) as error:
        return f"{path}: not a readable safetensors file (truncated or corrupt?): {one_line(error, 200)}"
    return None
