"""Which process this is in a ``torchrun`` / ``accelerate launch`` run, read from the launcher's environment.

Both launchers export ``RANK`` and ``WORLD_SIZE`` before Python starts, so these answers are right
before anything initialises ``torch.distributed`` (a recipe is checked, and its output staged, before
the trainer exists).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from types import FrameType
from typing import Any, NoReturn

from hf_unified_embed.utils.agent_watch import HEARTBEAT_S, NODE_LOST_AFTER_S, AgentWatch, watching_the_run


def world_size() -> int:
    """Number of processes of the run (1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Rank 0 of a launched run, or a plain process: the one that writes outputs and prints results."""
    return int(os.environ.get("RANK", "0")) == 0


def quiet_progress_bars() -> None:
    """Turn off the progress bars of ``transformers``, ``datasets`` and ``huggingface_hub`` in this process.

    For the processes other than rank 0 of a launched run: each drew its own copy of rank 0's bars ("Loading
    weights", "Generating train split") on the same terminal, and a bar's line is left open between updates,
    so rank 0's one ``error:`` line could land at the end of another process's half-drawn bar: once in a wider
    test run, a two-process ``train`` that refused a checkpoint exited with code 2 and no line of its output
    began with ``error:``; in the runs that passed, the other process's "Loading weights" bars came just before
    the error line. Library state only, no environment variable; a user's ``HF_HUB_DISABLE_PROGRESS_BARS=0``
    (or ``HF_DATASETS_…``) keeps the bars, as those libraries decide, without their warning in every process.
    """
    import datasets
    import transformers.utils.logging

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Cannot disable progress bars: ... has priority": the user chose
        transformers.utils.logging.disable_progress_bar()  # and huggingface_hub's, which it calls
        datasets.disable_progress_bars()


def end_process_group() -> None:
    """Close this process's ``torch.distributed`` process group, if one is open, before the interpreter exits.

    Left to the exit, a gloo group's threads can outlive the DDP reducers that use them, and the process is
    aborted after its work is done ("terminate called without an active exception", SIGABRT: once in a full
    test suite, ``train`` under ``torchrun`` on two CPU processes; pytorch/pytorch#56297). Collecting the
    trainer's reference cycles first releases the reducers while the group still exists. No barrier: the
    main process may still be evaluating or publishing, and nothing is exchanged after training.
    """
    dist = sys.modules.get("torch.distributed")  # never imported: never initialised, nothing to close
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    gc.collect()
    dist.destroy_process_group()


# --- the command's lifetime: its child processes end with it, and a signal ends it as "interrupted" -------------

#: Linux ``prctl`` option: the signal a process gets when the thread that started it ends.
_PR_SET_PDEATHSIG = 1
#: How often a child started by a thread other than the main one checks that its parent is alive.
_PARENT_POLL_S = 0.5
#: After a stopping signal, how often it is raised again in the main thread while nothing has seen it: a
#: ``KeyboardInterrupt`` raised inside a finalizer (``__del__``, a weakref callback: model loading runs many)
#: is printed as "Exception ignored" and dropped, and the run went on to train to the end.
_RERAISE_S = 1.0
#: Seconds a command may take to clean up after a stopping signal before it exits without finishing: a
#: library that waits on its workers (datasets' pool asked its lost tasks for results for ~100 s) must not
#: hold a Ctrl-C. The staging folder left then is removed by the next run for the same output.
_STOP_DEADLINE_S = 20.0
#: The same for a worker whose run is lost (its launcher died, another node was lost): nothing waits for it,
#: and every process of the run must be gone within seconds.
_LOST_DEADLINE_S = 5.0
#: Exit code of a worker whose run was lost: one ``error:`` line, as for any failure that is not a bug.
LOST_RUN_EXIT_CODE = 2
#: Set by ``python -m hf_unified_embed.cli.launch`` for its workers, to its pid: it prints the ``interrupted``
#: line itself.
LAUNCHER_ENV = "HF_UNIFIED_EMBED_LAUNCHER"

#: Signals that stop a command: Ctrl-C and ``kill``'s default.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Command:
    """The command this process runs (one at a time: :func:`command_lifetime`)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.main_thread = threading.get_ident()  # created in the main thread (command_lifetime)
        self.signum: int | None = None  # the first stopping signal it got
        self.lost: str | None = None  # why its launched run was lost (then signum is SIGTERM, its messenger)
        self.deadline_s = _STOP_DEADLINE_S
        self.watch: AgentWatch | None = None  # the watch of its launched run
        self.seen = threading.Event()  # its KeyboardInterrupt reached code that ends the command
        self.ended = threading.Event()


class _Forks:
    """What the fork hook needs: whether it applies, who forks, and from which thread."""

    active = False  # a command runs in this process or in an ancestor it was forked from
    forker = 0
    from_main_thread = True
    libc: ctypes.CDLL | None = None


_COMMAND: _Command | None = None
#: The stopping signal the running (or the last) command of this process got.
_STOPPED_BY: int | None = None
#: Why the running (or the last) command's launched run was lost, if that stopped it.
_LOST: str | None = None
#: Whether the stopped command's last line was printed (the deadline's exit must not print it again).
_REPORTED = threading.Event()
_HOOK_REGISTERED = False


def _parent_death_signal() -> bool:
    """Ask the kernel to kill this process when the thread that forked it ends; whether it could."""
    if _Forks.libc is None:
        return False
    return int(_Forks.libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)) == 0


def _watch_parent(parent: int) -> None:
    """End this process (as ``SIGKILL`` would) once ``parent`` is gone: the process is reparented."""
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_S)
    os._exit(128 + signal.SIGKILL)


