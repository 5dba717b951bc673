"""One writer per output: :class:`OutputLock`, held by a command for its output for its whole run.

Without it two commands on one output both pass the output check, both work, and the slower one
finds the target taken only when it moves its result into place — after training, so the trained
model was thrown away. With it the second command stops at once (exit code 2) and names the holder.

The lock is ``filelock``'s (the package the Hugging Face libraries already use for their caches): an
``flock`` on a hidden file beside the target, ``.<name>.lock``, which the kernel releases when its
process ends, so the lock of a process killed with ``kill -9`` is simply taken over. The holder writes
its pid, host, command line and start time into the file; the file is removed when the lock is released
(filelock's contenders retry on an unlinked file, so removing it keeps mutual exclusion).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
from pathlib import Path
from types import TracebackType

import filelock
import psutil

from hf_unified_embed.errors import OutputError
from hf_unified_embed.utils.naming import beside_name

#: How long a contender waits for the holder of a lock to write its name into the lock file.
_NAMING_WAIT_S = 2.0


def lock_path(target: Path) -> Path:
    """The lock file of ``target``: hidden, beside it (a long name shortened: :func:`beside_name`)."""
    return target.parent / f".{beside_name(target.name)}.lock"


def _cannot_create(path: Path) -> OSError | None:
    """Why the lock file cannot be created or opened (filelock reports it as a held lock), or ``None``."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
    except OSError as error:
        return error
    return None


def holder_record() -> dict[str, object]:
    """What the holder of a lock writes into its lock file: pid, host, command line and start time."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python",
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def _describe(path: Path) -> str | None:
    """The live holder as its lock file names it, or ``None`` while the file does not say yet."""
    try:
        holder = json.loads(path.read_text(encoding="utf-8")[:4096])
        if holder["host"] == socket.gethostname() and not psutil.pid_exists(int(holder["pid"])):
            return None  # a dead process's name, left in the file: the new holder has not written its own yet
        command = str(holder["command"])
        command = command if len(command) <= 120 else f"{command[:120]}…"
        return f"pid {holder['pid']} on {holder['host']}, `{command}`, started {holder['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _holder_of(path: Path) -> str:
    """The holder of a held lock. It writes its name just after taking the lock, so a contender that comes in
    between (measured: two commands started together) waits a moment for it rather than naming no one."""
    deadline = time.monotonic() + _NAMING_WAIT_S
    while (holder := _describe(path)) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return holder or "another process, which has not said which"


class OutputLock:
    """Hold the lock of ``target`` (a context manager); a held lock is an :class:`OutputError`.

    Args:
        target: the output folder or file (absolute).
    """

    def __init__(self, target: Path) -> None:
        self.target = target
        self.path = lock_path(target)
        self._lock = filelock.FileLock(self.path, timeout=0, is_singleton=False)

    def __enter__(self) -> OutputLock:
        try:
            self._lock.acquire()
        except filelock.Timeout:
            failure = _cannot_create(self.path)  # a folder nothing can be written in (/proc), not a holder
            if failure is not None:
                raise OutputError(f"cannot write the output {self.target}: {failure.strerror} ({self.path})") from None
            raise OutputError(
                f"output {self.target} is being written by another command ({_holder_of(self.path)}); "
                "wait for it to finish or choose another output"
            ) from None
        except OSError as error:
            raise OutputError(f"cannot write the output {self.target}: {error.strerror} ({self.path})") from None
        try:
            self.path.write_text(json.dumps(holder_record()), encoding="utf-8")
        except OSError as error:  # a full disk: the write of a few bytes fails where creating the file did not
            self.release()
            raise OutputError(f"cannot write the output {self.target}: {error.strerror} ({self.path})") from None
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def release(self) -> None:
        """Remove the lock file (still holding the lock, so no one else's file) and release the lock."""
        if not self._lock.is_locked:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            self._lock.release()
