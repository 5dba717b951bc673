"""The quality report's rows of the main and many-task settings: each a recipe mapping (or a merge).

Every trained row is ``examples/recipes/train.yaml`` with what the command line sets for every row
(``bench_recipe``) and the row's own values (``ROW_SPECS``); the rows of the shipped recipe as it is
are in ``quality_recipe``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from example_cli import recipe_training_args
from quality_recipe import is_recipe_row, recipe_levers, shipped_recipe

MAIN_ROWS = ("base", "st-baseline", "codiemb", "codiemb+curriculum", "hierarchical-merge")

KEEP_ROWS = (
    "codiemb+mined",
    "codiemb+keep-base",
    "codiemb+mined+keep-base",
    "codiemb+kept-merge",
    "codiemb+tau05",
    "codiemb+tau05+mined",
    "codiemb+tau05+kept-merge",
)

MANY_ROWS = ("many-shuffled", "many-curriculum")

#: The rows of the main and many-task settings (the shipped recipe's rows: ``quality_recipe.RECIPE_ROWS``).
ROWS = MAIN_ROWS + KEEP_ROWS + MANY_ROWS

#: The options a keep-the-base row's name may add to ``codiemb``, in the order they are written.
KEEP_OPTIONS = ("tau05", "mined", "keep-base", "kept-merge")

#: The retrieval τ of the ``+tau05`` rows (CoDiEmb's own is 0.02, ``MultiPositiveInfoNCELoss``'s default).
RETRIEVAL_TAU05 = 0.05

#: Data-CUBE's order (train.yaml's comment): task order from the curriculum plan, rows easy → hard.
CURRICULUM_SAMPLER = {"interleave": "round_robin", "instance_order": "easy_to_hard"}

#: sentence-transformers' own loss table: scored pairs → CoSENT; pairs with a class label (MSRP) → OnlineContrastive.
ST_LOSSES = {
    "retrieval": {"name": "MultipleNegativesRankingLoss"},
    "sts": {"name": "CoSENTLoss"},
    "pair_classification": {"name": "OnlineContrastiveLoss"},
}

#: The two runs of the ``hierarchical-merge`` row (its recipe values): an IR-leaning run on the retrieval
#: tasks and an STS-leaning run on every other task (pair classification included), CoDiEmb's losses at
#: their defaults.
MERGE_RUNS: dict[str, dict[str, Any]] = {
    "ir-leaning": {"losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss"}}},
    "sts-leaning": {"losses": {"sts": {"name": "CoDiEmbSTSLoss"}, "pair_classification": {"name": "CoDiEmbSTSLoss"}}},
}


def bench_recipe(
    options: argparse.Namespace, data: Path, tasks: Sequence[str], steps: int, name: str
) -> dict[str, Any]:
    """The shipped recipe with what this command line sets for every row; the rest is train.yaml's.

    Set here: the data (the unified folder built from ``--data-root`` and the setting's ``tasks``), the
    run's name and folder (``--output-dir``/``name``), ``--base-model``, ``--negatives``,
    ``--max-seq-length``, one batch size for every task (``--batch-size``; train.yaml gives the
    retrieval tasks their own), the training arguments (``--learning-rate``, ``steps``, the seed, the
    device, no checkpoints, a log every tenth of the steps) and no evaluation inside the run: every
    model is evaluated alike afterwards (the shared suite at ``--eval-max-seq-length``, the
    forgetting entry). A row's own values (``ROW_SPECS``) then replace whole sections.
    """
    from hf_unified_embed.recipe import packaged_minilm_path

    recipe = shipped_recipe()
    base = str(options.base_model)
    recipe.update(
        base_model=None if base == str(packaged_minilm_path()) else base,
        model_name=f"all-MiniLM-L6-v2 {name} (bench/quality.py)",
        data={"path": str(data), "tasks": list(tasks)},
        negatives_per_query=options.negatives,
        max_seq_length=options.max_seq_length,
        sampler={**recipe["sampler"], "batch_sizes": {}},
        training_args={
            **recipe["training_args"],
            **recipe_training_args(
                options,
                max_steps=steps,
                per_device_train_batch_size=options.batch_size,
                learning_rate=options.learning_rate,
                logging_steps=max(1, steps // 10),
            ),
        },
        evaluation=None,
        output_dir=str(options.output_dir / name),
        seed=options.seed,
    )
    return recipe


def codiemb_loss_tables(options: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recipe ``losses`` sections of the CoDiEmb rows and of the ``+tau05`` rows, as the options set them.

    A ``CoDiEmbSTSLoss`` setting is written only where it differs from the loss's default (τ 0.02 and
    middle-layer weight 1, CoDiEmb's), so that with the default options the STS entry is train.yaml's.
    """
    import inspect

    from hf_unified_embed.losses import CoDiEmbSTSLoss

    sts: dict[str, Any] = {"name": options.sts_loss}
    if options.sts_loss == "CoDiEmbSTSLoss":
        defaults = inspect.signature(CoDiEmbSTSLoss).parameters
        given = {
            "infonce_temperature": options.sts_infonce_temperature,
            "mid_layer_weight": options.sts_mid_layer_weight,
        }
        sts.update({key: value for key, value in given.items() if value != defaults[key].default})
    codiemb = {
        "retrieval": {"name": "MultiPositiveInfoNCELoss"},  # τ 0.02: the loss's default, CoDiEmb's
        "sts": sts,
        "pair_classification": {"name": options.pair_loss},
    }
    return codiemb, {**codiemb, "retrieval": {"name": "MultiPositiveInfoNCELoss", "temperature": RETRIEVAL_TAU05}}


def codiemb_values(options: argparse.Namespace, tau05: bool = False, keep_base: bool = False) -> dict[str, Any]:
    """The recipe values of a CoDiEmb row: its losses, and ``keep_base`` (``--keep-base-weight``) if asked.

    The sampler is train.yaml's: one task per step, tasks shuffled, rows in random order.
    """
    values: dict[str, Any] = {"losses": codiemb_loss_tables(options)[1 if tau05 else 0]}
    if keep_base:
        values["keep_base"] = {"weight": options.keep_base_weight}
    return values


def curriculum_values(method: str) -> Callable[[argparse.Namespace], dict[str, Any]]:
    """The recipe values of a Data-CUBE row: the CoDiEmb losses, a curriculum planned inside the run with
    the base model as teacher (task order by ``method``, the difficulty of every row) and its sampler."""

    def values(options: argparse.Namespace) -> dict[str, Any]:
        return {
            **codiemb_values(options),
            "curriculum": {"teacher": str(options.base_model), "method": method},
            "sampler": CURRICULUM_SAMPLER,
        }

    return values


@dataclass(frozen=True)
class RowSpec:
    """How one row of the table is made.

    Attributes:
        setting: the data and steps it trains (``"main"`` or ``"many"``); ``None``: the untrained base.
        values: the row's recipe values (a function of the options); each replaces that section of
            ``bench_recipe`` whole.
        mined: train on the main setting with its retrieval negatives mined by the base model.
        merge: a row with no recipe form: ``"hierarchical"`` (the ``MERGE_RUNS`` recipes, then CoDiEmb's
            hierarchical merge) or ``"kept"`` (the ``merges`` row of the same seed interpolated with
            the base by ``merge search``).
        merges: the row a kept merge starts from.
    """

    setting: str | None = "main"
    values: Callable[[argparse.Namespace], dict[str, Any]] = field(default=lambda options: {})
    mined: bool = False
    merge: str | None = None
    merges: str | None = None


def keep_row_options(row: str) -> list[str]:
    """The options of a keep-the-base row, ``codiemb+tau05+kept-merge`` → ``["tau05", "kept-merge"]``.

    Options come in the order of ``KEEP_OPTIONS`` (so one configuration has one name, one output folder).
    """
    head, *options = row.split("+")
    if (
        head != "codiemb"
        or any(o not in KEEP_OPTIONS for o in options)
        or options != sorted(options, key=KEEP_OPTIONS.index)
    ):
        raise ValueError(f"{row!r}: expected codiemb followed by +options from {KEEP_OPTIONS}, in that order")
    if len(set(options)) != len(options):
        raise ValueError(f"{row!r}: an option is repeated")
    return options


def keep_row_spec(row: str) -> RowSpec:
    """The spec of ``codiemb`` and of a keep-the-base row, from the options its name lists."""
    options_of_row = keep_row_options(row)
    if options_of_row[-1:] == ["kept-merge"]:
        return RowSpec(merge="kept", merges=row.removesuffix("+kept-merge"))
    return RowSpec(
        values=lambda options: codiemb_values(
            options, tau05="tau05" in options_of_row, keep_base="keep-base" in options_of_row
        ),
        mined="mined" in options_of_row,
    )


#: Every row of the table: the setting it trains and its recipe values, or the merge it is.
ROW_SPECS: dict[str, RowSpec] = {
    "base": RowSpec(setting=None),
    # sentence-transformers' own recipe: its loss table and its PROPORTIONAL multi-dataset batch sampler.
    "st-baseline": RowSpec(values=lambda options: {"losses": ST_LOSSES, "sampler": {"kind": "proportional"}}),
    # Every task order (24 for four tasks, 120 for five).
    "codiemb+curriculum": RowSpec(values=curriculum_values("exact")),
    "hierarchical-merge": RowSpec(merge="hierarchical"),
    **{row: keep_row_spec(row) for row in ("codiemb", *KEEP_ROWS)},
    "many-shuffled": RowSpec("many", values=codiemb_values),
    "many-curriculum": RowSpec("many", values=curriculum_values("annealing")),
}


def row_recipe(
    row: str, options: argparse.Namespace, data: Path, tasks: Sequence[str], steps: int, name: str | None = None
) -> dict[str, Any]:
    """The recipe mapping a row trains (``name``: its run's name, default the row's): ``bench_recipe`` with
    the row's values."""
    spec = ROW_SPECS[row]
    if spec.setting is None or spec.merge is not None:
        raise ValueError(f"{row}: no recipe of its own (it trains nothing, or it is a merge)")
    recipe = bench_recipe(options, data, tasks, steps, name or row)
    recipe.update(spec.values(options))
    return recipe


def row_name(row: str) -> str:
    """A ``--rows`` value: a row of ``ROWS`` or a combination of the recipe's levers (``recipe+batch128+keep-base``)."""
    if row in ROWS:
        return row
    if is_recipe_row(row):
        try:
            recipe_levers(row)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return row
    raise argparse.ArgumentTypeError(f"{row!r}: not one of {', '.join(ROWS)}")
