"""``python -m hf_unified_embed.cli.launch`` (``hf-unified-embed-torchrun``): torchrun for this package's commands.

::

    python -m hf_unified_embed.cli.launch --nproc_per_node=2 train recipe.yaml
    # runs what `torchrun --nproc_per_node=2 -m hf_unified_embed train recipe.yaml` runs

An input error makes every worker exit with code 2 after rank 0 printed the one ``error:`` line
(:mod:`hf_unified_embed.cli.main`). torchrun's elastic agent turns any worker's non-zero exit into
its own exit code 1 with a ``ChildFailedError`` report (a traceback and some forty lines), so a recipe
typo would read as a crash. This launcher runs torchrun's own ``run`` — every torchrun option works
the same — and, when the first worker to fail exited with code 2, exits with code 2 and nothing more:
the agent's log lines about stopping the other workers are dropped as well. Any other failure (a bug,
a killed worker) is reported exactly as torchrun reports it.

Ctrl-C or ``kill`` (``SIGINT`` / ``SIGTERM``) makes torchrun's agent stop the workers and raise its
``SignalException``, a traceback of some thirty lines and exit code 1; this launcher prints ``interrupted``
and exits 130 / 143, as every command of the package does, and its workers (told by :data:`LAUNCHER_ENV`)
leave that line to it. On several nodes, a store that stops answering (the node hosting it is lost) is one
``error:`` line and exit code 2. The workers end with the launcher, ``kill -9`` included
(:mod:`hf_unified_embed.utils.agent_watch`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType, TracebackType
from typing import Any

from hf_unified_embed.cli.main import INPUT_ERROR_EXIT_CODE
from hf_unified_embed.errors import shown
from hf_unified_embed.utils.processes import LAUNCHER_ENV, STOP_SIGNALS

#: How the workers run this package (``-m`` is added unless the command line already names one of them).
PACKAGE_MODULES = ("hf_unified_embed", "hf_unified_embed.cli.main")
#: torchrun's loggers for starting and stopping workers ("Sending process ... closing signal", "failed (exitcode:
#: 2)"), for its agent ("Received SIGINT death signal, shutting down workers") and its rendezvous ("failed to send
#: a keep-alive heartbeat").
HELD_LOGGERS = (
    "torch.distributed.elastic.multiprocessing.api",
    "torch.distributed.elastic.agent.server.api",
    "torch.distributed.elastic.rendezvous.dynamic_rendezvous",
)


class HeldRecords(logging.Filter):
    """Hold loggers' records while a launch runs; let them out at its end unless :meth:`drop` was called."""

    def __init__(self, *names: str) -> None:
        super().__init__()
        self.loggers = [logging.getLogger(name) for name in names]
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False

    def drop(self) -> None:
        self.records.clear()

    def __enter__(self) -> HeldRecords:
        for logger in self.loggers:
            logger.addFilter(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for logger in self.loggers:
            logger.removeFilter(self)
        for record in self.records:
            logging.getLogger(record.name).handle(record)


def worker_command(args: Any) -> str | None:
    """Make torchrun's parsed ``args`` run ``python -m hf_unified_embed COMMAND ...``; a problem, or ``None``.

    ``launch --nproc_per_node=2 train r.yaml`` and ``launch --nproc_per_node=2 -m hf_unified_embed train
    r.yaml`` are the same launch; any other script or module is not this package's command line.
    """
    if args.module or args.no_python:
        if args.module and args.training_script in PACKAGE_MODULES:
            return None
        return f"this launcher runs hf_unified_embed's commands; give the command (train, ...) instead of {shown(args.training_script)}"
    args.training_script_args = [args.training_script, *args.training_script_args]
    args.training_script = PACKAGE_MODULES[0]
    args.module = True
    return None


def main(argv: Sequence[str] | None = None) -> int:
    from torch.distributed import DistNetworkError, DistStoreError
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record
    from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError
    from torch.distributed.run import parse_args, run

    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    problem = worker_command(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return INPUT_ERROR_EXIT_CODE
    with HeldRecords(*HELD_LOGGERS) as held, _stops_as_signal_exceptions(), _workers_launched_here():
        try:
            record(run)(args)
        except ChildFailedError as failure:
            _, first = failure.get_first_failure()
            if first.exitcode != INPUT_ERROR_EXIT_CODE:
                raise  # torchrun's own report, after the held log lines
            held.drop()  # rank 0 has said what is wrong in its one `error:` line
            return INPUT_ERROR_EXIT_CODE
        except (RendezvousConnectionError, DistNetworkError, DistStoreError) as lost:
            held.drop()  # the rendezvous' warnings that it could not reach the store, and stopping the workers
            print(f"error: {store_lost(args, lost)}", file=sys.stderr)
            return INPUT_ERROR_EXIT_CODE
        except (SignalException, KeyboardInterrupt) as stop:
            held.drop()  # "Received SIGINT death signal, shutting down workers", "Sending process ... closing signal"
            signum = getattr(stop, "sigval", signal.SIGINT)
            print("interrupted", file=sys.stderr)
            return 128 + int(signum)
    return 0


def store_lost(args: Any, error: BaseException) -> str:
    """The line for a run whose store (hosted by one node's agent) stopped answering: that node is lost."""
    endpoint = args.rdzv_endpoint if args.rdzv_backend != "static" else f"{args.master_addr}:{args.master_port}"
    cause = error.__cause__ or error
    first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    return (
        f"lost the run's rendezvous store at {endpoint or 'the rendezvous endpoint'}: the node that hosts it "
        f"ended or cannot be reached ({first[:200]}); this node's workers were stopped"
    )


def _raise_signal_exception(signum: int, frame: FrameType | None) -> None:
    from torch.distributed.elastic.multiprocessing.api import SignalException

    raise SignalException(f"Process {os.getpid()} got signal: {signal.Signals(signum)}", sigval=signal.Signals(signum))


@contextlib.contextmanager
def _stops_as_signal_exceptions() -> Iterator[None]:
    """``SIGINT`` and ``SIGTERM`` raise torchrun's ``SignalException`` before its agent starts workers too.

    torchrun's agent sets this handler itself when it starts the workers (and then stops them with the same
    signal); before that, during the rendezvous, ``SIGTERM`` would end the launcher without a word.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise_signal_exception) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _workers_launched_here() -> Iterator[None]:
    """Tell the workers (through the environment torchrun hands them) that this launcher prints ``interrupted``.

    The launcher's own environment is restored when the launch ends.
    """
    previous = os.environ.get(LAUNCHER_ENV)
    os.environ[LAUNCHER_ENV] = str(os.getpid())
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(LAUNCHER_ENV, None)
        else:
            os.environ[LAUNCHER_ENV] = previous


if __name__ == "__main__":
    sys.exit(main())
