"""User extensions named in recipes and configs as ``package.module:Name``.

A loss, a merge method or an evaluation kind written in the user's own module is used without
editing this package: recipes name it ``my_package.losses:MyLoss`` and the object is imported
from there (the module must be importable, e.g. installed or on ``PYTHONPATH``).
"""

from __future__ import annotations

import importlib
from typing import Any

from hf_unified_embed.errors import shown


def is_import_path(name: str) -> bool:
    """Whether ``name`` has the ``package.module:Name`` form."""
    module, _, attribute = name.partition(":")
    return bool(module) and bool(attribute) and all(part.isidentifier() for part in (*module.split("."), attribute))


def import_object(name: str, error: type[Exception], what: str) -> Any:
    """The object ``package.module:Name``; ``error`` (naming ``what``) if the module or name is missing."""
    module_name, _, attribute = name.partition(":")
    if not is_import_path(name):
        raise error(f"{what} {shown(name)}: expected 'package.module:Name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as problem:
        raise error(f"{what} {shown(name)}: cannot import module {shown(module_name)} ({problem})") from problem
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise error(f"{what} {shown(name)}: module {shown(module_name)} has no attribute {shown(attribute)}") from None
