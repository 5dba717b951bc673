"""``hf-unified-embed train RECIPE.yaml``: one SentenceTransformerTrainer run from a recipe."""

from __future__ import annotations

import argparse
from typing import Any

from hf_unified_embed.cli.arg_types import integer, path
from hf_unified_embed.utils.processes import end_process_group, is_main_process, quiet_progress_bars


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model from a recipe YAML",
        description=(
            "Train as RECIPE says (base model, unified data, loss per task type, curriculum, sampler, "
            "training arguments, LoRA, evaluation suite, Hub repo). Works unchanged under "
            "`torchrun --nproc_per_node=N` or `accelerate launch`. The recipe is checked before any data "
            "loads; with --check the resolved plan is printed and nothing is trained."
        ),
    )
    parser.add_argument("recipe", type=path, help="recipe YAML (see hf_unified_embed.recipe.train_recipe)")
    parser.add_argument("-o", "--output-dir", help="override the recipe's output_dir")
    parser.add_argument("--max-steps", type=integer, help="override training_args.max_steps (quick runs)")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    parser.add_argument(
        "--check",
        action="store_true",
        help="check the recipe, load the data and the model, print tasks, rows, losses with their columns, "
        "steps per task and the sampler, then exit without training",
    )
    parser.set_defaults(func=run_train)


def run_train(args: argparse.Namespace) -> int:
    from hf_unified_embed.recipe.preflight import quick_preflight
    from hf_unified_embed.recipe.train_recipe import load_train_recipe

    recipe = load_train_recipe(args.recipe)
    if args.output_dir is not None:  # an empty -o (an unset shell variable) is refused, never ignored
        recipe.output_dir = args.output_dir
    if args.max_steps is not None:
        recipe.training_args["max_steps"] = args.max_steps
    # A typo is reported before the training stack (torch, transformers, sentence-transformers) is imported.
    quick_preflight(recipe)
    if not is_main_process():
        quiet_progress_bars()  # rank 0 draws the run's bars, and its error line starts a line of its own
    from hf_unified_embed.recipe.run import check_recipe, train_from_recipe

    if args.check:
        plan = check_recipe(recipe, overwrite=args.overwrite)
        if is_main_process():
            print(plan)
        return 0
    outcome = train_from_recipe(recipe, overwrite=args.overwrite)
    end_process_group()
    if not is_main_process():
        return 0
    if outcome.evaluation is not None:
        print(outcome.evaluation.format_table())
    loss = "n/a" if outcome.train_loss is None else f"{outcome.train_loss:.4f}"
    print(f"\ntrained model (mean training loss {loss}) written to {outcome.model_dir}")
    return 0
