"""Names a package re-exports from its modules, imported on first use (PEP 562 ``__getattr__``).

A package lists ``{name: module}`` and defines ``__getattr__ = lambda name: lazy_attribute(globals(), EXPORTS, name)``
(as a function); its ``TYPE_CHECKING`` block gives type checkers the same names. Reading a recipe or
checking a sampler option then imports neither torch nor sentence-transformers.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, MutableMapping
from typing import Any

from hf_unified_embed.errors import shown


def lazy_attribute(namespace: MutableMapping[str, Any], exports: Mapping[str, str], name: str) -> Any:
    """``name`` from its module in ``exports``, kept in the package's ``namespace`` so it is looked up once."""
    module = exports.get(name)
    if module is None:
        raise AttributeError(f"module {shown(namespace['__name__'])} has no attribute {shown(name)}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value
