"""Jinja templates for dataset and model cards (``cards/`` at the repository root, shipped in the wheel)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import yaml

from hf_unified_embed.errors import shown


def templates_dir() -> Path:
    """Where the card templates are: inside the installed package, or ``cards/`` of a source checkout."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "cards"
    if packaged.is_dir():
        return packaged
    checkout = package.parent / "cards"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"card templates not found in {packaged} or {checkout}")


def template_path(name: str) -> Path:
    """Full path of a card template such as ``dataset_card.md.j2``."""
    path = templates_dir() / name
    if not path.is_file():
        raise FileNotFoundError(f"no card template {shown(name)} in {templates_dir()}")
    return path


def _to_yaml(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, width=1000).rstrip()


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # Markdown, not HTML
    )
    environment.filters["to_yaml"] = _to_yaml
    return environment


def render_template(name: str, **context: Any) -> str:
    """Render a card template; missing variables are an error rather than an empty string."""
    return _environment().get_template(name).render(**context)
