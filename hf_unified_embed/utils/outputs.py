"""Outputs appear whole or not at all: :class:`StagedOutput`, the one way the package writes a result.

Every command that writes a folder or a file (``build``, ``curriculum``, ``train``, ``merge``,
``evaluate``, the plots) assembles it in a hidden *staging* folder beside the target and renames it
into place at the end::

    with StagedOutput("outputs/merged", overwrite=False, inputs=[run_a, run_b]) as stage:
        write_everything_into(stage.path)      # becomes outputs/merged
        use_for_temporary_files(stage.scratch)  # removed at the end

Before anything is written it checks the target (a non-empty folder needs ``overwrite``; an input
is never overwritten or written into) and that the parent folder is writable. An error removes the
staging folder; secrets are scrubbed (:func:`hf_unified_embed.utils.redaction.scrub_folder`) before the
rename; an old output is moved aside first and deleted only after the new one is in place.

The staging folder is named ``.<target>.staging-<host>-<pid>-<random>``. A process killed with
``kill -9`` cannot clean up, so the next run for the same target removes every staging folder whose
owner was on this host and is no longer running (and puts back an old output that a crash left
moved aside). Folders of live processes and of other hosts are left alone.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import uuid
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Literal

import psutil

from hf_unified_embed.errors import OutputError, OutputExistsError
from hf_unified_embed.utils.redaction import scrub_folder

_STAGING = re.compile(r"^\.(?P<name>.+)\.staging-(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)-[0-9a-f]{8}$")
_REPLACED = "replaced"  # an old output moved aside inside the staging folder


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname()) or "host"


def _is_empty(path: Path) -> bool:
    return (path.is_dir() and not any(path.iterdir())) or (path.is_file() and path.stat().st_size == 0)


def check_target(target: Path, *, overwrite: bool, kind: Literal["folder", "file"] = "folder") -> None:
    """Refuse a target of the wrong kind, or an existing non-empty one without ``overwrite``."""
    if kind == "folder" and target.exists() and not target.is_dir():
        raise OutputError(f"output {target} exists and is not a folder")
    if kind == "file" and target.is_dir():
        raise OutputError(f"output {target} is a folder; give a file name")
    if target.exists() and not overwrite and not _is_empty(target):
        raise OutputExistsError(
            f"output {target} exists and is not empty; pass --overwrite (overwrite=True) to replace it"
        )


def check_not_inputs(target: Path, inputs: Iterable[str | Path]) -> None:
    """Refuse a target that is an input, lies inside one or contains one: inputs are never overwritten."""
    resolved = target.resolve()
    for entry in inputs:
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
    """The one check of an output before anything is written; the absolute target.

    Every command (and a recipe's preflight, on every process of a launched run) calls it before it
    reads its inputs, and :class:`StagedOutput` calls it again when it is created.
    """
    absolute = Path(target).absolute()
    check_target(absolute, overwrite=overwrite, kind=kind)
    check_not_inputs(absolute, inputs)
    return absolute


def remove_stale_staging(target: Path) -> list[Path]:
    """Remove staging folders for ``target`` left by dead processes of this host; return what was removed."""
    parent, host = target.parent, _host()
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    for candidate in parent.iterdir():
        match = _STAGING.match(candidate.name)
        if not match or match["name"] != target.name or match["host"] != host:
            continue
        pid = int(match["pid"])
        if pid == os.getpid() or psutil.pid_exists(pid):
            continue
        replaced = candidate / _REPLACED
        if replaced.exists() and not target.exists():
            replaced.rename(target)  # the crash came between moving the old output aside and the rename
        shutil.rmtree(candidate, ignore_errors=True)
        removed.append(candidate)
    return removed


class StagedOutput:
    """Build a folder or a file beside ``target`` and move it into place only when it is complete.

    Args:
        target: the folder (or file, with ``kind="file"``) to create.
        overwrite: replace an existing non-empty target.
        inputs: paths read by the job; the target may not be, contain or lie inside any of them.
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
        self.root = self.target.parent / f".{self.target.name}.staging-{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.path = self.root / self.target.name
        self.scratch = self.root / "scratch"

    def __enter__(self) -> StagedOutput:
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            remove_stale_staging(self.target)
            self.root.mkdir()
            self.scratch.mkdir()
            if self.kind == "folder":
                self.path.mkdir()
        except OSError as error:
            raise OutputError(f"cannot write the output {self.target}: {error.strerror} ({error.filename})") from None
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def commit(self) -> None:
        """Scrub secrets, then move the staged result to the target (the old one aside, then deleted)."""
        if not self.path.exists():
            raise OutputError(f"nothing was written for {self.target}")
        scrub_folder(self.path)
        check_target(self.target, overwrite=self.overwrite, kind=self.kind)  # something may have appeared meanwhile
        if self.target.exists():
            self.target.rename(self.root / _REPLACED)
        self.path.rename(self.target)
