"""Where each task's rows come from, carried with the rows themselves.

A task's *source notes* are a small dict — the recipe source's ``name``, ``format``, input ``files``,
``license`` and ``source`` text, plus whatever an adapter or a later step reported (a Hub dataset id
and revision, the ``hard_negatives`` mining settings). The dataset card keeps them under
``source_notes`` (:func:`~hf_unified_embed.data.hub_layout.render_dataset_card`), and the model card of
a model trained on the folder shows them and derives its ``license`` from them.

So that no path between those two loses them, every task ``Dataset`` that
:func:`~hf_unified_embed.data.build_unified` or :func:`~hf_unified_embed.data.load_unified` returns
carries its notes in its :class:`datasets.DatasetInfo`: :class:`UnifiedDatasetInfo` adds one field,
and ``datasets`` copies the info (class included) through ``map``, ``filter``, ``select``,
``shuffle``, ``add_column`` and the other single-dataset transforms. ``save_unified`` then writes
them whether the data came from the ``build`` command or from the Python API. (Combining datasets —
``concatenate_datasets``, ``map(num_proc=N)`` — starts a fresh info; attach the notes again with
:func:`with_source_notes`.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasets import Dataset, DatasetInfo

if TYPE_CHECKING:
    from hf_unified_embed.data.build_recipe import SourceSpec

UNKNOWN = "unknown"
#: A license identifier as the Hub's ``license`` field takes them (``apache-2.0``, ``cc-by-nc-sa-3.0``).
LICENSE_ID = re.compile(r"[a-z0-9][a-z0-9.+-]*")
#: How many input file names a note lists before it only counts the rest.
MAX_LISTED_FILES = 20


@dataclass
class UnifiedDatasetInfo(DatasetInfo):
    """``datasets.DatasetInfo`` plus the task's source notes (kept by ``info.copy()`` in every transform)."""

    source_notes: dict[str, Any] = field(default_factory=dict)


def notes_of(dataset: Dataset) -> dict[str, Any]:
    """The source notes a task ``Dataset`` carries (empty when it carries none)."""
    return dict(getattr(dataset.info, "source_notes", None) or {})


def with_source_notes(dataset: Dataset, notes: Mapping[str, Any]) -> Dataset:
    """``dataset`` (same Arrow table and indices, no copy of the rows) carrying ``notes`` in its info.

    Notes it already carries are kept unless ``notes`` sets the same key.
    """
    info = UnifiedDatasetInfo(
        **{key: value for key, value in vars(dataset.info).items() if key != "source_notes"},
        source_notes={**notes_of(dataset), **notes},
    )
    info.license = str(info.source_notes.get("license") or info.license or "")
    # datasets has no public way to swap an info; the constructor with the same table and indices
    # gives an equivalent dataset (its fingerprint kept, so caches stay valid).
    return Dataset(
        dataset.data,
        info=info,
        split=dataset.split,
        indices_table=dataset._indices,
        fingerprint=dataset._fingerprint,
    )


def file_names(inputs: Sequence[Path | str]) -> list[str]:
    """The input files of a source as a card lists them: base names (a card must not leak local
    folders), Hub ids as they are, at most :data:`MAX_LISTED_FILES` then a count of the rest."""
    names = [entry.name if isinstance(entry, Path) else str(entry) for entry in inputs]
    if len(names) > MAX_LISTED_FILES:
        names = [*names[:MAX_LISTED_FILES], f"… and {len(names) - MAX_LISTED_FILES} more"]
    return names


def task_notes(
    spec: SourceSpec | None,
    carried: Mapping[str, Any] | None = None,
    *,
    files: Sequence[Path | str] | None = None,
) -> dict[str, Any]:
    """A task's ``source_notes`` entry: name, format, files, license and source of its recipe source, then ``carried``.

    ``carried`` holds what an adapter reported (a Hub dataset id, its config and revision) or what an
    earlier card or the dataset itself said about the task; it wins over the defaults so facts survive
    later rewrites (curriculum, mined negatives).
    """
    notes: dict[str, Any] = {
        "source": spec.source if spec and spec.source else (spec.format if spec else UNKNOWN),
        "license": spec.license if spec and spec.license else UNKNOWN,
        "format": spec.format if spec else "unified",
    }
    if spec is not None:
        notes["name"] = spec.name
    if files is not None:
        notes["files"] = file_names(files)
    notes.update(carried or {})
    return notes


#: Characters of a free-text note (``source``, ``license`` ...) a card shows, and entries of a list (``files``):
#: a card is read on the Hub page, and a 10 MB ``source:`` made a 31 MB card.
CARD_TEXT_LIMIT = 500
CARD_LIST_LIMIT = 50


def card_notes(notes: Mapping[str, Any]) -> dict[str, Any]:
    """``notes`` as a card shows them: long texts cut at :data:`CARD_TEXT_LIMIT` characters and long lists at
    :data:`CARD_LIST_LIMIT` entries, each saying how much was left out."""

    def bounded(value: Any) -> Any:
        if isinstance(value, str) and len(value) > CARD_TEXT_LIMIT:
            return f"{value[:CARD_TEXT_LIMIT]}… ({len(value):,} characters; the rest is left out of the card)"
        if isinstance(value, list):
            kept = [bounded(item) for item in value[:CARD_LIST_LIMIT]]
            return [*kept, f"… and {len(value) - CARD_LIST_LIMIT:,} more"] if len(value) > CARD_LIST_LIMIT else kept
        if isinstance(value, dict):
            return {key: bounded(item) for key, item in value.items()}
        return value

    return {key: bounded(value) for key, value in notes.items()}


def card_license(notes: Iterable[Mapping[str, Any]]) -> str:
    """The ``license`` of a card built from tasks with these notes: their one shared license, else ``other``.

    ``other`` is what the Hub expects when a repository mixes licenses (the card then lists each task's
    license), when a license is unknown, or when the shared one is free text rather than an identifier
    such as ``cc-by-sa-4.0``.
    """
    licenses = {str(note.get("license") or UNKNOWN).lower() for note in notes}
    if len(licenses) == 1 and UNKNOWN not in licenses and LICENSE_ID.fullmatch(shared := licenses.pop()):
        return shared
    return "other"
