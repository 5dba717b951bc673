"""The source-format registry: a name such as ``"stsb"`` → the adapter that reads that format.

An adapter is a generator function ``read(files, context, **options)`` that yields
``(location, row)`` pairs. ``files`` are the resolved input paths, ``context`` counts skipped rows
and ``options`` are the recipe's per-source ``options``. ``location`` (``"path:line"``) is where the
row came from and ends up in error messages; ``row`` holds the unified text and score columns
(``query``, ``positives``, ``negatives``, ``positive_scores``, ``negative_scores``; missing lists
default to ``[]``) and may also carry ``task``, ``task_type`` and the instructions when the format
stores them per row (MEDI, CoDiEmb, unified files). Scores must already be normalised to [0, 1].
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from datasets import Features

from hf_unified_embed.errors import SourceFormatError, shown
from hf_unified_embed.schema import unified_features

SourceRow = tuple[str, dict[str, Any]]
AdapterFunction = Callable[..., Iterator[SourceRow]]

#: Third-party packages can register formats by pointing an entry point of this group at a module.
ENTRY_POINT_GROUP = "hf_unified_embed.source_formats"


@dataclass
class AdapterContext:
    """What an adapter gets besides its files and options, and may report besides rows.

    Attributes:
        source: the recipe source's name.
        skipped: rows skipped on purpose, by reason (call :meth:`skip`).
        scratch: a folder for temporary files (e.g. an on-disk join, a downloaded dataset's
            cache); ``None``: the system's temporary folder. The build CLI points it into the
            output's staging folder, so a killed build leaves nothing elsewhere.
        split: the recipe source's split (the split the rows are built into).
        notes: facts about where the rows came from (e.g. a Hub dataset id and revision), shown in
            the dataset card's ``source_notes`` and carried into later folders and model cards.
    """

    source: str
    skipped: Counter[str] = field(default_factory=Counter)
    scratch: Path | None = None
    split: str = "train"
    notes: dict[str, Any] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1


@dataclass(frozen=True)
class SourceFormat:
    """A registered format: its adapter, default options (presets) and declared features."""

    name: str
    read: AdapterFunction
    description: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    with_difficulty_option: bool = False
    dataset_ids: bool = False

    @property
    def option_names(self) -> tuple[str, ...]:
        parameters = inspect.signature(self.read).parameters.values()
        return tuple(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)

    def features(self, options: Mapping[str, Any]) -> Features:
        """The declared features of rows read with these options."""
        return unified_features(with_difficulty=self.with_difficulty_option and bool(options.get("with_difficulty")))

    def rows(
        self, files: Sequence[Path | str], context: AdapterContext, options: Mapping[str, Any]
    ) -> Iterator[SourceRow]:
        """Run the adapter with the preset defaults overridden by ``options``."""
        unknown = sorted(set(options) - set(self.option_names))
        if unknown:
            raise SourceFormatError(
                f"unknown option(s) {unknown} for format {shown(self.name)}",
                field="options",
                expected=f"some of {list(self.option_names)}",
            )
        return self.read(files, context, **{**self.defaults, **options})


_REGISTRY: dict[str, SourceFormat] = {}
_loaded = False


def register_source_format(
    name: str,
    *,
    presets: Mapping[str, Mapping[str, Any]] | None = None,
    with_difficulty_option: bool = False,
    dataset_ids: bool = False,
) -> Callable[[AdapterFunction], AdapterFunction]:
    """Register an adapter under ``name`` (and under each preset name with those default options).

    With ``dataset_ids`` an entry of ``data_files`` that does not look like a local path is passed to
    the adapter unchanged, as a string (a Hub dataset id), instead of being resolved as a file.

    Example::

        @register_source_format("my-tsv")
        def read_my_tsv(files, context, *, score_column="score"):
            for path in files:
                ...
                yield f"{path}:{line}", {"query": a, "positives": [b], "positive_scores": [s]}
    """

    def decorator(function: AdapterFunction) -> AdapterFunction:
        description = inspect.cleandoc(function.__doc__ or "").split("\n\n")[0].replace("\n", " ")
        for format_name, defaults in {name: {}, **(presets or {})}.items():
            if format_name in _REGISTRY and _REGISTRY[format_name].read is not function:
                raise ValueError(f"source format {shown(format_name)} is already registered")
            _REGISTRY[format_name] = SourceFormat(
                format_name, function, description, dict(defaults), with_difficulty_option, dataset_ids
            )
        return function

    return decorator


def _load_adapters() -> None:
    # Every module of hf_unified_embed.data.adapters registers itself on import; so does every
    # module named by an entry point of ENTRY_POINT_GROUP.
    global _loaded
    if _loaded:
        return
    from hf_unified_embed.data import adapters

    for module in pkgutil.iter_modules(adapters.__path__):
        importlib.import_module(f"{adapters.__name__}.{module.name}")
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        entry_point.load()
    _loaded = True


def get_source_format(name: str) -> SourceFormat:
    """The registered format called ``name``; a clear error lists the known ones otherwise."""
    _load_adapters()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise SourceFormatError(
            f"unknown source format {shown(name)}", field="format", expected=f"one of {sorted(_REGISTRY)}"
        ) from None


def source_format_names() -> list[str]:
    """All registered format and preset names, sorted."""
    _load_adapters()
    return sorted(_REGISTRY)