def _before_fork() -> None:
    _Forks.forker = os.getpid()
    _Forks.from_main_thread = threading.current_thread() is threading.main_thread()


def _after_fork_in_child() -> None:
    """In every process forked while a command runs (``datasets``' pool and its manager, the shard writers,
    data loader workers, and their own children): end with the parent, and leave stopping signals to it.

    A Ctrl-C reaches the whole process group; a worker that raised ``KeyboardInterrupt`` died mid-task,
    its pool started another, and the lost task was waited for: the main process ends its workers itself.
    ``SIGTERM`` gets its default back (a pool's ``terminate`` sends it). The parent-death signal is tied
    to the *thread* that forked, so a child forked by a helper thread (a pool replacing a worker) watches
    its parent instead.
    """
    global _COMMAND
    if not _Forks.active:
        return
    _COMMAND = None  # this process runs no command of its own
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    parent = _Forks.forker
    if not (_Forks.from_main_thread and _parent_death_signal()):
        threading.Thread(target=_watch_parent, args=(parent,), name="watch-parent", daemon=True).start()
    if os.getppid() != parent:  # the parent died before the signal was asked for
        os._exit(128 + signal.SIGKILL)


def _on_stop_signal(signum: int, frame: FrameType | None) -> None:
    """Raise ``KeyboardInterrupt`` in the command's main thread, and make sure it ends the command."""
    global _STOPPED_BY
    command = _COMMAND
    if command is None or command.pid != os.getpid() or command.seen.is_set():
        return  # not the command's process, or the command is already ending: let its clean-up finish
    if command.signum is None:
        command.signum = _STOPPED_BY = signum
        _end_children()
        threading.Thread(target=_enforce_stop, args=(command,), name="stop", daemon=True).start()
    raise KeyboardInterrupt


def _quiet_unraisable(previous: Any) -> Any:
    """A ``sys.unraisablehook`` that drops the stop's ``KeyboardInterrupt`` and hands anything else to ``previous``.

    A stop raised while Python runs a callback it cannot propagate from (a weakref callback of the import
    system's module locks, a ``__del__``) is "ignored" and printed with its traceback; :func:`_enforce_stop`
    raises it again in the main thread, so printing it only put a traceback before the ``interrupted`` line.
    """

    def hook(unraisable: Any) -> None:
        if _COMMAND is not None and isinstance(unraisable.exc_value, KeyboardInterrupt):
            return
        previous(unraisable)

    return hook


