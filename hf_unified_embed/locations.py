"""Local path or Hub repository id: one answer for every place that accepts either."""

from __future__ import annotations

from pathlib import Path


def looks_local(name: str | Path) -> bool:
    """Whether ``name`` names a local path rather than a Hub repository id (``name`` or ``owner/name``).

    A Hub id has at most one ``/`` and never starts with ``.``, ``/`` or ``~``; anything else, and
    anything that exists on disk, is local — so a mistyped local path is reported as missing instead
    of being looked up on the Hub.
    """
    if isinstance(name, Path):
        return True
    if name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1:
        return True
    return Path(name).expanduser().exists() or Path(name.split("/", 1)[0]).exists()
