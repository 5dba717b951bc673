"""One writer per output, for every writing command (issue 37, items 3 and 10).

A property over every writing command: hypothesis draws the command, its output (fresh, or an output the
tool wrote before, with ``--overwrite``) and the lock it finds there —

* held by a live process (this test's, through :class:`OutputLock`): the command exits 2 at once with one
  ``error:`` line naming the holder's pid, and nothing in the project changes (the holder's lock file
  neither);
* left by a process that died (``kill -9``: the file stays, the kernel's lock went with the process): the
  command takes it over, writes its output and removes the lock file.

Then two real processes race on one output: one writes it, the other exits 2 with one line, and neither a
staging folder nor a lock file is left.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _output_project import COMMANDS, fresh_project, hashes, one_error_line, project_template, run_in
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.errors import OutputError
from hf_unified_embed.utils.output_lock import OutputLock, holder_record, lock_path
from hf_unified_embed.utils.outputs import MARKER, written_by_tool

#: Commands cheap enough to run to the end in every example; the others are drawn for a held lock only,
#: which stops them before their work.
CHEAP = ("build", "merge", "evaluate")
#: A refusal for a held lock comes before any data or model is loaded (train's preflight reads its recipe).
AT_ONCE_S = 20.0


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> Iterator[Path]:
    with project_template(tmp_path_factory.mktemp("output-lock"), tiny_model_path) as project:
        yield project


@pytest.fixture(scope="module")
def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _output(command: str, replace: bool) -> str:
    kind = COMMANDS[command][2]
    if replace:  # an output the tool wrote before, replaced with --overwrite
        return "prior.json" if kind == "file" else "prior"
    return "out.json" if kind == "file" else "out"


@settings(max_examples=12, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    command=st.sampled_from(list(COMMANDS)),
    replace=st.booleans(),
    live=st.booleans(),
)
def test_a_second_command_on_an_output_stops_at_once_and_a_dead_ones_lock_is_taken_over(
    template: Path, dead_pid: int, command: str, replace: bool, live: bool
) -> None:
    if not live and command not in CHEAP:
        command = "build"
    output = _output(command, replace)
    argv = [*COMMANDS[command][0](output), *(["--overwrite"] if replace else [])]
    with fresh_project(template) as project:
        target = (project / output).absolute()
        lock = lock_path(target)
        if live:
            with OutputLock(target):
                before = hashes(project)
                start = time.monotonic()
                code, err = run_in(project, argv)
                elapsed = time.monotonic() - start
                line = one_error_line(code, err, f"{command} on a locked output")
                assert hashes(project) == before, "refused, yet the project changed"
            assert f"output {target} is being written by another command (pid {os.getpid()} on" in line, line
            assert "started" in line and elapsed < AT_ONCE_S, (line, elapsed)
            assert not lock.exists(), "the holder removes its lock file when it ends"
            return
        stale = {"pid": dead_pid, "host": "this-host", "command": "hf-unified-embed build", "started": "then"}
        lock.write_text(json.dumps(stale))
        code, err = run_in(project, argv)
        assert code == 0, err[-3000:]
        assert not lock.exists(), "the lock file of the dead process is removed with the new holder's"
        assert written_by_tool(target)
        assert not [path for path in project.iterdir() if ".staging-" in path.name]


def test_two_processes_racing_on_one_output_one_writes_it_the_other_exits_2(template: Path) -> None:
    with fresh_project(template) as project:
        before = hashes(project)
        command = [sys.executable, "-m", "hf_unified_embed", "build", "build.yaml", "-o", "out"]
        racers = [
            subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        results = [(racer.wait(timeout=300), racer.stderr.read() if racer.stderr else "") for racer in racers]
        for racer in racers:
            for stream in (racer.stdout, racer.stderr):
                if stream is not None:
                    stream.close()
        codes = sorted(code for code, _ in results)
        assert codes == [0, 2], results
        loser = next(err for code, err in results if code == 2)
        line = one_error_line(2, loser, "the second racer")
        # Which message depends on when the loser looks: while the winner writes, or after it has finished.
        assert "is being written by another command (pid" in line or "exists and is not empty" in line, line
        after = hashes(project)
        assert (project / "out" / MARKER).is_file() and written_by_tool(project / "out")
        assert {name: digest for name, digest in after.items() if not name.startswith("out")} == before
        assert not lock_path((project / "out").absolute()).exists()


@pytest.mark.parametrize("left_by_the_dead", [False, True])
def test_a_contender_between_the_holders_lock_and_its_name_waits_for_the_name(
    tmp_path: Path, dead_pid: int, left_by_the_dead: bool
) -> None:
    """Two commands started together: the second used to read the lock file before the first had written its
    name into it (or read the name a killed holder left there) and named no one (or the dead)."""
    import filelock

    target = tmp_path / "out"
    if left_by_the_dead:
        dead = {"pid": dead_pid, "host": socket.gethostname(), "command": "x", "started": "then"}
        lock_path(target).write_text(json.dumps(dead))
    raw = filelock.FileLock(lock_path(target), timeout=0, is_singleton=False)
    raw.acquire()  # the holder has the lock and has not written its name yet...
    writer = threading.Timer(0.3, lambda: lock_path(target).write_text(json.dumps(holder_record())))
    writer.start()  # ...which it does a moment later
    try:
        with pytest.raises(OutputError) as refused:
            OutputLock(target).__enter__()
    finally:
        writer.join()
        raw.release()
    assert f"(pid {os.getpid()} on {socket.gethostname()}," in str(refused.value), refused.value
