"""The release of the package: ``hf_unified_embed.__version__`` and ``hf-unified-embed --version``."""

from __future__ import annotations

import re
from pathlib import Path

#: The distribution name on PyPI.
DISTRIBUTION = "hf-unified-embed"
#: What a copy of the package reports when neither an install nor a source tree says its release.
UNKNOWN_VERSION = "0+unknown"
#: The checkout's ``pyproject.toml``, for a source tree on ``sys.path`` that was never installed.
CHECKOUT_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

_TABLE = re.compile(r"^\s*\[")
_VERSION = re.compile(r"""^version\s*=\s*["']([^"']+)["']""")


def package_version() -> str:
    """The installed release from the package metadata (the one ``pip`` installed).

    A source tree put on ``sys.path`` without an install has no metadata: there the release is the
    ``version`` of the checkout's ``pyproject.toml`` (:func:`version_from_pyproject`).
    """
    from importlib import metadata  # here, not at import: it costs every command tens of milliseconds

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return version_from_pyproject(CHECKOUT_PYPROJECT)


def version_from_pyproject(path: Path) -> str:
    """The ``version`` key of ``path``'s ``[project]`` table, or :data:`UNKNOWN_VERSION` without one.

    Read line by line rather than with ``tomllib`` (Python 3.11+): the key is one line of one table.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return UNKNOWN_VERSION
    in_project = False
    for line in lines:
        if _TABLE.match(line):
            in_project = line.split("#", 1)[0].strip() == "[project]"
            continue
        match = _VERSION.match(line.strip()) if in_project else None
        if match:
            return match.group(1)
    return UNKNOWN_VERSION
