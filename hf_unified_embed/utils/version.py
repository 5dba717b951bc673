"""The release of the package: ``hf_unified_embed.__version__`` and ``hf-unified-embed --version``."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

#: The distribution name on PyPI.
DISTRIBUTION = "hf-unified-embed"
#: What a copy of the package reports when neither an install nor a source tree says its release.
UNKNOWN_VERSION = "0+unknown"


def package_version() -> str:
    """The installed release from the package metadata (the one ``pip`` installed).

    A source tree put on ``sys.path`` without an install has no metadata: there the ``version`` of the
    checkout's ``pyproject.toml`` is the release, and :data:`UNKNOWN_VERSION` when even that is missing.
    """
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return UNKNOWN_VERSION
    # tomllib is 3.11+; the [project] table's version line is all that is needed.
    match = re.search(r'^\[project\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.MULTILINE | re.DOTALL)
    return match.group(1) if match else UNKNOWN_VERSION
