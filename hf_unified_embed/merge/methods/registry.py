"""Where merge methods are found by name: the native streamed methods, mergekit's, a user's own.

A native method registers itself with :func:`register_merge_method` in its own file; mergekit's
methods are found in mergekit's registry on first use (:mod:`.mergekit_methods`); a method in the
user's own module is named ``package.module:ClassName``. A native name takes precedence over
mergekit's method of the same name (``task_arithmetic``).
"""

from __future__ import annotations

import inspect
from typing import TypeVar

from hf_unified_embed.errors import MergeError, shown
from hf_unified_embed.merge.methods.merge_method import MergeMethod
from hf_unified_embed.merge.methods.mergekit_methods import mergekit_method, mergekit_method_names
from hf_unified_embed.utils.plugins import import_object, is_import_path

MethodT = TypeVar("MethodT", bound=type[MergeMethod])

MERGE_METHODS: dict[str, type[MergeMethod]] = {}


def register_merge_method(cls: MethodT) -> MethodT:
    """Class decorator adding a method to :data:`MERGE_METHODS` under its ``name``."""
    if cls.name in MERGE_METHODS:
        raise ValueError(f"merge method {shown(cls.name)} is already registered")
    MERGE_METHODS[cls.name] = cls
    return cls


def available_merge_methods() -> list[str]:
    """Registered names, then mergekit's (when mergekit is installed)."""
    return [*sorted(MERGE_METHODS), *(name for name in mergekit_method_names() if name not in MERGE_METHODS)]


def get_merge_method(name: str) -> type[MergeMethod]:
    """A registered method, one of mergekit's, or a user's ``package.module:ClassName`` (a :class:`MergeMethod`)."""
    if not isinstance(name, str):
        raise MergeError(f"method must be a name, got {shown(name)}")
    if name in MERGE_METHODS:
        return MERGE_METHODS[name]
    if not is_import_path(name) and (from_mergekit := mergekit_method(name)) is not None:
        return from_mergekit
    if not is_import_path(name):
        raise MergeError(
            f"unknown merge method {shown(name)}; available: {', '.join(available_merge_methods())} "
            "(mergekit's methods need the 'merge' extra: pip install hf-unified-embed[merge]) "
            "or 'package.module:ClassName' for your own"
        )
    method = import_object(name, MergeError, "merge method")
    if not (isinstance(method, type) and issubclass(method, MergeMethod)) or inspect.isabstract(method):
        raise MergeError(
            f"merge method {shown(name)} is not a concrete subclass of hf_unified_embed.merge.MergeMethod"
        )
    if not isinstance(getattr(method, "name", None), str):
        raise MergeError(f"merge method {shown(name)} has no class attribute 'name' (the name its card shows)")
    return method