def _end_children() -> None:
    """Kill every process the command started (and theirs): their work is thrown away with the run's.

    Left to their pools, a worker stopped mid-task printed a traceback of its own, and a pool waited on the
    results of tasks whose worker was gone.
    """
    import psutil

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()


def _enforce_stop(command: _Command) -> None:
    """Raise the stop again until the command sees it; exit regardless if the command has not ended by its
    deadline (:data:`_STOP_DEADLINE_S`; :data:`_LOST_DEADLINE_S` for a lost run)."""
    deadline = time.monotonic() + command.deadline_s
    while not command.seen.wait(_RERAISE_S):
        if command.ended.is_set() or time.monotonic() > deadline:
            break
        # A real signal to the main thread: it also ends a blocking call (a sleep, a read), which a flag set
        # by _thread.interrupt_main would wait for.
        signal.pthread_kill(command.main_thread, command.signum or signal.SIGINT)
    if command.ended.wait(max(0.0, deadline - time.monotonic())):
        return
    report_stop()
    sys.stderr.flush()
    os._exit(stop_exit_code())


def stop_lost_run(reason: str) -> None:
    """Stop the running command, from any thread, because its launched run is lost (``reason``: what was lost).

    As a ``SIGTERM`` would (the command's ``KeyboardInterrupt``, its children ended, a deadline), but the command
    ends with one ``error: <reason>`` line (:func:`report_stop`) and :data:`LOST_RUN_EXIT_CODE`, and exits within
    :data:`_LOST_DEADLINE_S` whatever it waits on. Nothing after a first stop (signal or loss) changes it.
    """
    global _STOPPED_BY, _LOST
    command = _COMMAND
    if command is None or command.signum is not None:
        return
    command.lost = _LOST = reason
    command.deadline_s = _LOST_DEADLINE_S
    command.signum = _STOPPED_BY = signal.SIGTERM
    _end_children()
    threading.Thread(target=_enforce_stop, args=(command,), name="stop", daemon=True).start()
    signal.pthread_kill(command.main_thread, signal.SIGTERM)  # raises the stop in the main thread


def wait_for_a_lost_run() -> None:
    """After an error in a worker of a run of several nodes, give the watch time to tell whether a node is lost.

    A collective whose peer died fails at once ("Connection closed by peer"), a few seconds before the
    heartbeat shows which node is gone. If it is, the stop's ``KeyboardInterrupt`` ends this wait and the
    command ends with the lost node's ``error:`` line; otherwise this returns and the error stands.
    """
    command = _COMMAND
    if command is None or command.watch is None or command.watch.nodes is None:
        return
    deadline = time.monotonic() + NODE_LOST_AFTER_S + 2 * HEARTBEAT_S
    while command.signum is None and time.monotonic() < deadline:
        time.sleep(0.1)


def exit_process(code: int) -> NoReturn:
    """End the process with ``code``: at once, without the interpreter's clean-up, after a lost run.

    A lost run's peers are gone, and libraries' exit handlers may wait on them (a process group's threads,
    a pool's workers); every process of the run must end within seconds. Otherwise ``sys.exit``.
    """
    if _LOST is None:
        sys.exit(code)
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def report_stop() -> int:
    """Print the stopped command's last line, once, where it belongs; its exit code (:func:`stop_exit_code`).

    ``interrupted`` comes from the process of rank 0 (under a launcher every worker is stopped; one line is
    enough), and not at all from a worker of ``python -m hf_unified_embed.cli.launch``, which prints it
    itself. A lost run's ``error:`` line comes from local rank 0 of each node: its workers all see the loss,
    and each node's terminal gets one line.
    """
    if not _REPORTED.is_set():
        _REPORTED.set()
        if _LOST is not None:
            if int(os.environ.get("LOCAL_RANK", "0")) == 0:
                _write_line(f"error: {_LOST}")
        elif is_main_process() and not _launched_by_the_package():
            _write_line("interrupted")
    return stop_exit_code()


