"""Unified embedding data: source adapters, the ``datasets`` builder, recipes and the Hub layout.

Raw files become rows of the unified schema (:mod:`hf_unified_embed.schema`) through *source
formats*, registered by name. ``build_unified(recipe, num_proc=N)`` runs the recipe's sources (and
the files of a source) through their formats in ``datasets``' own builder processes and returns a
validated ``DatasetDict`` keyed by task (:class:`UnifiedEmbedBuilder` is the one-process, row-by-row
build it falls back to for locating an error);
``save_unified`` writes it as a Hub dataset folder (parquet per task + card), ``load_unified``
reads a folder or Hub repository back (``stream_unified`` as streams, read as trained on) and ``validate_unified_folder`` checks a folder's card,
layout, Parquet schemas and rows before anything else reads it.

Adding a source format
----------------------
Create one module in ``hf_unified_embed/data/adapters/`` (every module there is imported when the
registry is first used) with a generator decorated by :func:`register_source_format`::

    from hf_unified_embed.data.source_formats import AdapterContext, SourceRow, register_source_format

    @register_source_format("raw-text")
    def read_raw_text(files, context: AdapterContext, *, min_chars: int = 20) -> Iterator[SourceRow]:
        \"\"\"One-line description shown by ``source_format_names``/docs.\"\"\"
        for path in files:
            for line, text in ...:
                if len(text) < min_chars:
                    context.skip("too short")   # counted in the build summary
                    continue
                yield f"{path}:{line}", {"query": text, "positives": [...]}

Keyword-only parameters are the format's ``options`` (unknown options are rejected); raise
:class:`SourceFormatError` with ``file``, ``line``, ``field`` and ``expected`` for bad input.
Rows need only ``query`` and the lists they use; the recipe fills ``task``, ``task_type`` and the
instructions. Scores must be normalised to [0, 1] (document the mapping in the docstring).
Other packages can register formats through the ``hf_unified_embed.source_formats`` entry-point group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hf_unified_embed.errors import SourceFormatError
from hf_unified_embed.utils.lazy_exports import lazy_attribute

#: The names below, imported on first use: ``validate`` reads a folder with pyarrow alone and never pays for
#: importing ``datasets`` (a second of start-up).
_EXPORTS = {
    "BuildRecipe": "hf_unified_embed.data.build_recipe",
    "SourceSpec": "hf_unified_embed.data.build_recipe",
    "load_build_recipe": "hf_unified_embed.data.build_recipe",
    "BuildResult": "hf_unified_embed.data.builder",
    "build_unified": "hf_unified_embed.data.builder",
    "build_unified_with_report": "hf_unified_embed.data.builder",
    "load_unified": "hf_unified_embed.data.hub_layout",
    "render_dataset_card": "hf_unified_embed.data.hub_layout",
    "save_unified": "hf_unified_embed.data.hub_layout",
    "stream_unified": "hf_unified_embed.data.hub_layout",
    "task_summary": "hf_unified_embed.data.hub_layout",
    "write_unified": "hf_unified_embed.data.hub_layout",
    "validate_unified_folder": "hf_unified_embed.data.row_check",
    "sample_recipe": "hf_unified_embed.data.bundled_sample",
    "AdapterContext": "hf_unified_embed.data.source_formats",
    "SourceFormat": "hf_unified_embed.data.source_formats",
    "SourceRow": "hf_unified_embed.data.source_formats",
    "get_source_format": "hf_unified_embed.data.source_formats",
    "register_source_format": "hf_unified_embed.data.source_formats",
    "source_format_names": "hf_unified_embed.data.source_formats",
    "UnifiedEmbedBuilder": "hf_unified_embed.data.source_rows",
    "UnifiedSourceConfig": "hf_unified_embed.data.source_rows",
}

if TYPE_CHECKING:
    from hf_unified_embed.data.build_recipe import (
        BuildRecipe,
        SourceSpec,
        load_build_recipe,
    )
    from hf_unified_embed.data.builder import (
        BuildResult,
        build_unified,
        build_unified_with_report,
    )
    from hf_unified_embed.data.bundled_sample import sample_recipe
    from hf_unified_embed.data.hub_layout import (
        load_unified,
        render_dataset_card,
        save_unified,
        stream_unified,
        task_summary,
        write_unified,
    )
    from hf_unified_embed.data.row_check import validate_unified_folder
    from hf_unified_embed.data.source_formats import (
        AdapterContext,
        SourceFormat,
        SourceRow,
        get_source_format,
        register_source_format,
        source_format_names,
    )
    from hf_unified_embed.data.source_rows import (
        UnifiedEmbedBuilder,
        UnifiedSourceConfig,
    )

__all__ = [
    "AdapterContext",
    "BuildRecipe",
    "BuildResult",
    "SourceFormat",
    "SourceFormatError",
    "SourceRow",
    "SourceSpec",
    "UnifiedEmbedBuilder",
    "UnifiedSourceConfig",
    "build_unified",
    "build_unified_with_report",
    "get_source_format",
    "load_build_recipe",
    "load_unified",
    "register_source_format",
    "render_dataset_card",
    "sample_recipe",
    "save_unified",
    "source_format_names",
    "stream_unified",
    "task_summary",
    "validate_unified_folder",
    "write_unified",
]


def __getattr__(name: str) -> Any:
    return lazy_attribute(globals(), _EXPORTS, name)
