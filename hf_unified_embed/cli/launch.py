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
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from hf_unified_embed.cli.main import INPUT_ERROR_EXIT_CODE
from hf_unified_embed.errors import shown

#: How the workers run this package (``-m`` is added unless the command line already names one of them).
PACKAGE_MODULES = ("hf_unified_embed", "hf_unified_embed.cli.main")
#: torchrun's logger for starting and stopping workers ("Sending process ... closing signal", "failed (exitcode: 2)").
WORKER_LOGGER = "torch.distributed.elastic.multiprocessing.api"


class HeldRecords(logging.Filter):
    """Hold a logger's records while a launch runs; let them out at its end unless :meth:`drop` was called."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger = logger
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False

    def drop(self) -> None:
        self.records.clear()

    def __enter__(self) -> HeldRecords:
        self.logger.addFilter(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.logger.removeFilter(self)
        for record in self.records:
            self.logger.handle(record)


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
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record
    from torch.distributed.run import parse_args, run

    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    problem = worker_command(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return INPUT_ERROR_EXIT_CODE
    with HeldRecords(logging.getLogger(WORKER_LOGGER)) as held:
        try:
            record(run)(args)
        except ChildFailedError as failure:
            _, first = failure.get_first_failure()
            if first.exitcode != INPUT_ERROR_EXIT_CODE:
                raise  # torchrun's own report, after the held log lines
            held.drop()  # rank 0 has said what is wrong in its one `error:` line
            return INPUT_ERROR_EXIT_CODE
    return 0


if __name__ == "__main__":
    sys.exit(main())
