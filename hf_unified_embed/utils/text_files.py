"""Opening a user's text file as UTF-8, with a byte that is not UTF-8 reported at its line and byte offset."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from hf_unified_embed.errors import SourceFormatError


def first_undecodable_byte(
    path: Path, encoding: str = "utf-8", *, chunk_size: int = 1 << 20
) -> tuple[int, int, int] | None:
    """``(byte_offset, line, byte)`` of the first byte of ``path`` that is not valid ``encoding``; ``None`` if all are.

    Called only after a decoding error, so reading the file a second time costs nothing on valid input.
    """
    decoder = codecs.getincrementaldecoder(encoding)()
    offset = newlines = 0
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(chunk_size)
            # The decoder keeps an incomplete multi-byte sequence from the previous chunk (never a newline).
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as error:
                data = error.object
                line = newlines + data[: error.start].count(b"\n") + 1
                return offset - pending + error.start, line, data[error.start]
            if not chunk:
                return None
            offset += len(chunk)
            newlines += chunk.count(b"\n")


def decoding_error(path: Path, encoding: str) -> SourceFormatError:
    """A :class:`SourceFormatError` naming the file, line, byte offset and codec of the first bad byte."""
    codec = codecs.lookup(encoding).name
    found = first_undecodable_byte(path, codec)
    if found is None:  # the file changed since; say what we know
        return SourceFormatError(f"cannot be decoded as {codec}", file=path, expected=f"{codec} text")
    offset, line, byte = found
    return SourceFormatError(
        f"byte 0x{byte:02x} at byte offset {offset} cannot be decoded as {codec}",
        file=path,
        line=line,
        expected=f"{codec} text; re-encode it, e.g. iconv -f latin1 -t utf-8",
    )


@contextmanager
def open_text(path: Path, *, newline: str | None = None) -> Iterator[TextIO]:
    """Open a UTF-8 text file (a byte-order mark is dropped); a byte that is not UTF-8 becomes a located error."""
    try:
        with open(path, encoding="utf-8-sig", newline=newline) as handle:
            yield handle
    except UnicodeDecodeError as error:
        raise decoding_error(path, error.encoding) from error
