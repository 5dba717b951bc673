"""Entry point of the ``hf-unified-embed`` console script (also ``python -m hf_unified_embed``).

Each subcommand module exposes ``register(subparsers)``, which adds its parsers and sets
``func(args) -> int`` as the handler. Modules are listed here rather than discovered so that the
order of ``--help`` is stable.

Errors: an :class:`~hf_unified_embed.errors.HfUnifiedEmbedError` (a problem in an input, recipe or
output location) is printed as one line, ``error: <where>: <what>``, and the exit code is 2. Under
``torchrun`` / ``accelerate launch`` the process of rank 0 prints it and exits 2; the others wait until
the launcher stops them (if it does not within :data:`NON_MAIN_EXIT_DELAY_S`, they report it themselves).
``python -m hf_unified_embed.cli.launch`` (:mod:`hf_unified_embed.cli.launch`) keeps that exit code 2, which
torchrun turns into 1.
Any other exception is a bug: it keeps its traceback and exit code 1.

A full storage (``ENOSPC``, ``EFBIG`` under ``ulimit -f``, ``EDQUOT``, ``datasets``' "Not enough disk space"),
wherever a write hits it, is one line too, naming the file and the cause, and so is a path too long for the
system (``ENAMETOOLONG``), naming the path and the limit (:mod:`hf_unified_embed.utils.write_failures`), exit
code 2.

Ctrl-C (``SIGINT``) or ``kill`` (``SIGTERM``) prints one line, ``interrupted``, and exits with 128 plus the
signal (130 after Ctrl-C), as a shell does, within seconds whatever the command was doing, and the processes
it started end with it (:func:`~hf_unified_embed.utils.processes.command_lifetime`); the output being written
is not left behind (:class:`~hf_unified_embed.utils.outputs.StagedOutput` removes its staging folder on any
exception, this one included).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from hf_unified_embed.errors import HfUnifiedEmbedError, one_line
from hf_unified_embed.utils.processes import (
    command_lifetime,
    exit_process,
    is_main_process,
    report_stop,
    stop_seen,
    stop_signal,
    wait_for_a_lost_run,
)
from hf_unified_embed.utils.redaction import RedactingFilter
from hf_unified_embed.utils.write_failures import failure_line

COMMAND_MODULES: tuple[str, ...] = ("sample", "data", "publish", "curriculum", "mine", "train", "merge", "evaluate")

#: Exit code of an input error (argparse uses the same for bad options).
INPUT_ERROR_EXIT_CODE = 2
#: The longest error line printed: values in messages are bounded (``errors.shown``); this bounds the rest.
ERROR_LINE_LIMIT = 4000
#: How long a process other than rank 0 waits before exiting on an input error. The launcher stops it as
#: soon as rank 0 has reported the same error and exited, so the wait only ends on its own when rank 0
#: did not hit it (or is far behind on a loaded machine): then this process reports it.
NON_MAIN_EXIT_DELAY_S = 60.0
#: Allocations between two collections of the youngest generation in the console script's process (Python's
#: default: 700). A command imports datasets, pyarrow, pandas (and torch and transformers to train): hundreds of
#: thousands of objects that live until exit, which the default threshold scans again and again while they are
#: created. At 10,000: importing datasets 0.77 -> 0.71 s, sentence-transformers 6.5-6.9 -> 6.1-6.3 s; a 1M-row
#: ``build --num-proc 2`` 0.98x its time (eight paired runs); cyclic garbage is collected as surely, later.
YOUNG_GENERATION_THRESHOLD = 10_000


class VersionAction(argparse.Action):
    """``--version``: print ``hf-unified-embed <release>`` and exit.

    The release comes from the package metadata (:func:`~hf_unified_embed.utils.version.package_version`),
    read only when asked for: importing :mod:`importlib.metadata` and scanning the installed distributions
    would add tens of milliseconds to every command's start.
    """

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(
            option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help="print the installed release and exit"
        )

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        from hf_unified_embed.utils.version import package_version

        print(f"{parser.prog} {package_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-unified-embed",
        description="Unified retrieval + STS embedding training on the Hugging Face stack.",
    )
    parser.add_argument("--version", action=VersionAction)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        importlib.import_module(f"hf_unified_embed.cli.{module}").register(subparsers)
    return parser


class _LineFormatter(logging.Formatter):
    """A warning as ``warning: ...`` on one line, like the command's ``error: ...`` line; ``INFO ...`` with ``-v``."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        if record.levelno >= logging.WARNING:
            return f"{record.levelname.lower()}: {message}"
        return f"{record.levelname} {message}"


def _configure_logging(verbose: bool) -> None:
    stderr = logging.StreamHandler()
    stderr.setFormatter(_LineFormatter("%(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[stderr])
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter())


def main(argv: Sequence[str] | None = None) -> int:
    try:
        with command_lifetime():
            return _run(argv)
    except KeyboardInterrupt:  # Ctrl-C or kill, wherever it lands: an error being reported, the command's end
        return _interrupted()


def _run(argv: Sequence[str] | None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        _configure_logging(args.verbose)
        return int(args.func(args) or 0)
    except HfUnifiedEmbedError as error:
        if stop_signal() is not None:  # the stop arrived while an error was being reported
            return _interrupted()
        if not is_main_process():
            # Every process hits the same input error; the launcher stops the whole group as soon as
            # one exits, so the others wait for rank 0 to report it. The launcher's stop ends the wait
            # quietly (as "interrupted", which only rank 0 would print): rank 0 has said what is wrong.
            time.sleep(NON_MAIN_EXIT_DELAY_S)
        print(f"error: {one_line(error, ERROR_LINE_LIMIT)}", file=sys.stderr)
        return INPUT_ERROR_EXIT_CODE
    except Exception as error:
        wait_for_a_lost_run()  # a collective failed because a node is lost: its stop names the node
        if stop_signal() is not None:
            # A library replaced the KeyboardInterrupt with an error of its own while it stopped
            # (datasets' pool asks its lost tasks for their results: multiprocess.TimeoutError).
            return _interrupted()
        line = failure_line(error)  # a full storage or a path too long, wherever a library met it
        if line is None:
            raise  # a bug: its traceback
        print(f"error: {one_line(line, ERROR_LINE_LIMIT)}", file=sys.stderr)
        return INPUT_ERROR_EXIT_CODE


def _interrupted() -> int:
    stop_seen()
    return report_stop()  # `interrupted` (rank 0 only), or the `error:` line of a launched run that was lost


def run() -> NoReturn:
    """The console script and ``python -m hf_unified_embed``: :func:`main`, then exit with its code.

    By then everything is written and closed, and what is still alive is only freed by the exit. Python's
    shutdown would first walk every object the libraries created (a full collection: 0.3 s of a 1M-row
    ``build``'s 8 s); frozen, they are left to the exit, as anything alive at exit may be. Collections
    are rarer in this process (:data:`YOUNG_GENERATION_THRESHOLD`); importing this module changes nothing.
    """
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, *gc.get_threshold()[1:])
    code = main()
    gc.freeze()
    exit_process(code)  # sys.exit; at once after a lost launched run


if __name__ == "__main__":
    run()
