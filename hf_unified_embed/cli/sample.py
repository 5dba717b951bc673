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
import shutil
from pathlib import Path
from typing import Any

#: The sample's files: path in the written folder → path in a source checkout. The wheel's copy
#: (``hf_unified_embed/sample/<path>``) is made from the same paths (a test keeps the two in step), and
#: the data are exactly the files the recipes and suites read (the raw training files, the held-out
#: ``eval/`` sets, the BEIR folder) with their licenses.
SAMPLE_LAYOUT: dict[str, str] = {
    "data/LICENSES.md": "examples/data/LICENSES.md",
    "data/stsb-train.tsv": "examples/data/stsb-train.tsv",
    "data/sick-train.txt": "examples/data/sick-train.txt",
    "data/wikiqa-train.tsv": "examples/data/wikiqa-train.tsv",
    "data/trecqa-train.csv": "examples/data/trecqa-train.csv",
    "data/msrp-train.tsv": "examples/data/msrp-train.tsv",
    "data/msmarco-dl-sample": "examples/data/msmarco-dl-sample",
    "data/eval": "examples/data/eval",
    "recipes/sample.yaml": "examples/recipes/sample.yaml",
    "recipes/train_sample.yaml": "examples/recipes/train_sample.yaml",
    "suites/demo.yaml": "examples/suites/demo.yaml",
    "suites/sample.yaml": "examples/suites/sample.yaml",
}
#: Where an installed package keeps the sample.
PACKAGED = Path(__file__).resolve().parent.parent / "sample"


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


def sample_sources() -> dict[str, Path]:
    """Each file or folder of the sample (:data:`SAMPLE_LAYOUT`'s keys) and where this copy of the package has it.

    Raises:
        InputNotFoundError: neither the installed package nor a source checkout holds a part of the sample.
    """
    from hf_unified_embed.errors import InputNotFoundError

    checkout = Path(__file__).resolve().parents[2]
    sources = {}
    for relative, in_checkout in SAMPLE_LAYOUT.items():
        candidates = (PACKAGED / relative, checkout / in_checkout)
        found = next((candidate for candidate in candidates if candidate.exists()), None)
        if found is None:
            raise InputNotFoundError(
                f"the bundled sample's {relative} is missing from this installation (looked in "
                f"{candidates[0]} and {candidates[1]}); reinstall hf-unified-embed"
            )
        sources[relative] = found
    return sources


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
    print(f"wrote the bundled sample to {target}")
    print("next (from this folder; paths inside the recipes are relative to their files):")
    print(f"  hf-unified-embed build {folder}/recipes/sample.yaml -o {folder}/outputs/data")
    print(f"  hf-unified-embed train {folder}/recipes/train_sample.yaml  # add --max-steps 2 for a first look")
    print(
        f"  hf-unified-embed evaluate {folder}/outputs/model {folder}/suites/demo.yaml -o {folder}/outputs/results.json"
    )
    print(f"  hf-unified-embed push {folder}/outputs/model YOUR_NAME/sample-model --dry-run")
    return 0
