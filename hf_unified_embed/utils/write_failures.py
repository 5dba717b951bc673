"""A write that failed because the storage is full: found behind whatever a library raised for it.

A full disk (``ENOSPC``), a file-size limit (``EFBIG``, ``ulimit -f``) or a quota (``EDQUOT``) reaches the
command as an ``OSError`` from Python, as pyarrow's ``OSError`` with the errno only in its text (``[errno
27] File too large``), as safetensors' ``SafetensorError`` (``IoError(Os { code: 27, kind: FileTooLarge
... })``), as torch's ``RuntimeError`` (``PytorchStreamWriter failed writing file ...: file write failed``)
or re-raised by ``datasets`` from a worker, the first as its cause. ``datasets`` also refuses to build into a
cache folder whose disk has less free space than the dataset needs, with an ``OSError`` of no errno (``Not
enough disk space. Needed: ...``): the same full storage, found in the cache folder its builder was writing.
:func:`storage_full` finds each in the chain of causes so that the command can say, in one line, what could
not be written and why (:func:`failure_line`, with a path too long for the system).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from hf_unified_embed.utils.path_limits import path_too_long

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
#: What torch's serializer says instead when it writes through a C++ stream (``torch.save`` to a path): the
#: stream's failure and the writer's check of its position after it. Counted only inside ``torch.save``,
#: where nothing is read.
_TORCH_STREAM_FAILED = ("basic_ios::clear", "unexpected pos")
#: How many links of a chain of causes are followed.
_DEPTH = 32
#: The start of ``datasets``' refusal to build into a cache folder without room (``DatasetBuilder.download_and_prepare``).
_DATASETS_NO_SPACE = "Not enough disk space"


@dataclass(frozen=True)
class StorageFull:
    """A write refused because the storage is full: the errno (``None``: torch's unnamed failure) and the file.

    ``what`` names the place when it is not the command's output (``the datasets cache``) and ``fix`` says
    what frees it.
    """

    errno: int | None
    path: str | None = None
    what: str | None = None
    fix: str | None = None

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


def _datasets_cache(error: BaseException) -> str | None:
    """The cache folder of the ``datasets`` builder that raised ``error``: the ``self`` of a frame it passed."""
    traceback = error.__traceback__
    while traceback is not None:
        builder = traceback.tb_frame.f_locals.get("self")
        folder = getattr(builder, "_cache_dir_root", None)
        if isinstance(folder, str | os.PathLike):
            return os.fspath(folder)
        traceback = traceback.tb_next
    return None


def _in_datasets_cache(error: BaseException, number: int) -> StorageFull | None:
    """A full storage met while a ``datasets`` builder wrote its cache (its refusal for too little room, or a
    write that failed without naming its file), as the full storage of that cache; ``None`` elsewhere."""
    folder = _datasets_cache(error)
    if folder is None:
        return None
    try:
        free = f"{shutil.disk_usage(folder).free:,} bytes free there; "
    except OSError:
        free = ""
    return StorageFull(
        number,
        folder,
        what="the datasets cache",
        fix=f"{free}free space on that disk or point HF_DATASETS_CACHE at a larger one",
    )


def storage_full(error: BaseException) -> StorageFull | None:
    """The full storage behind ``error`` (itself or a cause or context of it), or ``None``.

    A failure that names no file (a ``close()`` or ``flush()``, pyarrow's text, datasets' refusal) met while a
    ``datasets`` builder wrote is the full storage of that builder's cache folder.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < _DEPTH:
        seen.add(id(current))
        found = _found(current)
        if found is not None:
            if found.path is None:
                return _in_datasets_cache(current, found.errno or errno.ENOSPC) or found
            return found
        current = current.__cause__ or current.__context__
    return None


def _found(error: BaseException) -> StorageFull | None:
    """The full storage ``error`` itself reports, in whichever library's words, or ``None``."""
    if isinstance(error, OSError) and error.errno in FULL_ERRNOS:
        return StorageFull(error.errno, error.filename)
    if isinstance(error, OSError) and error.errno is None and str(error).startswith(_DATASETS_NO_SPACE):
        return StorageFull(errno.ENOSPC, what="the datasets cache")
    text = str(error)
    number = _errno_in_text(text)
    if number is not None:
        return StorageFull(number, getattr(error, "filename", None))
    if _TORCH_WRITE_FAILED in text or (any(part in text for part in _TORCH_STREAM_FAILED) and _in_torch_save(error)):
        return StorageFull(None)
    return None


def _in_torch_save(error: BaseException) -> bool:
    """Whether ``error`` was raised inside ``torch.save`` (a frame of ``torch/serialization.py``'s save)."""
    traceback = error.__traceback__
    while traceback is not None:
        code = traceback.tb_frame.f_code
        if code.co_name in ("save", "_save") and Path(code.co_filename).match("torch/serialization.py"):
            return True
        traceback = traceback.tb_next
    return False


def failure_line(error: BaseException) -> str | None:
    """The one line (after ``error: ``) for a storage that filled or a path too long behind ``error``, or ``None``
    when it is neither (a bug, which keeps its traceback)."""
    full = storage_full(error)
    if full is not None:
        where = f" {full.what}" if full.what else ""
        where += f" ({full.path})" if full.path else ""
        fix = f"; {full.fix}" if full.fix else ""
        return f"cannot write{where}: {full.cause}{fix}; nothing more was written"
    too_long = path_too_long(error)
    if too_long is not None:
        return too_long.describe()
    return None
