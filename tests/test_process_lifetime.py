"""A command's processes end with it: ``kill -9`` takes its workers along, Ctrl-C and ``kill`` end it within
seconds as ``interrupted`` (exit 130 / 143), also when the interrupt lands in a finalizer, and ``--num-proc``
starts no more processes than the CPUs.

The commands run as real processes in a session of their own, as a terminal runs them; a signal "from the
terminal" goes to the whole process group. The build's readers are held in their work (a reader that sleeps,
forked into the real ``datasets`` pool), so the signal always finds them alive.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from _fault_runs import session_processes

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import build_plan
from hf_unified_embed.utils import processes

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"
#: How long a stopped command may take to end (it ends in about a second; a loaded machine is slow).
STOP_LIMIT_S = 15.0
#: How long a worker may outlive its killed parent.
ORPHAN_LIMIT_S = 5.0

#: ``build --num-proc 2`` of the bundled sample whose readers never finish reading.
HELD_BUILD = textwrap.dedent(
    """
    import sys, time
    import hf_unified_embed.data.builder as builder
    from hf_unified_embed.cli.main import main

    def held(*args, **kwargs):
        time.sleep(600)
        yield from ()

    builder.piece_tables = held
    sys.exit(main(["build", sys.argv[1], "-o", sys.argv[2], "--num-proc", "2"]))
    """
)

#: A command whose Ctrl-C lands in a finalizer (which prints and drops it), then works on for a minute.
SWALLOWED = textwrap.dedent(
    """
    import gc, os, signal, sys, time
    import hf_unified_embed.cli.data as data
    from hf_unified_embed.cli.main import main

    class Loaded:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the interrupt is raised here, inside the finalizer

    def run_build(args):
        Loaded()
        gc.collect()
        print("went on", flush=True)
        time.sleep(60)
        return 0

    data.run_build = run_build
    sys.exit(main(["build", "recipe.yaml", "-o", "out"]))
    """
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _start(script: str, *args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )


def _wait_for_workers(process: subprocess.Popen[str], count: int) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the build ended before its workers started: {process.communicate()[1][-3000:]}")
        if len(psutil.Process(process.pid).children(recursive=True)) >= count:
            time.sleep(1.0)  # the pool hands the workers their tasks
            return
        time.sleep(0.2)
    pytest.fail("the build's workers did not start")


def _none_left(leader: int) -> None:
    deadline = time.monotonic() + ORPHAN_LIMIT_S
    while (left := session_processes(leader)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for process in left:
        process.kill()  # not to leave them to the next test
    assert not left, f"processes outlived the command: {[process.cmdline() for process in left]}"


@pytest.mark.slow
def test_kill_9_of_a_parallel_build_takes_its_workers_along(tmp_path: Path):
    process = _start(HELD_BUILD, str(SAMPLE_RECIPE), str(tmp_path / "out"), cwd=tmp_path)
    try:
        # the datasets pool's two readers and its queue's manager
        _wait_for_workers(process, 3)
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait(30) == -signal.SIGKILL
        _none_left(process.pid)
    finally:
        with_leftovers = session_processes(process.pid)
        for child in with_leftovers:
            child.kill()


@pytest.mark.slow
@pytest.mark.parametrize(("stop", "to_group", "code"), [("SIGINT", True, 130), ("SIGTERM", False, 143)])
def test_a_stopped_parallel_build_ends_at_once_as_interrupted(tmp_path: Path, stop: str, to_group: bool, code: int):
    process = _start(HELD_BUILD, str(SAMPLE_RECIPE), str(tmp_path / "out"), cwd=tmp_path)
    try:
        _wait_for_workers(process, 3)
        started = time.monotonic()
        (os.killpg if to_group else os.kill)(process.pid, getattr(signal, stop))
        _, err = process.communicate(timeout=120)
        took = time.monotonic() - started
    finally:
        for child in session_processes(process.pid):
            child.kill()
    assert process.returncode == code, err[-3000:]
    assert err.splitlines()[-1] == "interrupted", err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert took < STOP_LIMIT_S, f"{stop} took {took:.1f} s to end the build"
    _none_left(process.pid)
    assert sorted(path.name for path in tmp_path.iterdir()) == [], "the stopped build left files"


@pytest.mark.slow
def test_an_interrupt_swallowed_by_a_finalizer_still_ends_the_command(tmp_path: Path):
    process = _start(SWALLOWED, cwd=tmp_path)
    started = time.monotonic()
    try:
        out, err = process.communicate(timeout=120)
    finally:
        for child in session_processes(process.pid):
            child.kill()
    took = time.monotonic() - started
    assert process.returncode == 130, (out, err[-3000:])
    assert err.splitlines()[-1] == "interrupted", err[-3000:]
    # Raised again within a second, well before the deadline after which a stopped command exits regardless.
    assert took < processes._STOP_DEADLINE_S / 2, f"the command went on for {took:.0f} s after Ctrl-C"


def test_num_proc_is_capped_at_the_cpus_and_a_number_beyond_any_machine_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    seen: dict[str, object] = {}

    def fake(recipe: object, **kwargs: object) -> None:
        seen.update(kwargs)
        raise KeyboardInterrupt  # stop before anything is read

    monkeypatch.setattr("hf_unified_embed.data.build_unified_with_report", fake)
    monkeypatch.setattr(build_plan, "available_cpus", lambda: 4)
    assert main(["build", str(SAMPLE_RECIPE), "-o", str(tmp_path / "out"), "--num-proc", "1000"]) == 130
    assert seen["num_proc"] == 4
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: --num-proc 1000: this process may use 4 CPU(s); starting 4"]
    for huge, expected in (
        ("99999999999999999999", "expected at most 8,192 processes"),
        ("8193", "expected at most 8,192 processes"),
        ("1" + "0" * 5000, "expected a positive integer"),  # past the digits Python reads as a number
    ):
        with pytest.raises(SystemExit) as caught:
            main(["build", str(SAMPLE_RECIPE), "-o", str(tmp_path / "out"), "--num-proc", huge])
        assert caught.value.code == 2
        err = capsys.readouterr().err
        assert f"argument --num-proc: {expected}" in err, err


def test_child_processes_follow_the_command_only_while_it_runs():
    """The fork hook is the command's: a process forked outside a command keeps its signals, and the command
    gives back the SIGINT handler it found (Python's own, or SIG_IGN in a job a shell started in the background)."""
    before = signal.getsignal(signal.SIGINT)
    with processes.command_lifetime():
        assert processes._Forks.active
        assert signal.getsignal(signal.SIGINT) is processes._on_stop_signal
        if hasattr(signal, "SIGXFSZ"):
            assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN
    assert not processes._Forks.active
    assert signal.getsignal(signal.SIGINT) is before


def test_a_stop_raised_where_python_cannot_propagate_it_prints_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt in a ``__del__`` (or an import lock's weakref callback) is not printed during a
    command: the stop is raised again in the main thread. Anything else still is, and after the command too."""
    seen: list[type[BaseException]] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: seen.append(type(unraisable.exc_value)))

    class Stops:
        def __del__(self) -> None:
            raise KeyboardInterrupt

    class Fails:
        def __del__(self) -> None:
            raise ValueError("kept")

    with processes.command_lifetime():
        Stops()
        Fails()
        gc.collect()
    assert seen == [ValueError]
    Stops()
    gc.collect()
    assert seen == [ValueError, KeyboardInterrupt]


# --- a worker of a launched run ends with its launcher ------------------------------------------------------------

#: A stand-in for torchrun's agent: it starts one worker in a session of its own, as torchrun does, and waits.
AGENT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    worker = subprocess.Popen(
        [sys.executable, "-c", sys.argv[1]],
        env={**os.environ, "TORCHELASTIC_RUN_ID": "lifetime", "LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1"},
        start_new_session=True,
    )
    print(worker.pid, flush=True)
    time.sleep(600)
    """
)

#: A worker whose command works for ten minutes, and notes its exit code (no one waits for an orphan's).
WORKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import hf_unified_embed.cli.data as data
    from hf_unified_embed.cli.main import main

    def run_build(args):
        print("began", flush=True)
        time.sleep(600)
        return 0

    data.run_build = run_build
    code = main(["build", "recipe.yaml", "-o", "out"])
    Path("code").write_text(str(code))
    sys.exit(code)
    """
)


@pytest.mark.slow
def test_a_worker_ends_with_its_killed_launcher(tmp_path: Path) -> None:
    """``kill -9`` of the agent: its worker (in a session of its own) stops within seconds, says why in one
    ``error:`` line and exits 2."""
    agent = _start(AGENT, WORKER, cwd=tmp_path)
    try:
        assert agent.stdout is not None
        worker = int(agent.stdout.readline())
        assert agent.stdout.readline().strip() == "began"
        os.kill(agent.pid, signal.SIGKILL)
        killed = time.monotonic()
        _, err = agent.communicate(timeout=120)  # the worker holds the pipe until it ends
    finally:
        for leftover in session_processes(agent.pid):
            leftover.kill()
    with contextlib.suppress(psutil.Error):  # its standard error closes as the interpreter ends, just before it
        psutil.Process(worker).wait(ORPHAN_LIMIT_S)
    took = time.monotonic() - killed
    assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == psutil.STATUS_ZOMBIE
    assert took < processes._LOST_DEADLINE_S + ORPHAN_LIMIT_S, f"the worker outlived its launcher by {took:.0f} s"
    assert err.splitlines() == [f"error: the launcher (pid {agent.pid}) of this worker ended; stopping the run's workers on this node"], err  # fmt: skip
    assert (tmp_path / "code").read_text() == "2"


def _stopped_by(monkeypatch: pytest.MonkeyPatch, stop: Callable[[], None]) -> int:
    """``build`` whose work is stopped by ``stop`` (from another thread) a moment after it began."""

    def run_build(args: object) -> int:
        threading.Timer(0.2, stop).start()
        time.sleep(60)
        return 0

    monkeypatch.setattr("hf_unified_embed.cli.data.run_build", run_build)
    return main(["build", str(SAMPLE_RECIPE), "-o", "out"])


def test_a_lost_run_ends_its_command_with_one_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    assert _stopped_by(monkeypatch, lambda: processes.stop_lost_run("node 1 of the run was lost")) == 2
    assert time.monotonic() - started < 30
    assert capsys.readouterr().err.splitlines() == ["error: node 1 of the run was lost"]
    monkeypatch.setenv("LOCAL_RANK", "1")  # the node's other workers see the same loss: local rank 0 says it
    assert _stopped_by(monkeypatch, lambda: processes.stop_lost_run("lost")) == 2
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_under_the_package_launcher_the_launcher_says_interrupted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], signum: int, code: int
) -> None:
    assert _stopped_by(monkeypatch, lambda: signal.pthread_kill(threading.main_thread().ident or 0, signum)) == code
    assert capsys.readouterr().err.splitlines() == ["interrupted"]
    monkeypatch.setenv(processes.LAUNCHER_ENV, str(os.getpid() + 1))  # a launcher that is not this one's parent
    assert _stopped_by(monkeypatch, lambda: signal.pthread_kill(threading.main_thread().ident or 0, signum)) == code
    assert capsys.readouterr().err.splitlines() == ["interrupted"]
    monkeypatch.setenv(processes.LAUNCHER_ENV, str(os.getppid()))
    assert _stopped_by(monkeypatch, lambda: signal.pthread_kill(threading.main_thread().ident or 0, signum)) == code
    assert capsys.readouterr().err == ""
