"""The main job: build data → train the shipped recipe → evaluate it against the base → card.

Runs on the bundled sample (``examples/data``) with the packaged all-MiniLM-L6-v2, on CPU, in a
few minutes::

    make demo                     # or: .venv/bin/python examples/demo.py --output-dir outputs/demo

The training run is ``examples/recipes/train.yaml`` as shipped — the recipe the quality report's choice
rule picked (docs/quality.md, "The shipped recipe"): CoDiEmb's losses, one task per optimizer step in
shuffled task order, one epoch. Only its data folder, output folder, seed and device are the demo's.
``--curriculum`` trains it in Data-CUBE's curriculum instead — a task order planned with the base model
as teacher and easy→hard rows — which is meant to pay with many tasks (the changes train.yaml's header
lists). ``--max-steps N`` stops the run early.

Every stage prints one summary line; its full output goes to ``OUTPUT/logs/``. Everything lands under
``--output-dir``; the last lines print the results table and where each artefact is. Nothing is
downloaded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from example_cli import (
    evaluation_suite,
    example_parser,
    parse_example_args,
    recipe_training_args,
    run_example,
    sample_recipe,
)

EXAMPLES = Path(__file__).resolve().parent
SAMPLE_RECIPE = EXAMPLES / "recipes" / "sample.yaml"
#: The recipe the demo trains: the one the quality report's choice rule ships.
SHIPPED_RECIPE = EXAMPLES / "recipes" / "train.yaml"


class Stages:
    """Runs the demo's stages: one summary line each on the console, the full output in a log file."""

    def __init__(self, output: Path, total: int) -> None:
        self.logs = output / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.total = total
        self.done = 0

    @contextlib.contextmanager
    def run(self, name: str) -> Iterator[dict[str, str]]:
        """Yield a dict; the stage puts its one-line result under ``"summary"``."""
        self.done += 1
        log = self.logs / f"{self.done}-{name.split()[0]}.log"
        outcome: dict[str, str] = {}
        started = time.perf_counter()
        try:
            with (
                open(log, "w", encoding="utf-8") as handle,
                contextlib.redirect_stdout(handle),
                contextlib.redirect_stderr(handle),
            ):
                yield outcome
        except BaseException:
            print(f"[{self.done}/{self.total}] {name}: failed — see {log}", file=sys.stderr, flush=True)
            raise
        seconds = time.perf_counter() - started
        print(f"[{self.done}/{self.total}] {name}: {outcome.get('summary', 'done')} ({seconds:.0f} s)", flush=True)


def quiet_progress_bars() -> None:
    """Progress bars would fill the stage logs with carriage returns; the summaries say what happened."""
    import datasets
    import transformers
    from huggingface_hub.utils import disable_progress_bars

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    disable_progress_bars()


def build_data(output: Path, data_root: Path) -> tuple[Path, str]:
    from hf_unified_embed.data import build_unified, save_unified

    # The sample recipe's files are looked up by name in --data-root (examples/data by default).
    tasks = build_unified(sample_recipe(SAMPLE_RECIPE, data_root))
    data_dir = output / "data"
    save_unified(tasks, data_dir, overwrite=True)
    for name, dataset in tasks.items():
        print(f"  {name:<8} {dataset[0]['task_type']:<20} {len(dataset):>5} rows")
    rows = sum(len(dataset) for dataset in tasks.values())
    return data_dir, f"{len(tasks)} tasks, {rows:,} rows (with licenses and sources in the card) → {data_dir}"


def shipped_recipe() -> dict[str, Any]:
    """``examples/recipes/train.yaml`` as a mapping, its relative paths resolved against its folder."""
    from hf_unified_embed.recipe import load_train_recipe

    return load_train_recipe(SHIPPED_RECIPE).to_dict()


def plan(data_dir: Path, output: Path, args: argparse.Namespace) -> tuple[Path, Any]:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.curriculum import plan_curriculum, plot_difficulty_histograms, plot_task_similarity
    from hf_unified_embed.data import load_unified, save_unified

    curriculum_dir = output / "curriculum"
    tasks = load_unified(data_dir, tasks=shipped_recipe()["data"]["tasks"])
    result = plan_curriculum(
        SentenceTransformer(args.base_model, device=args.device),
        tasks,
        teacher_name="the base model",
        n_samples=64,
        iterations=200_000,
        seed=args.seed,
    )
    save_unified(result.tasks, curriculum_dir, overwrite=True)
    result.plan.save(curriculum_dir / "curriculum_plan.json")
    plot_task_similarity(result.plan, curriculum_dir / "task_similarity.png")
    plot_difficulty_histograms(result.difficulty, curriculum_dir / "difficulty.png", order=result.plan.order)
    return curriculum_dir, result.plan


