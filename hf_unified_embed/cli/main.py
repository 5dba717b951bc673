"""Entry point of the ``hf-unified-embed`` console script.

Each subcommand module exposes ``register(subparsers)``, which adds its parsers and sets
``func(args) -> int`` as the handler. Modules are listed here rather than discovered so that the
order of ``--help`` is stable.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from hf_unified_embed import __version__

COMMAND_MODULES: tuple[str, ...] = ("data", "publish", "curriculum", "train", "merge", "evaluate")


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-unified-embed",
        description="Unified retrieval + STS embedding training on the Hugging Face stack.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        importlib.import_module(f"hf_unified_embed.cli.{module}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return int(args.func(args) or 0)
    except (CLIError, FileNotFoundError, FileExistsError, ValueError) as error:
        # Input problems (UnifiedSchemaError is a ValueError) carry their own location; no traceback.
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
