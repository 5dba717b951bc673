"""The main job: build data → two training runs → hierarchical merge → evaluate → card.

Runs on the bundled sample (``examples/data``) with the packaged all-MiniLM-L6-v2, on CPU, in a
few minutes::

    make demo                     # or: .venv/bin/python examples/demo.py --output-dir outputs/demo

Both runs use the configuration that measured best in docs/quality.md: CoDiEmb's losses with
``CurriculumBatchSampler(interleave="shuffled", instance_order="random")`` (one task per optimizer
step, tasks in random order). ``--curriculum`` adds Data-CUBE's curriculum instead — a task order
planned with the base model as teacher and easy→hard rows — which is meant to pay with many tasks.

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
SAMPLE_SUITE = EXAMPLES / "suites" / "demo.yaml"
#: The tasks of the measured default: WikiQA twice, as answer sentences and as whole paragraphs (passage
#: retrieval keeps general retrieval at the base's level; docs/quality.md, "WikiQA as passages"). MSRP is
#: built and evaluated but not trained: training on it cost general retrieval in every form measured
#: (docs/quality.md, "Training on MSRP too").
TRAIN_TASKS = ["stsb", "sick", "wikiqa", "wikiqa-passages", "trecqa"]
#: The measured default (docs/quality.md, "Learning rate"): sentence-transformers' own default; against
#: 2e-5 it gains on every trained column and gives up a little more general retrieval.
LEARNING_RATE = 5e-5
#: Per-task batch sizes of the two runs: each leans towards its side, both see every task.
BATCH_SIZES = {
    "ir-leaning": {"wikiqa": 16, "wikiqa-passages": 16, "trecqa": 16, "stsb": 4, "sick": 4},
    "sts-leaning": {"wikiqa": 4, "wikiqa-passages": 4, "trecqa": 4, "stsb": 16, "sick": 16},
}


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
    data_dir = save_unified(tasks, output / "data", overwrite=True)
    for name, dataset in tasks.items():
        print(f"  {name:<8} {dataset[0]['task_type']:<20} {len(dataset):>5} rows")
    rows = sum(len(dataset) for dataset in tasks.values())
    return data_dir, f"{len(tasks)} tasks, {rows:,} rows (with licenses and sources in the card) → {data_dir}"


def plan(data_dir: Path, output: Path, args: argparse.Namespace) -> tuple[Path, Any]:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.curriculum import plan_curriculum, plot_difficulty_histograms, plot_task_similarity
    from hf_unified_embed.data import load_unified, save_unified

    curriculum_dir = output / "curriculum"
    tasks = load_unified(data_dir, tasks=TRAIN_TASKS)
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


def train(name: str, data_dir: Path, output: Path, args: argparse.Namespace, curriculum: bool) -> Any:
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe

    sampler: dict[str, Any] = (
        {"interleave": "round_robin", "instance_order": "easy_to_hard"}
        if curriculum
        else {"interleave": "shuffled", "instance_order": "random"}
    )
    recipe = recipe_from_dict(
        {
            "base_model": args.base_model,
            "model_name": f"all-MiniLM-L6-v2 {name} (hf-unified-embed demo)",
            "data": {"path": str(data_dir), "tasks": TRAIN_TASKS},
            "losses": {
                "retrieval": {"name": "MultiPositiveInfoNCELoss", "temperature": 0.05},
                "sts": {"name": "CoDiEmbSTSLoss"},
            },
            "negatives_per_query": 2,
            **({"curriculum": {"plan": str(data_dir / "curriculum_plan.json")}} if curriculum else {}),
            "sampler": {**sampler, "batch_sizes": BATCH_SIZES[name]},
            "training_args": recipe_training_args(
                args,
                per_device_train_batch_size=16,
                learning_rate=LEARNING_RATE,
                warmup_steps=0.1,
                logging_steps=max(1, args.max_steps // 5),
                disable_tqdm=True,
            ),
            "output_dir": str(output / name),
            "seed": args.seed,
        },
        origin=f"demo:{name}",
    )
    return train_from_recipe(recipe, overwrite=True)


def evaluate(models: dict[str, str], suite: dict[str, Any], device: str) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.evaluation import run_suite

    return {
        name: run_suite(SentenceTransformer(path, device=device), suite, show_progress_bar=False)
        for name, path in models.items()
    }


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
    args = parse_example_args(parser, argv, full_steps=30)

    from hf_unified_embed.merge import merge_models

    quiet_progress_bars()
    started = time.perf_counter()
    output: Path = args.output_dir
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)
    base = args.base_model
    suite = evaluation_suite(args, SAMPLE_SUITE, data_root=args.data_root)
    stages = Stages(output, total=7 if args.curriculum else 6)

    with stages.run("build the unified dataset") as stage:
        data_dir, stage["summary"] = build_data(output, args.data_root)
    train_dir = data_dir
    if args.curriculum:
        with stages.run("plan the Data-CUBE curriculum") as stage:
            train_dir, curriculum_plan = plan(data_dir, output, args)
            stage["summary"] = f"task order {' → '.join(curriculum_plan.order)} → {train_dir}"
    order = "curriculum order, easy→hard rows" if args.curriculum else "shuffled task order"
    runs: dict[str, Path] = {}
    for name in BATCH_SIZES:
        with stages.run(f"train the {name} run") as stage:
            outcome = train(name, train_dir, output, args, args.curriculum)
            runs[name] = outcome.model_dir
            loss = f"{outcome.train_loss:.4f}" if outcome.train_loss is not None else "n/a"
            stage["summary"] = f"{args.max_steps} steps in {order}, mean loss {loss} → {outcome.model_dir}"

    ir_run, sts_run = runs["ir-leaning"], runs["sts-leaning"]
    merge_options: dict[str, Any] = {
        "ir_models": [ir_run],
        "sts_models": [sts_run],
        "base": base,
        "ir_specialist": ir_run,
        "sts_specialist": sts_run,
        "model_name": "hf-unified-embed/demo-merged",
        "overwrite": True,
        "show_progress": False,
    }
    with stages.run("merge the two runs hierarchically") as stage:
        merged = merge_models([ir_run, sts_run], "hierarchical", output / "merged", **merge_options)
        stage["summary"] = f"CoDiEmb Eq. 10–12, per-layer weights from the runs' deltas → {merged}"

    with stages.run("evaluate base, runs and merge") as stage:
        results = evaluate(
            {"base": base, **{name: str(path) for name, path in runs.items()}, "merged": str(merged)},
            suite,
            args.device,
        )
        summary = {name: result.to_dict() for name, result in results.items()}
        (output / "results.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        sets = ", ".join(entry.name for entry in results["base"].entries)
        rows = f", first {args.eval_rows} rows each" if args.eval_rows else ""
        stage["summary"] = f"{len(results)} models on {sets}{rows} → {output / 'results.json'}"

    with stages.run("write the merged model's card") as stage:
        evaluation = [vars(result) for result in results["merged"].eval_results()]
        merge_models(
            [ir_run, sts_run], "hierarchical", output / "merged", evaluation_results=evaluation, **merge_options
        )
        stage["summary"] = f"recipe, layer weights, delta heatmap and model-index → {merged / 'README.md'}"

    print("\n" + results_table(results))
    print(f"\nfinished in {time.perf_counter() - started:.0f} s; outputs in {output}/:")
    for path, what in [
        (data_dir, "unified dataset (Hub layout: README.md card with sources and licenses + parquet per task)"),
        *([(train_dir, "dataset with difficulty, curriculum_plan.json and plots")] if args.curriculum else []),
        (ir_run, "IR-leaning model with its card (README.md) and recipe"),
        (sts_run, "STS-leaning model with its card and recipe"),
        (merged, "hierarchically merged model, card with layer weights and delta heatmap"),
        (output / "results.json", "all evaluation results"),
        (stages.logs, "the full output of every stage"),
    ]:
        print(f"  {path}  — {what}")


if __name__ == "__main__":
    run_example(main)