def _launched_by_the_package() -> bool:
    """Whether this process's parent is ``python -m hf_unified_embed.cli.launch`` (not merely a descendant of one)."""
    return os.environ.get(LAUNCHER_ENV) == str(os.getppid())


def _write_line(line: str) -> None:
    # The launcher that held this process's standard error may be gone (a pipe with no reader): the line is
    # then lost, the stop goes on.
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def stop_signal() -> int | None:
    """The stopping signal (``SIGINT``, ``SIGTERM``) the running (or the last) command got, or ``None``."""
    return _STOPPED_BY


def stop_seen() -> None:
    """Note that the stop reached code that ends the command (its ``KeyboardInterrupt`` was not swallowed)."""
    if _COMMAND is not None and _COMMAND.signum is not None:
        _COMMAND.seen.set()


def stop_exit_code() -> int:
    """128 plus the stopping signal, as a shell reports a command a signal ended (130 after Ctrl-C);
    :data:`LOST_RUN_EXIT_CODE` for a launched run that was lost."""
    if _LOST is not None:
        return LOST_RUN_EXIT_CODE
    return 128 + (_STOPPED_BY or signal.SIGINT)


@contextlib.contextmanager
def command_lifetime() -> Iterator[None]:
    """Run a command so that its processes end with it and a stopping signal ends it within seconds.

    * ``SIGINT`` and ``SIGTERM`` raise ``KeyboardInterrupt`` in the main thread (raised again every
      :data:`_RERAISE_S` while no code has seen it, :func:`stop_seen`; the process exits after
      :data:`_STOP_DEADLINE_S` whatever it waits on); :func:`stop_signal` says which came.
    * ``SIGXFSZ`` is ignored: a file-size limit (``ulimit -f``) then fails the write with ``EFBIG``, which
      the command reports in one line; the signal's default is to kill the process without a word. CPython
      ignores it at start-up already; a program that embeds the command may have restored the default.
    * Every process forked meanwhile ignores the stopping signals (the command ends it) and is killed when
      its parent dies, ``kill -9`` included (``PR_SET_PDEATHSIG`` on Linux, else a thread watching the
      parent): a killed build left its readers running for minutes.
    * A worker of a launched run (``torchrun``, ``accelerate launch``, the package's launcher) watches its
      launcher and, on several nodes, the other nodes (:mod:`hf_unified_embed.utils.agent_watch`); when the
      run is lost it stops as above, with one ``error:`` line (:func:`stop_lost_run`).

    Only in the main thread (signal handlers can be set nowhere else); elsewhere the command just runs.
    """
    global _COMMAND, _HOOK_REGISTERED, _STOPPED_BY, _LOST
    if threading.current_thread() is not threading.main_thread() or _COMMAND is not None:
        yield
        return
    if sys.platform.startswith("linux") and _Forks.libc is None:
        _Forks.libc = ctypes.CDLL(None, use_errno=True)
    if not _HOOK_REGISTERED:
        os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
        _HOOK_REGISTERED = True
    command = _COMMAND = _Command()
    _STOPPED_BY = _LOST = None
    _REPORTED.clear()
    previous = {signum: signal.signal(signum, _on_stop_signal) for signum in STOP_SIGNALS}
    if hasattr(signal, "SIGXFSZ"):
        previous[signal.SIGXFSZ] = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    unraisable_hook = sys.unraisablehook
    sys.unraisablehook = _quiet_unraisable(unraisable_hook)
    _Forks.active = True
    try:
        with watching_the_run(stop_lost_run) as command.watch:
            yield
    finally:
        sys.unraisablehook = unraisable_hook
        command.seen.set()  # first: no stop is raised again from here on (the caller catches one raised before)
        _Forks.active = False
        command.ended.set()
        _COMMAND = None
        for signum, handler in previous.items():
            signal.signal(signum, handler)
