"""Child processes in tests: time limits that hold on a busy machine, and failures that show the output.

A time limit in a test only guards against a hang, so it must never end a run that is slow because
the machine's two cores are shared with other work (a ``make demo`` loop beside ``make test`` made a
300 s limit kill a torchrun launch that was still taking steps). Each launch states how long it takes
on a quiet machine, measured as start-up (interpreter, imports, the process group) plus its steps;
the limit is :data:`SAFETY` times that, times the machine's load per core when the launch starts,
and never under :data:`MIN_LIMIT_S`. A launch that runs out of time fails the test with what the
child printed, so a slow run can be told from a hang.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

#: How many times the quiet-machine duration a launch may take before it counts as hung.
SAFETY = 8.0
#: No launch is cut before this many seconds, however short it is expected to be.
MIN_LIMIT_S = 240.0
#: Shown on a failure: enough of the child's output to see its last steps or its traceback.
TAIL_CHARS = 6000


@dataclass(frozen=True)
class Expected:
    """A launch's quiet-machine duration: ``processes`` start-ups, then ``steps`` of ``step_s`` seconds.

    The figures were measured on the 2-core development machine with nothing else running (the
    numbers at each call site); start-up is per process because two processes share the cores.
    """

    startup_s: float
    steps: int = 0
    step_s: float = 0.0
    processes: int = 1

    @property
    def seconds(self) -> float:
        return self.startup_s * self.processes + self.steps * self.step_s


def load_per_core() -> float:
    """The one-minute load average per core, at least 1 (an idle machine runs at its own speed)."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # not every platform has a load average
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


def time_limit(expected: Expected) -> float:
    return max(MIN_LIMIT_S, SAFETY * expected.seconds * load_per_core())


def _text(stream: Any) -> str:
    if stream is None:
        return ""
    return stream.decode(errors="replace") if isinstance(stream, bytes) else str(stream)


def output_tail(stdout: Any, stderr: Any) -> str:
    """The end of a child's standard output and standard error, labelled."""
    return (
        f"--- stdout (tail) ---\n{_text(stdout)[-TAIL_CHARS:]}\n--- stderr (tail) ---\n{_text(stderr)[-TAIL_CHARS:]}"
    )


def run(command: Sequence[str], *, expected: Expected, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` with captured text output and a load-aware limit; a timeout fails with the output."""
    limit = time_limit(expected)
    start = time.monotonic()
    try:
        return subprocess.run(list(command), capture_output=True, text=True, timeout=limit, **kwargs)
    except subprocess.TimeoutExpired as error:
        pytest.fail(
            f"{' '.join(map(str, command))}\nstill running after {time.monotonic() - start:.0f} s (limit {limit:.0f} s = "
            f"{SAFETY:g} x the {expected.seconds:.0f} s it takes on a quiet machine x load {load_per_core():.1f} per core);"
            f" it was killed.\n{output_tail(error.stdout, error.stderr)}",
            pytrace=False,
        )


def failure(completed: subprocess.CompletedProcess[str]) -> str:
    """An assertion message for a child that ended badly: its exit code and the tail of its output."""
    return f"exit code {completed.returncode}\n{output_tail(completed.stdout, completed.stderr)}"


def free_port() -> int:
    """A TCP port free right now, for a launcher's ``--master_port``: a fixed port collides with another
    launch on the same machine (another test run beside this one), and torchrun's agent then fails."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
