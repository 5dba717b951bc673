"""The quality report's rows of the shipped recipe: ``examples/recipes/train.yaml`` as users run it.

The ``recipe`` row is the recipe file loaded as it is, pointed at the report's data — the shared train
files built with the build recipe's instructions (``examples/recipes/sample.yaml``, the recipe ``make
demo`` builds) — with nothing else changed: its tasks, losses, negatives, sampler and per-task batch
sizes, learning rate and one epoch. What the bench sets is what a run needs and a model does not
depend on: the data folder, the output folder, the seed, the device, no checkpoints, no evaluation inside
the run (every model is scored alike afterwards), and ``--max-steps`` for a smoke run only.

A lever row is ``recipe`` followed by ``+levers`` (``RECIPE_LEVERS``, in that order), each a change of
the recipe: ``recipe+batch128`` (a larger in-batch pool on bounded
memory: gradient-cached retrieval loss), ``recipe+keep-base`` (self-distillation from the base),
``recipe+semeval12`` (more STS pairs: the SemEval 2012 train files),
``recipe+gur`` (a task of sentence pairs GUR's rule mines from the raw documents of the training corpora,
WikiQA's paragraphs and the MS MARCO passages: retrieval signal without labels),
``recipe+no-instructions`` (the same data, the collator adds no instructions: what instructions do),
``recipe+mined`` (the retrieval tasks' negatives mined by the base with a positive-aware filter, NV-Retriever's
TopK-PercPos: ``mine_hard_negatives`` with its defaults, ``relative_margin`` 0.05 — a candidate scoring above
95 % of the positive's score is dropped as a likely false negative; four per query, of which the recipe
takes its ``negatives_per_query``), ``recipe+lora8`` / ``recipe+lora32`` (LoRA adapters of rank 8 / 32 on
the encoder, PEFT's default targets, merged into a plain folder, at ten times the learning rate),
``recipe+freeze2`` / ``recipe+freeze4`` (the embeddings and the lowest 2 / 4 of MiniLM's 6 layers frozen),
``recipe+llrd`` (layer-wise learning-rate decay 0.8), ``recipe+2ep`` (two epochs: the recipe's until the choice rule, which counts
the neighbours kept, chose one; the tables measured before then name the one-epoch rows ``+1ep`` and the
two-epoch recipe ``recipe``). Any of these rows followed by ``+kept-merge`` is that
seed's run interpolated with the base (λ chosen by ``merge search`` on the dev suite under the keep-the-base
constraint, as the main setting's ``+kept-merge``): it trains nothing and needs its run's row first.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
#: The recipe a user runs (``hf-unified-embed train examples/recipes/train.yaml``; ``make demo`` trains the same).
SHIPPED_RECIPE = REPO / "examples" / "recipes" / "train.yaml"
#: The build recipe of the data the shipped recipe trains on (``make demo``): its instructions per source.
BUILD_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"
#: In-batch pool of the ``+batch128`` lever for the WikiQA tasks (872 questions each: 7 steps an epoch) and
#: the mini-batch that bounds its memory (GradCache: activations of 32 rows at a time). TrecQA (83 usable
#: questions) keeps the recipe's 16: one padded batch would repeat its rows as in-batch negatives.
LARGE_BATCH = 128
LARGE_BATCH_TASKS = ("wikiqa", "wikiqa-passages")
MINI_BATCH = 32
#: Extra STS data of the ``+semeval12`` lever: the task name in the report's data (``MAIN_SOURCES``).
EXTRA_STS_TASK = "semeval12"
#: The ``+gur`` lever's task: sentence pairs mined by GUR's rule (the ``raw-text`` format's defaults) from the raw
#: documents of the training corpora, without labels: WikiQA's paragraphs (each question's candidate sentences
#: joined, as ``wikiqa-passages`` reads them) and the text of the MS MARCO passages the suite retrieves from
#: (``quality_sources.gur_documents``). Built beside the other tasks; only the lever trains it.
GUR_TASK = "gur-pairs"
#: The folder (beside the report's data) of the ``+mined`` lever's data: the same tasks, the retrieval
#: tasks' negatives mined by the base (``Bench.mined_folder`` in ``quality_run`` writes it once per output folder).
MINED_DATA = "recipe-mined-data"
#: The ``+llrd`` lever's factor per layer: MiniLM's embeddings train at 0.8^7 ≈ 0.21 of the top rate.
LAYERWISE_DECAY = 0.8


def shipped_recipe() -> dict[str, Any]:
    """``examples/recipes/train.yaml`` as a mapping."""
    recipe: dict[str, Any] = yaml.safe_load(SHIPPED_RECIPE.read_text(encoding="utf-8"))
    return recipe


def build_instructions() -> dict[str, dict[str, str]]:
    """``{source name: {query_instruction, document_instruction}}`` of the shipped build recipe."""
    recipe = yaml.safe_load(BUILD_RECIPE.read_text(encoding="utf-8"))
    keys = ("query_instruction", "document_instruction")
    return {source["name"]: {key: source[key] for key in keys if key in source} for source in recipe["sources"]}


def _large_batch(recipe: dict[str, Any]) -> None:
    retrieval = recipe["losses"]["retrieval"]
    recipe["losses"]["retrieval"] = {**retrieval, "mini_batch_size": MINI_BATCH}
    sizes = dict(recipe["sampler"].get("batch_sizes") or {})
    recipe["sampler"]["batch_sizes"] = {**sizes, **dict.fromkeys(LARGE_BATCH_TASKS, LARGE_BATCH)}


def _keep_base(recipe: dict[str, Any]) -> None:
    recipe["keep_base"] = {"weight": 1.0}


def _extra_sts(recipe: dict[str, Any]) -> None:
    recipe["data"]["tasks"] = [*recipe["data"]["tasks"], EXTRA_STS_TASK]


def _two_epochs(recipe: dict[str, Any]) -> None:
    recipe["training_args"]["num_train_epochs"] = 2


def _gur_pairs(recipe: dict[str, Any]) -> None:
    recipe["data"]["tasks"] = [*recipe["data"]["tasks"], GUR_TASK]


def _no_instructions(recipe: dict[str, Any]) -> None:
    recipe["instructions"] = False


def _mined(recipe: dict[str, Any]) -> None:
    recipe["data"]["path"] = str(Path(recipe["data"]["path"]).parent / MINED_DATA)


def _lora(rank: int) -> Callable[[dict[str, Any]], None]:
    def lora(recipe: dict[str, Any]) -> None:
        # PEFT's own targets for BERT (query, value), alpha = 2 × rank, folded into a plain folder; LoRA's usual
        # learning rate, ten times the full fine-tune's (its updates are low-rank and start at zero).
        recipe["peft"] = {"r": rank, "lora_alpha": 2 * rank, "merge_adapter": True}
        recipe["training_args"]["learning_rate"] = 10 * float(recipe["training_args"]["learning_rate"])

    return lora


def _freeze(layers: int) -> Callable[[dict[str, Any]], None]:
    def freeze(recipe: dict[str, Any]) -> None:
        recipe["model"] = {**(recipe.get("model") or {}), "freeze_layers": layers}

    return freeze


def _layerwise_decay(recipe: dict[str, Any]) -> None:
    recipe["model"] = {**(recipe.get("model") or {}), "layerwise_lr_decay": LAYERWISE_DECAY}


#: The changes a lever row makes to the shipped recipe, in the order a row's name lists them.
RECIPE_LEVERS: dict[str, Callable[[dict[str, Any]], None]] = {
    "batch128": _large_batch,
    "keep-base": _keep_base,
    "semeval12": _extra_sts,
    "gur": _gur_pairs,
    "no-instructions": _no_instructions,
    "mined": _mined,
    "lora8": _lora(8),
    "lora32": _lora(32),
    "freeze2": _freeze(2),
    "freeze4": _freeze(4),
    "llrd": _layerwise_decay,
    "2ep": _two_epochs,
}
#: The rows of the recipe setting the report runs by default (every combination is accepted by name): the
#: recipe, each lever, and the recipe at two epochs with and without the merge with the base.
RECIPE_ROWS = (
    "recipe",
    *(f"recipe+{lever}" for lever in RECIPE_LEVERS),
    "recipe+2ep+kept-merge",
)


#: The last step a recipe row may end with: its run interpolated with the base (``Bench.kept_merge``).
KEPT_MERGE = "kept-merge"


def merged_run(row: str) -> str | None:
    """The recipe row a ``+kept-merge`` row merges with the base (``recipe+kept-merge`` → ``recipe``), else ``None``."""
    run, plus, last = row.rpartition("+")
    return run if plus and last == KEPT_MERGE and is_recipe_row(run) else None


def recipe_levers(row: str) -> list[str]:
    """The levers of a recipe row: ``recipe+batch128+keep-base`` → ``["batch128", "keep-base"]``; those of the
    run a ``+kept-merge`` row merges."""
    head, *levers = (merged_run(row) or row).split("+")
    if head != "recipe" or any(lever not in RECIPE_LEVERS for lever in levers):
        raise ValueError(
            f"{row!r}: expected recipe followed by +levers from {list(RECIPE_LEVERS)}, optionally then +{KEPT_MERGE}"
        )
    if levers != sorted(levers, key=list(RECIPE_LEVERS).index) or len(set(levers)) != len(levers):
        raise ValueError(f"{row!r}: levers must appear once each, in the order {list(RECIPE_LEVERS)}")
    return levers


def is_recipe_row(row: str) -> bool:
    return row.split("+", 1)[0] == "recipe"


def recipe_tasks() -> list[str]:
    """Every task a recipe row may train: the shipped recipe's and the levers' (built once for all rows)."""
    return [*shipped_recipe()["data"]["tasks"], EXTRA_STS_TASK, GUR_TASK]


def recipe_row_recipe(
    row: str, options: argparse.Namespace, data: Path, name: str, run_settings: Mapping[str, Any]
) -> dict[str, Any]:
    """The recipe mapping of a recipe row: train.yaml pointed at ``data``, then the row's levers.

    Args:
        row: ``recipe`` or ``recipe+levers``.
        options: the report's command line (``--base-model``, ``--output-dir``, ``--seed``, ``--max-steps``).
        data: the unified folder built from ``--data-root`` with the build recipe's instructions.
        name: the run's folder under ``--output-dir``.
        run_settings: training arguments of the run, not of the model (seed, device, no checkpoints).

    Returns:
        The mapping for ``recipe_from_dict``.
    """
    from hf_unified_embed.recipe import packaged_minilm_path

    recipe = copy.deepcopy(shipped_recipe())
    base = str(options.base_model)
    recipe.update(
        base_model=None if base == str(packaged_minilm_path()) else base,
        model_name=f"all-MiniLM-L6-v2 {name} (bench/quality.py)",
        data={**recipe["data"], "path": str(data)},
        training_args={**recipe["training_args"], **run_settings},
        evaluation=None,
        output_dir=str(options.output_dir / name),
        seed=options.seed,
    )
    for lever in recipe_levers(row):
        RECIPE_LEVERS[lever](recipe)
    return recipe
