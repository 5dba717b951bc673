"""Reading the files users give: delimited text, JSON / JSON lines, Parquet, with errors that name file, line and field.

Each yields one record at a time with its 1-based line (or row) number, so memory does not grow
with the file and errors can point at the exact place. The readers of each kind live in their own module
(:mod:`~hf_unified_embed.utils.delimited_text`, :mod:`~hf_unified_embed.utils.json_records`,
:mod:`~hf_unified_embed.utils.text_files`); this one chooses among them by a file's suffix and reads the
fields of a record (a dotted path into nested JSON objects included) and its scores.

:mod:`~hf_unified_embed.utils.table_blocks` reads the same files a block at a time with pyarrow for the
adapters' vectorised paths, and falls back on these readers for a block it cannot convert exactly.
"""

from __future__ import annotations

import glob
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from hf_unified_embed.errors import SourceFormatError, shown
from hf_unified_embed.utils.delimited_text import (
    CSV_SUFFIXES,
    DecimalMark,
    Delimiter,
    OptionalDelimiter,
    Quoting,
    check_delimiter,
    column_positions,
    decimal_hint,
    delimited_records,
    delimited_rows,
    file_delimiter,
    iter_delimited,
    missing_column_error,
    read_header,
    text_number,
)
from hf_unified_embed.utils.json_records import (
    JSON_SUFFIXES,
    MISSING,
    field_at,
    is_json_array,
    is_json_lines,
    iter_json_records,
    json_line_records,
    json_objects,
    path_problem,
)
from hf_unified_embed.utils.locations import looks_local
from hf_unified_embed.utils.text_files import decoding_error, first_undecodable_byte, open_text

# The names other modules read from here: one import for every reader of users' files.
__all__ = [
    "CSV_SUFFIXES",
    "JSON_SUFFIXES",
    "PARQUET_BATCH",
    "PARQUET_SUFFIXES",
    "DecimalMark",
    "Delimiter",
    "OptionalDelimiter",
    "Quoting",
    "ScoreRange",
    "check_delimiter",
    "column_positions",
    "decoding_error",
    "delimited_rows",
    "file_delimiter",
    "first_undecodable_byte",
    "is_json_array",
    "is_json_lines",
    "iter_delimited",
    "iter_json_records",
    "iter_parquet_batches",
    "iter_parquet_records",
    "iter_table_records",
    "json_line_records",
    "json_objects",
    "local_files",
    "missing_column_error",
    "open_parquet",
    "open_text",
    "parse_score",
    "read_header",
    "record_field",
    "record_text",
    "record_texts",
    "require_text",
    "resolve_files",
    "resolve_inputs",
    "score_bounds",
]

PARQUET_SUFFIXES = (".parquet",)


def resolve_files(data_files: str | Path | Sequence[str | Path], base_dir: Path | None = None) -> list[Path]:
    """Expand globs and relative paths (against ``base_dir``); every pattern must match something."""
    patterns = [data_files] if isinstance(data_files, (str, Path)) else list(data_files)
    if not patterns:
        raise SourceFormatError("no input files given", field="data_files", expected="a path, glob or list of them")
    files: list[Path] = []
    for pattern in patterns:
        path = Path(pattern).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        matches = sorted(glob.glob(str(path))) if glob.has_magic(str(path)) else ([str(path)] if path.exists() else [])
        if not matches:
            raise SourceFormatError(
                "file not found", file=path, field="data_files", expected="an existing path or glob"
            )
        files.extend(Path(match) for match in matches)
    return files


def resolve_inputs(
    data_files: str | Path | Sequence[str | Path], base_dir: Path | None = None, *, dataset_ids: bool = False
) -> list[Path | str]:
    """Like :func:`resolve_files`; with ``dataset_ids`` a name that does not look local stays a Hub id (a string)."""
    patterns = [data_files] if isinstance(data_files, (str, Path)) else list(data_files)
    if not dataset_ids:
        return list(resolve_files(patterns, base_dir))
    inputs: list[Path | str] = []
    for pattern in patterns:
        if looks_local(pattern, base_dir):
            inputs.extend(resolve_files(pattern, base_dir))
        else:
            inputs.append(str(pattern))
    return inputs


def local_files(inputs: Sequence[Path | str]) -> list[Path]:
    """The local paths among resolved inputs (Hub ids left out)."""
    return [entry for entry in inputs if isinstance(entry, Path)]


def iter_table_records(
    path: Path,
    *,
    delimiter: str | None = None,
    columns: Mapping[str, str | None] | None = None,
    batch_size: int = 4_096,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Dict records of a JSON-lines/JSON, delimited text (header row) or Parquet file, chosen by suffix.

    Args:
        path: the file.
        delimiter: the ``delimiter`` option (see :func:`file_delimiter`); ``None``: from the suffix.
        columns: the columns the caller reads, each with the option that names it (``{column: option}``,
            ``None`` where no option does): a delimited file's header row must name each (an error names the
            header, the delimiter and the option).
        batch_size: rows per Parquet batch.

    Raises:
        SourceFormatError: a file that cannot be read as its kind, located; a delimited record whose
            field count differs from the header row's (a wrong delimiter, an unquoted delimiter in a text).
    """
    separator = file_delimiter(path, delimiter)
    if path.suffix.lower() in JSON_SUFFIXES:
        yield from json_objects(path, iter_json_records(path))
    elif separator is None:
        yield from iter_parquet_records(path, batch_size=batch_size)
    else:
        yield from delimited_records(path, separator, columns or {})


def open_parquet(path: str | Path) -> pq.ParquetFile:
    """A Parquet file read as a stream (1 MB reads), not a row group at a time: memory stays small however
    large the file's row groups are."""
    return pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)


