"""A write that failed because the storage is full: found behind whatever a library raised for it.

A full disk (``ENOSPC``), a file-size limit (``EFBIG``, ``ulimit -f``) or a quota (``EDQUOT``) reaches the
command as an ``OSError`` from Python, as pyarrow's ``OSError`` with the errno only in its text (``[errno
27] File too large``), as safetensors' ``SafetensorError`` (``IoError(Os { code: 27, kind: FileTooLarge
... })``), as torch's ``RuntimeError`` (``PytorchStreamWriter failed writing file ...: file write failed``)
or re-raised by ``datasets`` from a worker, the first as its cause. :func:`storage_full` finds it in the
chain of causes so that the command can say, in one line, what could not be written and why.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass

#: Errnos of a storage that cannot take more bytes.
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
#: An errno in a library's message: Python's and pyarrow's ``[Errno 28]``, Rust's ``os error 28`` and
#: ``Os { code: 28``.
_ERRNO_IN_TEXT = re.compile(r"\[errno (\d+)\]|os error (\d+)|Os \{ code: (\d+)", re.IGNORECASE)
#: Rust's ``io::ErrorKind`` of a full storage (safetensors, tokenizers).
_RUST_KINDS = {"StorageFull": errno.ENOSPC, "FileTooLarge": errno.EFBIG, "FilesystemQuotaExceeded": errno.EDQUOT}
#: torch's serializer reports a failed write without its errno; a full storage is what fails a write of a
#: file it could create.
_TORCH_WRITE_FAILED = "file write failed"
#: How many links of a chain of causes are followed.
_DEPTH = 32


@dataclass(frozen=True)
class StorageFull:
    """A write refused because the storage is full: the errno (``None``: torch's unnamed failure) and the file."""

    errno: int | None
    path: str | None = None

    @property
    def cause(self) -> str:
        """The cause in words (``No space left on device``, ``File too large``)."""
        if self.errno is None:
            return "the write failed (is the disk full?)"
        return os.strerror(self.errno)


def _errno_in_text(text: str) -> int | None:
    for match in _ERRNO_IN_TEXT.finditer(text):
        number = int(next(group for group in match.groups() if group))
        if number in FULL_ERRNOS:
            return number
    for kind, number in _RUST_KINDS.items():
        if kind in text:
            return number
    for number in FULL_ERRNOS:
        if os.strerror(number) in text:
            return number
    return None


def storage_full(error: BaseException) -> StorageFull | None:
    """The full storage behind ``error`` (itself or a cause or context of it), or ``None``."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < _DEPTH:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in FULL_ERRNOS:
            return StorageFull(current.errno, current.filename)
        text = str(current)
        number = _errno_in_text(text)
        if number is not None:
            return StorageFull(number, getattr(current, "filename", None))
        if _TORCH_WRITE_FAILED in text:
            return StorageFull(None)
        current = current.__cause__ or current.__context__
    return None
