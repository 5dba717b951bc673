"""The bundled sample: a few hundred rows of six real sources, their recipes and evaluation suites.

The wheel carries the sample as package data (``hf_unified_embed/sample/``, ``pyproject.toml``'s
``force-include``); a source checkout reads it from ``examples/``. :func:`sample_recipe` gives a recipe's
path wherever this copy of the package keeps it, so a script runs from any folder after ``pip install``
(``build_unified(sample_recipe())``); ``hf-unified-embed sample DIR`` copies the whole sample into a
folder of the user's to edit. Paths inside the recipes are relative to their files, so both work as they are.
"""

from __future__ import annotations

from pathlib import Path

from hf_unified_embed.errors import ArgumentError, InputNotFoundError, shown
from hf_unified_embed.utils.arguments import checked_arguments

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
#: Where a source checkout keeps it (the repository root holds ``examples/``).
_CHECKOUT = Path(__file__).resolve().parents[2]


def _located(relative: str) -> Path | None:
    candidates = (PACKAGED / relative, _CHECKOUT / SAMPLE_LAYOUT[relative])
    return next((candidate for candidate in candidates if candidate.exists()), None)


def sample_sources() -> dict[str, Path]:
    """Each file or folder of the sample (:data:`SAMPLE_LAYOUT`'s keys) and where this copy of the package has it.

    Raises:
        InputNotFoundError: neither the installed package nor a source checkout holds a part of the sample.
    """
    sources = {}
    for relative in SAMPLE_LAYOUT:
        found = _located(relative)
        if found is None:
            raise InputNotFoundError(
                f"the bundled sample's {relative} is missing from this installation (looked in "
                f"{PACKAGED / relative} and {_CHECKOUT / SAMPLE_LAYOUT[relative]}); reinstall hf-unified-embed"
            )
        sources[relative] = found
    return sources


@checked_arguments
def sample_recipe(name: str = "sample") -> Path:
    """The path of one of the bundled sample's recipes, in whichever copy of the package is installed.

    Args:
        name: ``"sample"``, the build recipe (raw files → unified dataset, for :func:`build_unified`), or
            ``"train_sample"``, the training recipe (for :func:`train_from_recipe`; it reads the dataset
            that ``hf-unified-embed build`` writes next to it, so copy the sample first with
            ``hf-unified-embed sample DIR`` to train from it).

    Example::

        from hf_unified_embed import build_unified, sample_recipe

        train = build_unified(sample_recipe())  # a DatasetDict with one dataset per task

    Raises:
        hf_unified_embed.errors.ArgumentError: ``name`` is not one of the sample's recipes (a ``ValueError``).
        InputNotFoundError: the installation lacks the recipe or the data it reads.
    """
    recipes = sorted(Path(key).stem for key in SAMPLE_LAYOUT if key.startswith("recipes/"))
    if name not in recipes:
        raise ArgumentError(
            f"sample_recipe: name {shown(name)} is no recipe in the bundled sample; choose one of {recipes}"
        )
    sources = sample_sources()  # the data the recipe reads must be there too, not only the recipe
    return sources[f"recipes/{name}.yaml"]
