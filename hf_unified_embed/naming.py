"""One naming rule for task, config and split names, wherever they come from.

A task name becomes a folder (``data/<task>/``), a ``datasets`` config name and a key of the
trainer's loss mapping; a split name becomes part of a file name (``<split>-00000-of-00001.parquet``)
and a glob in the card. So both are checked before anything is written, the same way for a recipe
key, a data column (``unified`` files, MEDI's ``task_name``), a Hub layout being read back and a
``DatasetDict`` passed to the API:

* a **task** (or config) name is 1–96 ASCII letters, digits, ``_``, ``-`` and ``.``, starts with a
  letter or digit, holds no ``..`` and is not ``all`` (the config of every task);
* a **split** name is what ``datasets`` accepts (``\\w+(\\.\\w+)*``) in ASCII, so it cannot hold a
  ``-`` that would make ``train-*`` also match ``train-extra-*``.

Neither can contain a path separator, be ``.``/``..`` or be absolute, so no name read from data can
place a file outside its output folder.
"""

from __future__ import annotations

import re
from typing import Any

from hf_unified_embed.errors import NameRuleError

#: The config name that holds every task of a unified dataset.
ALL_CONFIG = "all"

TASK_NAME_RULE = "1-96 ASCII letters, digits, '_', '-' or '.', starting with a letter or digit, without '..'"
SPLIT_NAME_RULE = "ASCII letters, digits and '_', in parts joined by single dots (e.g. train, validation, test.v2)"

_TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
_SPLIT_NAME = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")


def task_name_problem(name: Any) -> str | None:
    """Why ``name`` is not a valid task name, or ``None`` when it is."""
    if not isinstance(name, str):
        return f"a task name must be a string, got {type(name).__name__}"
    if not _TASK_NAME.fullmatch(name) or ".." in name:
        return f"invalid task name {name!r}: use {TASK_NAME_RULE}"
    if name == ALL_CONFIG:
        return f"{ALL_CONFIG!r} is reserved for the config that holds every task"
    return None


def split_name_problem(name: Any) -> str | None:
    """Why ``name`` is not a valid split name, or ``None`` when it is."""
    if not isinstance(name, str):
        return f"a split name must be a string, got {type(name).__name__}"
    if not _SPLIT_NAME.fullmatch(name):
        return f"invalid split name {name!r}: use {SPLIT_NAME_RULE}"
    return None


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
