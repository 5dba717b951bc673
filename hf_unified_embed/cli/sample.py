"""``hf-unified-embed sample DIR``: write the bundled sample (raw data, recipes, suites) into a new folder.

The sample is the repository's ``examples/`` subset that the quick start needs: a few hundred rows of
each real source (``data/``, with their licenses), the build recipe ``recipes/sample.yaml``, the training
recipe ``recipes/train_sample.yaml`` and the evaluation suites ``suites/demo.yaml`` (held-out sets) and
``suites/sample.yaml``. The wheel carries it as package data (``hf_unified_embed/sample/``,
``pyproject.toml``'s ``force-include``); a source checkout reads it from ``examples/``. Paths inside the
recipes are relative to their files, so the written folder works wherever it is.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
from pathlib import Path
from typing import Any

from hf_unified_embed.data.bundled_sample import sample_sources


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sample",
        help="write the bundled sample data, recipes and suites into a new folder",
        description=(
            "Write the bundled sample into DIR: raw files of six real sources (data/, a few hundred rows "
            "each, with their licenses), the build recipe recipes/sample.yaml, the training recipe "
            "recipes/train_sample.yaml and the evaluation suites suites/demo.yaml and suites/sample.yaml; "
            "then print the commands that build, train and evaluate with them."
        ),
    )
    # A str: an empty value (an unset shell variable) is refused by name, not read as ".".
    parser.add_argument("output", metavar="DIR", help="folder to create (refused if it exists and is not empty)")
    parser.add_argument("--overwrite", action="store_true", help="replace a sample folder this tool wrote")
    parser.set_defaults(func=run_sample)


def write_sample(output: str | Path, *, overwrite: bool = False) -> Path:
    """Copy the sample into the new folder ``output`` (whole or not at all); return its absolute path.

    Args:
        output: the folder to create.
        overwrite: replace ``output`` if it is a folder this tool wrote (a sample written before).

    Raises:
        OutputError: ``output`` is not a new or empty folder (or a tool-written one with ``overwrite``).
    """
    from hf_unified_embed.utils.outputs import StagedOutput, check_output

    check_output(output, overwrite=overwrite)  # before looking for the sample: a bad output is the first error
    sources = sample_sources()
    with StagedOutput(output, overwrite=overwrite) as stage:
        for relative, source in sources.items():
            target = stage.path / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", ".*"))
            else:
                shutil.copyfile(source, target)
    return stage.target


def run_sample(args: argparse.Namespace) -> int:
    target = write_sample(args.output, overwrite=args.overwrite)
    folder = args.output.rstrip("/") or args.output
    if folder.startswith("~"):
        # A folder named "~" in the current one: a command's Path.expanduser would read even "./~/x" (pathlib
        # drops the "./") as the home folder; its absolute path is read as it is.
        folder = str(target)
    elif folder.startswith("-"):
        folder = f"./{folder}"  # not an option to the command's parser

    def path(relative: str) -> str:
        # Quoted for the shell: a folder with a space or a quote must work when the line is pasted.
        return shlex.quote(f"{folder}/{relative}")

    print(f"wrote the bundled sample to {target}")
    print("next (from this folder; paths inside the recipes are relative to their files):")
    print(f"  hf-unified-embed build {path('recipes/sample.yaml')} -o {path('outputs/data')}")
    print(f"  hf-unified-embed train {path('recipes/train_sample.yaml')}  # add --max-steps 2 for a first look")
    print(
        f"  hf-unified-embed evaluate {path('outputs/model')} {path('suites/demo.yaml')} -o {path('outputs/results.json')}"
    )
    print(f"  hf-unified-embed push {path('outputs/model')} YOUR_NAME/sample-model --dry-run")
    return 0
