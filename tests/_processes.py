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
import signal
import subprocess
import sys
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


#: Measured on the quiet 2-core machine (2026-11-24, `make test` alone): one Python process that imports
#: torch, transformers and sentence-transformers and gets to its first step or its error: 5.8-6.6 s.
STARTUP_S = 6.0
#: One optimizer step of a tiny random BERT (hidden 32) at batch <= 16 with data collation: <= 0.3 s.
TINY_STEP_S = 0.3
#: One optimizer step of all-MiniLM-L6-v2 at batch 32, 128 tokens (docs/quality.md): 1.5 s.
MINILM_STEP_S = 1.5


@dataclass(frozen=True)
class Expected:
    """A launch's quiet-machine duration: ``processes`` start-ups, then ``steps`` of ``step_s`` seconds.

    The defaults are the constants above, measured on the 2-core development machine with nothing
    else running; start-up counts per process because two processes share the two cores.
    """

    startup_s: float = STARTUP_S
    steps: int = 0
    step_s: float = TINY_STEP_S
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


def time_limit(expected: Expected, load: float | None = None) -> float:
    """Seconds ``expected`` may take here and now before it counts as hung."""
    return max(MIN_LIMIT_S, SAFETY * expected.seconds * (load_per_core() if load is None else load))


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
    """``subprocess.run`` with captured text output and a load-aware limit; a timeout fails with the output.

    The child runs in a session of its own, so that a timeout ends everything it started (torchrun's
    workers outlive a killed torchrun otherwise).
    """
    load = load_per_core()
    limit = time_limit(expected, load)
    start = time.monotonic()
    with subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            pytest.fail(
                f"{' '.join(map(str, command))}\nstill running after {time.monotonic() - start:.0f} s (limit "
                f"{limit:.0f} s = {SAFETY:g} x the {expected.seconds:.0f} s it takes on a quiet machine x load "
                f"{load:.1f} per core at the start); it was killed.\n{output_tail(stdout, stderr)}",
                pytrace=False,
            )
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


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


def launch_command(*arguments: str, processes: int = 2) -> list[str]:
    """``python -m hf_unified_embed.cli.launch --nproc_per_node=N --master_port=<free> ARGUMENTS``: the
    package's own launcher (torchrun keeping an input error's exit code 2) on a port free right now."""
    return [
        sys.executable,
        "-m",
        "hf_unified_embed.cli.launch",
        f"--nproc_per_node={processes}",
        f"--master_port={free_port()}",
        *arguments,
    ]
