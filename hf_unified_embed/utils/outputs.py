"""Outputs appear whole or not at all: :class:`StagedOutput`, the one way the package writes a result.

Every command that writes a folder or a file (``build``, ``curriculum``, ``train``, ``merge``,
``evaluate``, the plots) assembles it in a hidden *staging* folder beside the target and renames it
into place at the end::

    with StagedOutput("outputs/merged", overwrite=False, inputs=[run_a, run_b]) as stage:
        write_everything_into(stage.path)      # becomes outputs/merged
        use_for_temporary_files(stage.scratch)  # removed at the end

Before anything is written it checks the target with :func:`check_output`, the one rule every
command's output goes through (see "The tool deletes only what it wrote" below), and that the parent
folder is writable. An error or an interruption (Ctrl-C) removes the staging folder; secrets are
scrubbed (:func:`hf_unified_embed.utils.redaction.scrub_folder`) before the rename; an old output is
moved aside first and deleted only after the new one is in place.

The tool deletes only what it wrote (the marker and manifest by which it knows its own outputs:
:mod:`hf_unified_embed.utils.output_manifest`). :func:`check_output` refuses, with an
:class:`~hf_unified_embed.errors.OutputError` naming the path and why:

* an empty path, ``.``, the current folder or any folder above it, the home folder (or above it), ``/``;
* an input (file or folder) of the job, a folder holding one, or a path inside one;
* a target of the wrong kind (a file where a folder is written, or the other way round);
* an existing non-empty target without ``overwrite`` (:class:`~hf_unified_embed.errors.OutputExistsError`),
  and with ``overwrite`` one this tool did not write: only a folder whose marker file :data:`MARKER`
  (every output folder gets one) lists every file in it as the tool wrote it (a manifest written when
  the folder is committed; anything else in it — a user's notes, a changed file — is named in the
  refusal), a JSON file with the top-level key ``"written_by": "hf-unified-embed"`` (:data:`JSON_MARKER`;
  evaluation results carry it) or with all the keys of a curriculum plan, or a file that a folder's
  manifest lists as it is may be replaced. A file the tool adds to one of its folders later (a card, a
  plot) joins that folder's manifest. The manifest knows a file by its size and, up to
  :data:`HASHED_BYTES`, the SHA-256 of its bytes, or, larger, its modification time in nanoseconds: an
  edit that keeps the size (a card's typo fixed) is an edit too.

The staging folder is named ``.<target>.staging-<host>-<pid>-<random>`` (a target name longer than
:data:`~hf_unified_embed.utils.naming.BESIDE_NAME_BYTES` bytes shortened with a hash, so that every name the
file system allows can be an output's). A process killed with
``kill -9`` cannot clean up, so the next run for the same target removes every staging folder whose
owner was on this host and is no longer running (and puts back an old output that a crash left
moved aside). Folders of live processes and of other hosts are left alone, and so is a staging folder
whose finished result could not be moved into place (a ``KEPT`` file in it): the error named it, and the
result in it is the user's to move.

One writer per output: from its check to its end, a :class:`StagedOutput` holds the output's lock
(:class:`~hf_unified_embed.utils.output_lock.OutputLock`, a hidden ``.<target>.lock`` beside it), so a
second command on the same output stops at once, naming the first.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import stat
import uuid
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Literal

import psutil

from hf_unified_embed.errors import HfUnifiedEmbedError, OutputError, OutputExistsError, shown
from hf_unified_embed.utils.naming import beside_name
from hf_unified_embed.utils.output_lock import OutputLock
from hf_unified_embed.utils.output_manifest import FOREIGN, mark_output, not_written_by_tool, record_written
from hf_unified_embed.utils.output_manifest import HASHED_BYTES as HASHED_BYTES  # the public names stay here too
from hf_unified_embed.utils.output_manifest import JSON_MARKER as JSON_MARKER
from hf_unified_embed.utils.output_manifest import MARKER as MARKER
from hf_unified_embed.utils.output_manifest import written_by_tool as written_by_tool
from hf_unified_embed.utils.path_limits import check_name_lengths
from hf_unified_embed.utils.processes import stop_seen
from hf_unified_embed.utils.redaction import scrub_folder
from hf_unified_embed.utils.write_failures import StorageFull, storage_full

_STAGING = re.compile(r"^\.(?P<name>.+)\.staging-(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)-[0-9a-f]{8}$")
_REPLACED = "replaced"  # an old output moved aside inside the staging folder
_KEPT = "KEPT"  # in a staging folder whose finished result could not be moved into place: the next run keeps it


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname()) or "host"


def _staging_name(name: str) -> str:
    """The name of a staging folder of this process for an output named ``name`` (see :data:`_STAGING`)."""
    return f".{beside_name(name)}.staging-{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _is_empty(path: Path) -> bool:
    return (path.is_dir() and not any(path.iterdir())) or (path.is_file() and path.stat().st_size == 0)


def _protected(absolute: Path) -> str | None:
    """Why ``absolute`` may never be an output (the current folder, a folder above it, home, ``/``), or ``None``."""
    resolved = absolute.resolve()
    cwd = Path.cwd().resolve()
    if resolved == cwd:
        return "is the current folder"
    if resolved in cwd.parents:
        return "is the root folder" if resolved == Path(resolved.anchor) else "holds the current folder"
    home = Path.home().resolve()
    if resolved == home:
        return "is the home folder"
    if resolved in home.parents:
        return "is the root folder" if resolved == Path(resolved.anchor) else "holds the home folder"
    if resolved == Path(resolved.anchor):
        return "is the root folder"
    return None


def check_location(target: str | Path, *, inputs: Iterable[str | Path] = ()) -> Path:
    """The part of :func:`check_output` that does not depend on what exists there: refuse an empty path, the
    current folder and the folders above it, the home folder, ``/`` and the inputs; return the absolute path."""
    if not str(target).strip():
        raise OutputError(
            f"output path {shown(str(target))} is empty; give the folder or file to write (is a shell variable unset?)"
        )
    absolute = Path(target).absolute()
    why = _protected(absolute)
    if why is not None:
        raise OutputError(f"output {target} {why}; give a new folder or file to write, the tool never replaces it")
    # The staging folder's path is the output's plus its hidden name: both must fit the file system.
    check_name_lengths(
        absolute, staging_bytes=len(_staging_name(absolute.name).encode("utf-8", "surrogateescape")) + 1
    )
    check_not_inputs(absolute, inputs)
    return absolute


def _check_kind(target: Path, kind: Literal["folder", "file"]) -> None:
    if target.is_symlink():
        # Replacing a link would replace the link, not what it points at (an input, a folder of the user's).
        where = os.readlink(target)
        state = "" if target.exists() else ", which does not exist"
        raise OutputError(f"output {target} is a symbolic link (to {where}{state}); give a real path to write")
    if kind == "folder" and target.exists() and not target.is_dir():
        raise OutputError(f"output {target} exists and is not a folder")
    if kind == "file" and target.is_dir():
        raise OutputError(f"output {target} is a folder; give a file name")


def check_target(target: Path, *, overwrite: bool, kind: Literal["folder", "file"] = "folder") -> None:
    """Refuse a target of the wrong kind, an existing non-empty one without ``overwrite``, and one this tool
    did not write wholly (:func:`not_written_by_tool`), which ``overwrite`` does not replace either."""
    _check_kind(target, kind)
    if not target.exists() or _is_empty(target):
        return
    why = not_written_by_tool(target)
    if why is not None and why.startswith(FOREIGN):  # --overwrite or not: the user's files are never replaced
        raise OutputError(f"output {target} {why}; move them or choose another output")
    if why is None:
        if overwrite:
            return
        raise OutputExistsError(
            f"output {target} exists and is not empty; pass --overwrite (overwrite=True) to replace it"
        )
    if not overwrite:
        raise OutputExistsError(
            f"output {target} exists and is not empty, and was not written by hf-unified-embed ({why}), so "
            "--overwrite would not replace it either: remove it yourself or choose another path"
        )
    raise OutputError(
        f"output {target} exists and was not written by hf-unified-embed ({why}); --overwrite replaces "
        "only the tool's own outputs: remove it yourself or choose another path"
    )


def check_not_inputs(target: Path, inputs: Iterable[str | Path]) -> None:
    """Refuse a target that is an input, lies inside one or contains one: inputs are never overwritten."""
    resolved = target.resolve()
    for entry in inputs:
        if entry is None or not str(entry):
            continue
        source = Path(entry).resolve()
        if resolved == source or source in resolved.parents or resolved in source.parents:
            raise OutputError(f"output {target} overlaps the input {entry}; inputs are never overwritten")


def check_output(
    target: str | Path,
    *,
    overwrite: bool,
    inputs: Iterable[str | Path] = (),
    kind: Literal["folder", "file"] = "folder",
) -> Path:
    """The one rule for an output, checked before anything is written; returns the absolute target.

    Refuses (:class:`~hf_unified_embed.errors.OutputError`, exit code 2 on the command line) an empty path,
    ``.``, the current folder or a folder above it, the home folder, ``/``; any of ``inputs``, a folder
    holding one or a path inside one; a target of the wrong ``kind``; an existing non-empty target without
    ``overwrite`` (:class:`~hf_unified_embed.errors.OutputExistsError`) and, with it, one the tool did not
    write (:func:`written_by_tool`). Every command (and a recipe's preflight, on every process of a launched
    run) calls it before it reads its inputs, and :class:`StagedOutput` calls it again when it is created.
    """
    absolute = check_location(target)
    _check_kind(absolute, kind)
    check_not_inputs(absolute, inputs)
    check_target(absolute, overwrite=overwrite, kind=kind)
    return absolute


def remove_stale_staging(target: Path) -> list[Path]:
    """Remove staging folders for ``target`` left by dead processes of this host; return what was removed."""
    parent, host = target.parent, _host()
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    for candidate in parent.iterdir():
        match = _STAGING.match(candidate.name)
        if not match or match["name"] != beside_name(target.name) or match["host"] != host:
            continue
        pid = int(match["pid"])
        if pid == os.getpid() or psutil.pid_exists(pid) or (candidate / _KEPT).exists():
            continue
        replaced = candidate / _REPLACED
        if replaced.exists() and not target.exists():
            replaced.rename(target)  # the crash came between moving the old output aside and the rename
        shutil.rmtree(candidate, ignore_errors=True)
        removed.append(candidate)
    return removed


def _follow_umask(path: Path) -> None:
    """Give files written private (``0600``: transformers writes weights through a temporary file) the mode
    every other file of the output gets from the umask, so that whoever may read the folder may read them."""
    mask = os.umask(0)
    os.umask(mask)
    mode = 0o666 & ~mask
    for file in [path] if path.is_file() else path.rglob("*"):
        if file.is_file() and not file.is_symlink() and stat.S_IMODE(file.stat().st_mode) == 0o600 != mode:
            file.chmod(mode)


class StagedOutput:
    """Build a folder or a file beside ``target`` and move it into place only when it is complete.

    Args:
        target: the folder (or file, with ``kind="file"``) to create.
        overwrite: replace an existing non-empty target that this tool wrote (:func:`written_by_tool`).
        inputs: paths read by the job; the target may not be, contain or lie inside any of them.

    A folder output gets the :data:`MARKER` file when it is committed.
        kind: ``"folder"`` (``stage.path`` is a folder to fill) or ``"file"`` (a file path to write).

    Attributes:
        path: where to write; becomes ``target`` on success.
        scratch: a folder for temporary files, removed with the staging folder.
    """

    def __init__(
        self,
        target: str | Path,
        *,
        overwrite: bool = False,
        inputs: Iterable[str | Path] = (),
        kind: Literal["folder", "file"] = "folder",
    ) -> None:
        self.target = check_output(target, overwrite=overwrite, inputs=inputs, kind=kind)
        self.overwrite = overwrite
        self.kind = kind
        self.root = self.target.parent / _staging_name(self.target.name)
        #: Said after a full storage's error, when something of the work outlives the output (a checkpoint).
        self.kept_note: str | None = None
        self.path = self.root / self.target.name
        self.scratch = self.root / "scratch"

    def __enter__(self) -> StagedOutput:
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise OutputError(f"cannot write the output {self.target}: {error.strerror} ({error.filename})") from None
        # One writer per output, from here to the end: a second command stops now, not after its work.
        self._lock = OutputLock(self.target).__enter__()
        try:
            check_target(self.target, overwrite=self.overwrite, kind=self.kind)  # the holder may have written it
            remove_stale_staging(self.target)
            self.root.mkdir()
            self.scratch.mkdir()
            if self.kind == "folder":
                self.path.mkdir()
        except OSError as error:
            self._lock.release()
            raise OutputError(f"cannot write the output {self.target}: {error.strerror} ({error.filename})") from None
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, KeyboardInterrupt):
            stop_seen()  # the stop is ending the command: no need to raise it again
        full = None if exc is None or isinstance(exc, HfUnifiedEmbedError) else storage_full(exc)
        try:
            if exc_type is None:
                try:
                    self.commit()
                except HfUnifiedEmbedError:
                    raise
                except Exception as error:
                    full = storage_full(error)
                    if full is None:
                        raise
        finally:
            if not (self.root / _KEPT).exists():
                shutil.rmtree(self.root, ignore_errors=True)
            self._lock.release()
        if full is not None:
            raise self._full_error(full) from None

    def _full_error(self, full: StorageFull) -> OutputError:
        """The one line for a storage that filled while the output was written: the file, why, what is left."""
        kept = f"; {self.kept_note}" if self.kept_note else ""
        if (full.path is None and full.what is not None) or (
            full.path is not None and not self._ours(Path(full.path))
        ):
            # Another place filled (the datasets cache, the trainer's checkpoints): it is named, not the output.
            where = " ".join(part for part in (full.what, full.path) if part)
            fix = f"; {full.fix}" if full.fix else ""
            message = f"cannot write {where}: {full.cause}{fix}; nothing of the output {self.target} was kept{kept}"
        else:
            where = f" ({full.path})" if full.path else ""
            message = f"cannot write the output {self.target}: {full.cause}{where}; nothing of it was kept{kept}"
        error = OutputError(message)
        error.errno = full.errno if full.errno is not None else errno.EIO
        return error

    def _ours(self, path: Path) -> bool:
        """Whether ``path`` is the output, its staging folder or a file of either (or beside it: its lock)."""
        path = path.absolute()
        return path.parent == self.target.parent or any(
            place == path or place in path.parents for place in (self.root, self.target)
        )

    def commit(self) -> None:
        """Scrub secrets, then move the staged result to the target (the old one aside, then deleted).

        When the final move fails, the finished result stays in the staging folder, which the
        :class:`~hf_unified_embed.errors.OutputError` names: nothing finished is thrown away.
        """
        if not self.path.exists():
            raise OutputError(f"nothing was written for {self.target}")
        scrub_folder(self.path)
        _follow_umask(self.path)
        if self.kind == "folder":
            mark_output(self.path)  # a later --overwrite may replace this folder, and only such folders
        check_target(self.target, overwrite=self.overwrite, kind=self.kind)  # something may have appeared meanwhile
        try:
            if self.target.exists():
                self.target.rename(self.root / _REPLACED)
            self.path.rename(self.target)
        except OSError as error:
            (self.root / _KEPT).write_text(f"{self.target}\n", encoding="utf-8")  # not a stale stage: never removed
            raise OutputError(
                f"cannot move the finished output into {self.target}: {error.strerror}; it is kept at {self.path}"
            ) from None
        if self.kind == "file":
            record_written(self.target)  # a file the tool adds to one of its folders stays the tool's
