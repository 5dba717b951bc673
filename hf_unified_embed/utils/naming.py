"""One naming rule for task, config and split names, wherever they come from.

A task name becomes a folder (``data/<task>/``), a ``datasets`` config name and a key of the
trainer's loss mapping; a split name becomes part of a file name (``<split>-00000-of-00001.parquet``)
and a glob in the card. So both are checked before anything is written, the same way for a recipe
key, a data column (``unified`` files, MEDI's ``task_name``), a Hub layout being read back and a
``DatasetDict`` passed to the API:

* a **task** (or config) name is 1–96 ASCII letters, digits, ``_``, ``-`` and ``.``, starts with a
  letter or digit, holds no ``..``, does not end in ``.`` and is not ``all`` (the config of every task);
* a **split** name is what ``datasets`` accepts (``\\w+(\\.\\w+)*``) in ASCII, so it cannot hold a
  ``-`` that would make ``train-*`` also match ``train-extra-*``.

Neither can contain a path separator, be ``.``/``..``, hidden (``.x``) or absolute, so no name read
from data can place a file outside its output folder. A task folder must also exist on every file
system a dataset is copied to: Windows refuses device names (``CON``, ``PRN``, ``AUX``, ``NUL``,
``COM1``–``COM9``, ``LPT1``–``LPT9``, with any extension: ``nul.txt``) and drops a trailing dot, and
Windows and macOS compare names without case, so ``stsb`` and ``STSB`` in one dataset are refused
(:func:`check_distinct_names`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

from hf_unified_embed.errors import NameRuleError, shown

#: Bytes of an output's name kept whole in the names of the hidden files beside it (its staging folder, its
#: lock): with their additions (``.``, ``.staging-<host>-<pid>-<random>``, up to 90 bytes) they stay under
#: the 255 bytes a file system allows in a name, for every output name it allows.
BESIDE_NAME_BYTES = 120
#: Hex digits of the hash that stands for the rest of a longer name.
_BESIDE_HASH = 16

#: The config name that holds every task of a unified dataset.
ALL_CONFIG = "all"

TASK_NAME_RULE = (
    "1-96 ASCII letters, digits, '_', '-' or '.', starting with a letter or digit, without '..', not ending in '.'"
)
SPLIT_NAME_RULE = "ASCII letters, digits and '_', in parts joined by single dots (e.g. train, validation, test.v2)"

_TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
_SPLIT_NAME = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")
#: Names Windows reserves for devices, whatever follows a dot (``CON``, ``con.txt``, ``LPT1.tar.gz``).
_DEVICE_NAME = re.compile(r"(CON|PRN|AUX|NUL|COM[1-9]|LPT[1-9])(\..*)?", re.IGNORECASE)


def task_name_problem(name: Any) -> str | None:
    """Why ``name`` is not a valid task name, or ``None`` when it is."""
    if not isinstance(name, str):
        return f"a task name must be a string, got {type(name).__name__}"
    if not _TASK_NAME.fullmatch(name) or ".." in name or name.endswith("."):
        return f"invalid task name {shown(name)}: use {TASK_NAME_RULE}"
    if _DEVICE_NAME.fullmatch(name):
        return f"invalid task name {shown(name)}: Windows reserves it for a device, so its folder cannot exist there"
    if name == ALL_CONFIG:
        return f"{shown(ALL_CONFIG)} is reserved for the config that holds every task"
    return None


def split_name_problem(name: Any) -> str | None:
    """Why ``name`` is not a valid split name, or ``None`` when it is."""
    if not isinstance(name, str):
        return f"a split name must be a string, got {type(name).__name__}"
    if not _SPLIT_NAME.fullmatch(name):
        return f"invalid split name {shown(name)}: use {SPLIT_NAME_RULE}"
    return None


def case_collision(names: Iterable[str]) -> tuple[str, str] | None:
    """Two of ``names`` that differ only in case (``stsb``, ``STSB``), or ``None``.

    Such names are one folder (or file) on Windows and macOS, where one task would overwrite the other.
    """
    seen: dict[str, str] = {}
    for name in names:
        other = seen.setdefault(name.casefold(), name)
        if other != name:
            return other, name
    return None


def check_distinct_names(names: Iterable[str], what: str, where: str = "") -> None:
    """Raise :class:`NameRuleError` if two of ``names`` (tasks or splits, see ``what``) differ only in case."""
    collision = case_collision(names)
    if collision:
        problem = (
            f"{what} names {shown(collision[0])} and {shown(collision[1])} differ only in case: they would be one folder "
            "on Windows and macOS; rename one"
        )
        raise NameRuleError(f"{where}: {problem}" if where else problem)


def check_task_name(name: Any, where: str = "") -> str:
    """Return ``name`` if it is a valid task name; else raise :class:`NameRuleError` prefixed with ``where``."""
    problem = task_name_problem(name)
    if problem:
        raise NameRuleError(f"{where}: {problem}" if where else problem)
    return name


def check_split_name(name: Any, where: str = "") -> str:
    """Return ``name`` if it is a valid split name; else raise :class:`NameRuleError` prefixed with ``where``."""
    problem = split_name_problem(name)
    if problem:
        raise NameRuleError(f"{where}: {problem}" if where else problem)
    return name


def beside_name(name: str) -> str:
    """``name`` as the hidden files beside an output carry it: whole up to :data:`BESIDE_NAME_BYTES` bytes in
    UTF-8, else its start and a hash of the whole name (``<start>~<hash>``), one name for one output.

    An output named near the file system's limit (255 bytes) was refused: its staging folder's name, the
    output's plus ``.staging-...``, could not be created.
    """
    encoded = name.encode("utf-8", "surrogateescape")
    if len(encoded) <= BESIDE_NAME_BYTES:
        return name
    digest = hashlib.sha256(encoded).hexdigest()[:_BESIDE_HASH]
    start = encoded[: BESIDE_NAME_BYTES - _BESIDE_HASH - 1].decode("utf-8", "ignore")  # whole characters only
    return f"{start}~{digest}"
