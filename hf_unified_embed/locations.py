"""Local path or Hub repository id: one answer for every place that accepts either."""

from __future__ import annotations

from pathlib import Path


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
