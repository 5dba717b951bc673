"""Running a command as a user's process with a fault at a moment: a signal, a file-size limit, a vanished
output folder; and what must hold afterwards. Used by ``test_fault_harness.py`` and ``test_full_disk.py``;
:func:`run_launched` does the same for a launcher (or one node's agent) of a launched run, for
``test_launch_lifetime.py`` and ``test_launch.py``.

A command runs as ``python -m hf_unified_embed`` started with ``start_new_session=True`` (its own process group,
as a terminal's foreground job has), so "its processes" are those whose ``os.getsid`` is its pid, workers
reparented after a ``kill -9`` included, and a Ctrl-C goes to the whole group as a terminal sends it.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
#: How long the processes of a command may outlive its end (a parent-death signal is immediate).
ORPHAN_LIMIT_S = 5.0
#: Exit codes a stopped command may end with: done, one error line, interrupted (Ctrl-C, kill), killed.
EXIT_CODES = {
    "SIGINT": {0, 2, 130},
    "SIGTERM": {0, 2, 143},
    "SIGKILL": {0, -9},
    "fsize": {0, 2},
    "vanish": {0, 2},
    "readonly": {0, 2},
}


@dataclass(frozen=True)
class Fault:
    """What goes wrong: ``kind`` (a signal's name; ``fsize``: a file-size limit of ``size`` bytes from the
    start; ``vanish``: the folder ``new`` that holds the output removed; ``readonly``: ``new/deep``, the
    output's own folder, made read-only) ``at`` seconds after the command's code began."""

    kind: str
    at: float = 0.0
    size: int = 0


@dataclass
class Outcome:
    code: int
    err: str
    leftovers: list[str]
    took: float


def command_env(cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_DATASETS_CACHE": str(cache),
    }


def session_processes(leader: int) -> list[psutil.Process]:
    """The live processes of the session ``leader`` started (children that were reparented included)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.pid != leader and os.getsid(process.pid) == leader and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (OSError, psutil.Error):
            continue
    return found


def _limit(size: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return apply


def _command_began(pid: int) -> bool:
    """Whether the command's own code runs in ``pid``: from then on it catches ``SIGTERM`` (``SigCgt`` in
    ``/proc``; Python catches only ``SIGINT`` by itself). Before, the interpreter starts and imports its
    modules, and a Ctrl-C there is Python's (a ``KeyboardInterrupt`` traceback from ``runpy``, as with any
    program)."""
    try:
        started = b"hf_unified_embed" in Path(f"/proc/{pid}/cmdline").read_bytes()  # exec'd, not just forked
        fields = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
        )
    except OSError:
        return True
    return started and bool(int(fields["SigCgt"].strip(), 16) >> (signal.SIGTERM - 1) & 1)


def _wait_for_the_command(process: subprocess.Popen[str]) -> None:
    """Wait until the command's code runs (on Linux; elsewhere a moment counts from the start)."""
    if not Path("/proc/self/status").is_file():
        return
    deadline = time.monotonic() + 120
    while process.poll() is None and not _command_began(process.pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def run_command(
    project: Path, argv: list[str], cache: Path, fault: Fault | None = None, timeout: float = 900
) -> Outcome:
    """Run ``hf-unified-embed ARGV`` in ``project`` with ``fault``; wait for its end and for its processes'."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "hf_unified_embed", *argv],
        cwd=project,
        env=command_env(cache),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_limit(fault.size) if fault is not None and fault.kind == "fsize" else None,
    )
    try:
        if fault is not None and fault.kind not in ("fsize",):
            _wait_for_the_command(process)
            try:
                process.wait(fault.at)
            except subprocess.TimeoutExpired:
                if fault.kind == "vanish":
                    shutil.rmtree(project / "new", ignore_errors=True)
                elif fault.kind == "readonly":
                    (project / "new" / "deep").chmod(0o555)
                elif fault.kind == "SIGINT":
                    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
                else:
                    os.kill(process.pid, getattr(signal, fault.kind))
        _, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    took = time.monotonic() - started
    deadline = time.monotonic() + ORPHAN_LIMIT_S
    while (left := session_processes(process.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    names = []
    for child in left:
        try:
            names.append(" ".join(child.cmdline())[:200])
            child.kill()
        except psutil.Error:
            continue
    return Outcome(process.returncode, err, names, took)


def beside(output: Path) -> list[str]:
    """The hidden files beside ``output`` that belong to it (its staging folders, its lock)."""
    if not output.parent.is_dir():
        return []
    return sorted(path.name for path in output.parent.iterdir() if path.name.startswith(f".{output.name}."))


def check_one_line_end(outcome: Outcome, allowed: Iterable[int], what: str) -> None:
    """The command ended with an allowed code, said so in one line, printed no traceback, left no process."""
    tail = outcome.err[-4000:]
    assert outcome.code in set(allowed), f"{what}: exit code {outcome.code}\n{tail}"
    assert "Traceback" not in outcome.err, f"{what}: a traceback\n{tail}"
    lines = outcome.err.splitlines()
    if outcome.code == 2:
        errors = [line for line in lines if line.startswith("error:")]
        assert len(errors) == 1 and lines[-1] == errors[0], f"{what}: not one error line\n{tail}"
    if outcome.code in (130, 143):
        assert lines and lines[-1] == "interrupted", f"{what}: not 'interrupted'\n{tail}"
    assert not outcome.leftovers, f"{what}: processes outlived the command: {outcome.leftovers}"


# --- launched runs: a launcher (or one node's agent) stopped at a moment, and every process of the run ----------

#: How long any process of a launched run may outlive its launcher (a worker notices a lost launcher within a
#: quarter of a second and exits within 5 s whatever it waits on).
LAUNCH_LIFETIME_S = 10.0
#: A hang guard only: how long a launcher may take to end after the fault (its agent waits up to 30 s for the
#: workers it stops; a survivor node first notices the lost one).
LAUNCHER_END_S = 600.0


@dataclass
class Launch:
    """One launcher of a run (one node's agent): its process, the pids under it, its standard error."""

    process: subprocess.Popen[bytes]
    pids: set[int]
    err: list[bytes]
    reader: threading.Thread

    @property
    def text(self) -> str:
        return b"".join(self.err).decode(errors="replace")


@dataclass
class LaunchOutcome:
    """The end of a launched run: each launcher's exit code and standard error (its workers' too), the
    processes that outlived their launcher by :data:`LAUNCH_LIFETIME_S`, and when the fault came (wall clock;
    ``None`` when the run ended before its moment)."""

    codes: list[int]
    errs: list[str]
    leftovers: list[str]
    faulted_at: float | None


def _descendants(pid: int) -> set[int]:
    try:
        return {child.pid for child in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return set()


def _workers(launch: Launch) -> set[int]:
    """The launcher's workers: its own children (torchrun's agent runs in the launcher's process)."""
    try:
        return {child.pid for child in psutil.Process(launch.process.pid).children()}
    except psutil.Error:
        return set()


def _workers_began(launch: Launch, workers: int) -> bool:
    """Whether ``workers`` of the launcher's workers run the package's command (they catch SIGTERM)."""
    return sum(_command_began(pid) for pid in _workers(launch)) >= workers


def _torch_loaded(pid: int) -> bool:
    try:
        return "libtorch_cpu" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return True


def _alive(pids: set[int]) -> list[psutil.Process]:
    """The live processes among ``pids`` and in their process sessions (a worker leads its own process session)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            if process.pid in pids or os.getsid(process.pid) in pids:
                found.append(process)
        except (OSError, psutil.Error):
            continue
    return found


def run_launched(
    commands: list[list[str]],
    project: Path,
    env: dict[str, str],
    fault: Fault,
    victim: int = 0,
    workers: int = 2,
    after_torch_s: float | None = None,
) -> LaunchOutcome:
    """Start the launchers ``commands`` (one per node) in ``project``; once every one has ``workers`` workers
    whose command began (and, with ``after_torch_s``, that long after they all loaded torch), wait ``fault.at``
    seconds and signal launcher ``victim`` (``SIGINT`` to its process group, as a terminal's Ctrl-C; ``SIGTERM``
    and ``SIGKILL`` to it). Then wait for every launcher's end, and give each launcher's processes (recorded
    while they ran) :data:`LAUNCH_LIFETIME_S` after it to end.
    """
    launches = []
    for command in commands:
        process = subprocess.Popen(
            command, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        err: list[bytes] = []
        assert process.stderr is not None
        reader = threading.Thread(
            target=lambda stream=process.stderr, into=err: into.extend(iter(stream.readline, b""))
        )
        reader.start()
        launches.append(Launch(process, {process.pid}, err, reader))

    def record() -> bool:
        """Note every process under each launcher; whether every launcher still runs."""
        for launch in launches:
            launch.pids |= _descendants(launch.process.pid)
        return all(launch.process.poll() is None for launch in launches)

    faulted_at = None
    try:
        deadline = time.monotonic() + LAUNCHER_END_S
        while (
            record()
            and time.monotonic() < deadline
            and not all(_workers_began(launch, workers) for launch in launches)
        ):
            time.sleep(0.02)
        if after_torch_s is not None:
            while record() and time.monotonic() < deadline:
                workers_now = {pid for launch in launches for pid in _workers(launch)}
                if workers_now and all(_torch_loaded(pid) for pid in workers_now):
                    break
                time.sleep(0.05)
            fault = Fault(fault.kind, fault.at + after_torch_s)
        moment = time.monotonic() + fault.at
        while record() and time.monotonic() < moment:
            time.sleep(0.02)
        target = launches[victim].process
        if target.poll() is None:
            faulted_at = time.time()
            if fault.kind == "SIGINT":
                os.killpg(target.pid, signal.SIGINT)
            else:
                os.kill(target.pid, getattr(signal, fault.kind))
        ended: dict[int, float] = {}
        while len(ended) < len(launches) and time.monotonic() < deadline:
            record()
            for index, launch in enumerate(launches):
                if index not in ended and launch.process.poll() is not None:
                    ended[index] = time.monotonic()
            time.sleep(0.05)
        leftovers: list[str] = []
        for index, launch in enumerate(launches):
            end = ended.get(index, time.monotonic())
            while (left := _alive(launch.pids)) and time.monotonic() < end + LAUNCH_LIFETIME_S:
                time.sleep(0.1)
            for process in left:
                with contextlib.suppress(psutil.Error):
                    leftovers.append(f"node {index}: " + " ".join(process.cmdline())[:200])
    finally:
        for launch in launches:
            for process in _alive(launch.pids):
                with contextlib.suppress(psutil.Error):
                    process.kill()
            if launch.process.poll() is None:
                launch.process.kill()
            launch.process.wait()
            launch.reader.join(60)
    return LaunchOutcome(
        [launch.process.returncode for launch in launches], [launch.text for launch in launches], leftovers, faulted_at
    )