def train(data_dir: Path, output: Path, args: argparse.Namespace, suite: dict[str, Any], curriculum: bool) -> Any:
    """Train the shipped recipe on ``data_dir``; the run scores ``suite`` and writes it into the card."""
    from hf_unified_embed.recipe import packaged_minilm_path, recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe

    recipe = shipped_recipe()
    if curriculum:
        # The changes train.yaml's header lists for Data-CUBE's curriculum.
        recipe["curriculum"] = {"plan": str((data_dir / "curriculum_plan.json").resolve())}
        recipe["sampler"].update(interleave="round_robin", instance_order="easy_to_hard")
    recipe.update(
        # None keeps the card's base model the Hub id of the packaged copy (base_model_id).
        base_model=None if str(args.base_model) == str(packaged_minilm_path()) else str(args.base_model),
        data={**recipe["data"], "path": str(data_dir.resolve())},
        training_args={**recipe["training_args"], **recipe_training_args(args, disable_tqdm=True)},
        evaluation=suite,
        output_dir=str(output / "model"),
        seed=args.seed,
    )
    return train_from_recipe(recipe_from_dict(recipe, origin=str(SHIPPED_RECIPE)), overwrite=True)


def evaluate(model: str, suite: dict[str, Any], device: str) -> Any:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.evaluation import run_suite

    return run_suite(SentenceTransformer(model, device=device), suite, show_progress_bar=False)


def results_table(results: dict[str, Any]) -> str:
    entries = [(e.name, e.primary_metric) for e in next(iter(results.values())).entries]
    header = ["model", *(f"{name} {metric}" for name, metric in entries)]
    rows = [header] + [
        [model, *(f"{result[name].metrics[metric]:.4f}" for name, metric in entries)]
        for model, result in results.items()
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = example_parser(__file__, __doc__, data_root=EXAMPLES / "data")
    parser.add_argument(
        "--curriculum",
        action="store_true",
        help="plan Data-CUBE's curriculum (task order + easy→hard rows) and train in it instead of shuffled order",
    )
    args = parse_example_args(parser, argv)

    quiet_progress_bars()
    started = time.perf_counter()
    output: Path = args.output_dir
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)
    recipe = shipped_recipe()
    suite = evaluation_suite(args, recipe["evaluation"], data_root=args.data_root)
    stages = Stages(output, total=4 if args.curriculum else 3)

    with stages.run("build the unified dataset") as stage:
        data_dir, stage["summary"] = build_data(output, args.data_root)
    train_dir = data_dir
    if args.curriculum:
        with stages.run("plan the Data-CUBE curriculum") as stage:
            train_dir, curriculum_plan = plan(data_dir, output, args)
            stage["summary"] = f"task order {' → '.join(curriculum_plan.order)} → {train_dir}"
    order = "curriculum order, easy→hard rows" if args.curriculum else "shuffled task order"

    with stages.run(f"train {SHIPPED_RECIPE.relative_to(EXAMPLES.parent)} and evaluate it") as stage:
        outcome = train(train_dir, output, args, suite, args.curriculum)
        loss = f"{outcome.train_loss:.4f}" if outcome.train_loss is not None else "n/a"
        epochs = recipe["training_args"]["num_train_epochs"]
        length = f"{args.max_steps} steps" if args.max_steps > 0 else f"{epochs} epoch{'s' if epochs != 1 else ''}"
        stage["summary"] = f"{length} in {order}, mean loss {loss}; card with the scores → {outcome.model_dir}"

    with stages.run("evaluate the base model") as stage:
        results = {"base": evaluate(args.base_model, suite, args.device), "recipe": outcome.evaluation}
        summary = {name: result.to_dict() for name, result in results.items()}
        (output / "results.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        sets = ", ".join(entry.name for entry in results["base"].entries)
        rows = f", first {args.eval_rows} rows each" if args.eval_rows else ""
        stage["summary"] = f"on {sets}{rows}; both models → {output / 'results.json'}"

    print("\n" + results_table(results))
    print(f"\nfinished in {time.perf_counter() - started:.0f} s; outputs in {output}/:")
    for path, what in [
        (data_dir, "unified dataset (Hub layout: README.md card with sources and licenses + parquet per task)"),
        *([(train_dir, "dataset with difficulty, curriculum_plan.json and plots")] if args.curriculum else []),
        (
            outcome.model_dir,
            "the trained model: card (README.md) with the recipe and scores, evaluation.json, hf_unified_embed_recipe.yaml",
        ),
        (output / "results.json", "the base's and the model's evaluation results"),
        (stages.logs, "the full output of every stage"),
    ]:
        print(f"  {path}  — {what}")
    print("\nNext: hf-unified-embed merge (docs/merge.md) fuses runs or pulls a model back towards its base.")


if __name__ == "__main__":
    run_example(main)
