"""Argument types of the command line that name what they expect, as ``--num-proc: expected a positive integer``.

argparse reports a ``type=`` function that raises ``ValueError`` as ``invalid _positive_int value: 'two'``
(the function's name) and accepts ``""`` as a path (which then means the current folder). These types
raise :class:`argparse.ArgumentTypeError` with the expected kind and the value given, which argparse prints
after the option's name.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hf_unified_embed.errors import shown


def _expected(kind: str, text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"expected {kind}, got {shown(text)}")


def integer(text: str) -> int:
    """Any whole number."""
    try:
        return int(text)
    except ValueError:
        raise _expected("an integer", text) from None


def positive_int(text: str) -> int:
    """A whole number ≥ 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0  # not a number is refused as one below 1 is
    if value < 1:
        raise _expected("a positive integer", text)
    return value


#: The most processes an option may ask for: more than any machine's CPUs (Linux runs on at most 8,192). A
#: larger number is a typo, refused by the argument check; a number above this machine's CPUs is capped
#: where the processes are started, with a warning.
MAX_PROCESSES = 8192


def process_count(text: str) -> int:
    """A number of processes: a whole number from 1 to :data:`MAX_PROCESSES`."""
    value = positive_int(text)
    if value > MAX_PROCESSES:
        raise _expected(f"at most {MAX_PROCESSES:,} processes (no machine has more CPUs)", text)
    return value


def number(text: str) -> float:
    """Any real number (``1e-5`` included)."""
    try:
        return float(text)
    except ValueError:
        raise _expected("a number", text) from None


def file_size(text: str) -> int:
    """A size as ``datasets`` reads one (``500MB``, ``1GB``, ``50MiB`` or a number of bytes), in bytes."""
    from datasets.utils.py_utils import convert_file_size_to_int

    try:
        size = int(text) if text.strip().isdigit() else convert_file_size_to_int(text.strip())
    except (ValueError, TypeError):
        raise _expected("a size such as 500MB or 1GB", text) from None
    if size < 1:
        raise _expected("a size such as 500MB or 1GB", text)
    return size


def shard_size(text: str) -> int:
    """A Parquet shard's largest size (:func:`file_size`) of at least ``shard_writer.MIN_SHARD_BYTES``."""
    from hf_unified_embed.data.shard_writer import MIN_SHARD_BYTES

    size = file_size(text)
    if size < MIN_SHARD_BYTES:
        raise _expected(f"a size of at least {MIN_SHARD_BYTES // 10**6}MB", text)
    return size


def path(text: str) -> Path:
    """A non-empty path: ``""`` (an unset shell variable) would otherwise mean the current folder."""
    if not text.strip():
        raise _expected("a path (is a shell variable unset?)", text)
    return Path(text)