#: Rows per Parquet batch, the same as :func:`iter_parquet_records` reads.
PARQUET_BATCH = 4_096


def iter_parquet_batches(
    path: Path, *, columns: Sequence[str] | None = None, batch_size: int = PARQUET_BATCH
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(rows before it, batch)`` for the batches of a Parquet file, read as :func:`iter_parquet_records` reads
    it; a truncated or corrupt file is the same error, naming the rows read before it."""
    number = 0
    try:
        for batch in open_parquet(path).iter_batches(batch_size=batch_size, columns=columns):
            yield number, batch
            number += batch.num_rows
    except (pa.ArrowException, OSError) as error:
        raise SourceFormatError(
            f"cannot be read as Parquet after {number} rows ({error})",
            file=path,
            expected="a complete Parquet file",
        ) from error


def iter_parquet_records(path: Path, *, batch_size: int = PARQUET_BATCH) -> Iterator[tuple[int, dict[str, Any]]]:
    """Dict records of a Parquet file with 1-based row numbers; a truncated or corrupt file names itself."""
    for rows_before, batch in iter_parquet_batches(path, batch_size=batch_size):
        yield from enumerate(batch.to_pylist(), start=rows_before + 1)


def record_field(
    record: dict[str, Any], column: str, *, file: str | Path, line: int, option: str | None = None
) -> Any:
    """``record[column]``, or the value at a dotted path into nested objects (``query.text``, :func:`field_at`);
    a missing one is an error naming the record's columns (or where the path stops) and ``options.<option>``,
    the option that names the column."""
    value = field_at(record, column)
    if value is MISSING:
        error = missing_column_error(column, list(record), file=file, line=line, option=option)
        stops = path_problem(record, column)
        if stops is not None:
            fix = f"options.{option} set to a path of the record" if option else "a path of the record"
            error = SourceFormatError(
                f"no value at this path: {stops}", file=file, line=line, field=column, expected=fix
            )
        raise error
    return value


def record_texts(
    record: dict[str, Any], column: str, *, file: str | Path, line: int, option: str | None = None
) -> list[str]:
    """The non-empty texts of ``record[column]``, a cell holding one text or a list of texts."""
    value = record_field(record, column, file=file, line=line, option=option)
    values = value if isinstance(value, list) else [value]
    return [require_text(text, file=file, line=line, field=column) for text in values]


def record_text(record: dict[str, Any], column: str, *, file: str | Path, line: int, option: str | None = None) -> str:
    """The non-empty text of ``record[column]``, stripped."""
    value = record_field(record, column, file=file, line=line, option=option)
    return require_text(value, file=file, line=line, field=column)


def require_text(value: Any, *, file: str | Path, line: int, field: str) -> str:
    """A non-empty string with surrounding whitespace removed."""
    if not isinstance(value, str) or not value.strip():
        raise SourceFormatError(
            f"got {shown(value)}", file=file, line=line, field=field, expected="a non-empty string"
        )
    return value.strip()


def _ordered(score_range: tuple[float, float]) -> tuple[float, float]:
    if not score_range[1] > score_range[0]:
        raise PydanticCustomError("score_range", "input should be [low, high] with high > low")
    return score_range


#: A source format's ``score_range`` option ``[low, high]``: the recipe checks ``high > low`` when it is loaded,
#: so the error names the recipe, the source and the option.
ScoreRange = Annotated[tuple[float, float], AfterValidator(_ordered)]


def score_bounds(score_range: Sequence[float]) -> tuple[float, float]:
    """``(low, high)`` of a ``score_range`` option; ``high > low`` or an error naming the option (for a caller
    that passes options without a recipe)."""
    low, high = float(score_range[0]), float(score_range[1])
    if not high > low:
        raise SourceFormatError(
            f"got {shown(score_range)}",
            field="score_range",
            expected="options.score_range [low, high] with high > low",
        )
    return low, high


def parse_score(
    value: Any,
    *,
    file: str | Path,
    line: int,
    field: str,
    low: float,
    high: float,
    fix: str | None = "score_range",
    decimal: DecimalMark | None = None,
) -> float:
    """Map a raw score in ``[low, high]`` linearly onto [0, 1]; anything else is an error.

    ``fix`` says how to change the range in the error: the name of the option that sets it (default
    ``score_range``, shown as ``options.score_range``) or, for a format whose range is fixed, a sentence.
    ``decimal`` is the decimal mark of a score written as text (the format's ``decimal`` option; ``None``
    where the format has none and reads ``.``); a text with another mark is an error that names the option.
    """
    if isinstance(value, str):
        number = text_number(value, decimal)
        score = math.nan if number is None else number
    else:
        try:
            score = float(value)
        except (TypeError, ValueError):
            score = math.nan
    if not math.isfinite(score) or not low <= score <= high:
        marks = decimal_hint(value, decimal) if math.isnan(score) else ""
        if marks:
            how = marks
        elif fix is None:
            how = ""
        elif fix.isidentifier():
            how = f"; set options.{fix} if the file's scores use another range"
        else:
            how = f"; {fix}"
        raise SourceFormatError(
            f"got {shown(value)}",
            file=file,
            line=line,
            field=field,
            expected=f"a number in [{low:g}, {high:g}]{how}",
        )
    return (score - low) / (high - low)


# Block-wise reading with pyarrow, for the adapters' vectorised paths.
