"""Any dataset ``datasets.load_dataset`` reads — a Hub id or a local folder — mapped onto the unified schema.

``data_files`` names the dataset: a Hub id (``sentence-transformers/all-nli``) or a local folder in
the Hub layout (parquet/json/csv files, optionally a README with ``configs``); a folder written by
``Dataset.save_to_disk`` is read with ``load_from_disk``. Hub ids and layout folders go through the
same call, ``datasets.load_dataset(path, name=config, split=..., revision=..., streaming=...)``, so a
local copy in the Hub layout behaves like the Hub repository. The column mapping turns each record
into a row: ``query_column`` → ``query``; each of ``positive_columns`` (a cell holds a text or a list
of texts) → ``positives``; ``negative_columns`` likewise → ``negatives``; ``score_column`` mapped from
``score_range`` onto [0, 1] → one score per positive.

The dataset id, config, split and revision are kept in the card's ``source_notes`` and carried into
every folder derived from it. Downloads and Arrow caches go into the build's scratch folder.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import datasets
from datasets.exceptions import DatasetGenerationError, DatasetNotFoundError

from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, SourceRow, register_source_format
from hf_unified_embed.errors import InputError, InputNotFoundError, one_line, shown
from hf_unified_embed.utils.readers import (
    ScoreRange,
    parse_score,
    record_field,
    record_text,
    record_texts,
    score_bounds,
)
from hf_unified_embed.utils.table_blocks import table_reader


def _columns(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _is_saved_dataset(path: Path) -> bool:
    return (path / "dataset_info.json").is_file() and (path / "state.json").is_file()


def _folder_hint(path: Path | str) -> str:
    """What a local folder that is no dataset holds, to show what it is instead (e.g. a model's files)."""
    if not isinstance(path, Path) or not path.is_dir():
        return ""
    names = sorted(entry.name for entry in path.iterdir())
    if (path / "config.json").is_file() or (path / "modules.json").is_file():
        kind = "it looks like a model folder"
    else:
        kind = "it holds"
    listed = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return (
        f" ({kind}: {listed}; a hub source needs a Hub dataset id or a folder of parquet/json/csv data files,"
        " or one written by Dataset.save_to_disk)"
    )


def open_dataset(
    path: Path | str,
    config: str | None,
    split: str,
    *,
    revision: str | None = None,
    streaming: bool = False,
    cache_dir: Path | None = None,
) -> Iterable[dict[str, Any]]:
    """The records of one split: ``load_from_disk`` for a saved dataset, else ``datasets.load_dataset``.

    Raises:
        SourceFormatError: ``path`` is one file: ``load_dataset`` reads a Hub id or a folder, and would say only
            that it finds no data file there.
    """
    where = f"dataset {shown(str(path))}" + (f", config {shown(config)}" if config else "") + f", split {shown(split)}"
    if isinstance(path, Path) and path.is_file():
        raise SourceFormatError(
            "format 'hub' reads a Hub dataset id or a folder of data files (with datasets.load_dataset), not one file",
            file=path,
            field="data_files",
            expected="the folder that holds the file as data_files; or, for this one file, format 'pairs' "
            "(or 'triplets'), which reads a .jsonl/.json/.parquet/.csv/.tsv file with the same column options",
        )
    try:
        if isinstance(path, Path) and _is_saved_dataset(path):
            dataset = datasets.load_from_disk(str(path))
        else:
            dataset = datasets.load_dataset(
                str(path),
                config,
                split=split,
                revision=revision,
                streaming=streaming,
                cache_dir=str(cache_dir) if cache_dir else None,
            )
    except (FileNotFoundError, ConnectionError, DatasetNotFoundError) as error:
        local = "" if isinstance(path, Path) else " (no local folder of that name either)"
        raise InputNotFoundError(f"{where} cannot be loaded{local}: {error}") from error
    except DatasetGenerationError as error:
        # datasets picked a builder by the files it found (JSON for a model folder's config.json) and
        # failed reading them; its own message says only that generation failed, the cause says why.
        cause = error.__cause__ or error.__context__ or error
        raise InputError(
            f"{where}: datasets cannot read it as a dataset: {type(cause).__name__}: {one_line(cause, 300)}"
            f"{_folder_hint(path)}"
        ) from error
    except ValueError as error:  # an unknown config or split, a malformed card or data file
        raise SourceFormatError(
            f"{where}: {error}", field="options", expected="an existing config and split"
        ) from error
    if not isinstance(dataset, (datasets.Dataset, datasets.IterableDataset)):
        raise SourceFormatError(f"{where}: holds several splits {list(dataset)}", expected="one split (source_split)")
    return dataset


@register_source_format("hub", dataset_ids=True)
@table_reader(per_file=True)  # each file (folder, dataset) is read on its own
def read_hub(
    files: Sequence[Path | str],
    context: AdapterContext,
    *,
    config: str | None = None,
    source_split: str | None = None,
    revision: str | None = None,
    streaming: bool = False,
    query_column: str = "anchor",
    positive_columns: str | list[str] = "positive",
    negative_columns: str | list[str] | None = None,
    score_column: str | None = None,
    score_range: ScoreRange = (0.0, 1.0),
) -> Iterator[SourceRow]:
    """A Hub dataset or local folder via ``datasets.load_dataset``; columns mapped to query/positives/negatives/score.

    Options: ``config`` (the dataset's config name), ``source_split`` (default: the recipe's split),
    ``revision`` (a branch, tag or commit; pin it for reproducible data), ``streaming`` (read without
    an Arrow copy), ``query_column``, ``positive_columns``, ``negative_columns`` (one column or a list;
    a cell holds a text or a list of texts), ``score_column`` with ``score_range`` ``[low, high]``
    mapped as ``(s − low) / (high − low)``.
    """
    low, high = score_bounds(score_range)
    positives, negatives = _columns(positive_columns), _columns(negative_columns)
    if not positives:
        raise SourceFormatError("no positive column", field="positive_columns", expected="a column name or a list")
    split = source_split or context.split
    for path in files:
        records = open_dataset(path, config, split, revision=revision, streaming=streaming, cache_dir=context.scratch)
        context.notes.update({"dataset": str(path), "config": config, "source_split": split, "revision": revision})
        where = f"{path}[{config or 'default'}/{split}]"
        for line, record in enumerate(records, start=1):
            row: dict[str, Any] = {
                "query": record_text(record, query_column, file=where, line=line, option="query_column"),
                "positives": [
                    text
                    for c in positives
                    for text in record_texts(record, c, file=where, line=line, option="positive_columns")
                ],
                "negatives": [
                    text
                    for c in negatives
                    for text in record_texts(record, c, file=where, line=line, option="negative_columns")
                ],
            }
            if score_column is not None:
                value = record_field(record, score_column, file=where, line=line, option="score_column")
                score = parse_score(value, file=where, line=line, field=score_column, low=low, high=high)
                row["positive_scores"] = [score] * len(row["positives"])
            yield f"{where}:{line}", row
