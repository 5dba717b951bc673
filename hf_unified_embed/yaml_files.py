"""Reading the YAML files users write: build recipes, training recipes, evaluation suites, merge configs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml


def read_yaml_mapping(path: str | Path, error: type[Exception]) -> dict[str, Any]:
    """The top-level mapping of a YAML file (``{}`` for an empty file).

    A missing file, invalid YAML or a top level that is not a mapping raise ``error`` naming the
    file, so that each command reports it as an input error rather than a traceback.
    """
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: file does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as problem:
        raise error(f"{path}: not valid YAML: {problem}") from problem
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise error(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return dict(data)
