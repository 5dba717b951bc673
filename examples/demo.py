"""The main job: build data → curriculum → two training runs → evaluate → hierarchical merge → card.

Runs on the bundled sample (``examples/data``) with the packaged all-MiniLM-L6-v2, on CPU, in a
few minutes::

    make demo                     # or: .venv/bin/python examples/demo.py --output-dir outputs/demo

Everything it writes lands under ``--output-dir``; the last lines print the results table and where
each artefact is. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EXAMPLES = Path(__file__).resolve().parent
SAMPLE_RECIPE = EXAMPLES / "recipes" / "sample.yaml"
SAMPLE_SUITE = EXAMPLES / "suites" / "demo.yaml"
TRAIN_TASKS = ["stsb", "sick", "wikiqa", "trecqa", "msrp"]


def stage(title: str) -> None:
    print(f"\n=== {title} ===", flush=True)


def build_data(output: Path) -> Path:
    from hf_unified_embed.data import build_unified, save_unified

    stage("1/6 build the unified dataset from examples/data")
    data_dir = output / "data"
    tasks = build_unified(SAMPLE_RECIPE)
    save_unified(tasks, data_dir, overwrite=True)
    for name, dataset in tasks.items():
        print(f"  {name:<8} {dataset[0]['task_type']:<20} {len(dataset):>5} rows")
    return data_dir


def plan(data_dir: Path, output: Path, teacher_path: str) -> tuple[Path, Any]:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.curriculum import plan_curriculum, plot_difficulty_histograms, plot_task_similarity
    from hf_unified_embed.data import load_unified, save_unified

    stage("2/6 plan the Data-CUBE curriculum (teacher: all-MiniLM-L6-v2)")
    curriculum_dir = output / "curriculum"
    tasks = load_unified(data_dir, tasks=TRAIN_TASKS)
    result = plan_curriculum(
        SentenceTransformer(teacher_path), tasks, teacher_name="all-MiniLM-L6-v2", n_samples=64, iterations=200_000
    )
    save_unified(result.tasks, curriculum_dir, overwrite=True)
    result.plan.save(curriculum_dir / "curriculum_plan.json")
    plot_task_similarity(result.plan, curriculum_dir / "task_similarity.png")
    plot_difficulty_histograms(result.difficulty, curriculum_dir / "difficulty.png", order=result.plan.order)
    print(f"  task order: {' → '.join(result.plan.order)} (score {result.plan.score:.4f})")
    return curriculum_dir, result.plan


def train(name: str, curriculum_dir: Path, output: Path, base: str, max_steps: int, balance: dict[str, int]) -> Path:
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.train import train_from_recipe

    recipe = recipe_from_dict(
        {
            "base_model": base,
            "model_name": f"all-MiniLM-L6-v2 {name} (hf-unified-embed demo)",
            "data": {"path": str(curriculum_dir), "tasks": TRAIN_TASKS},
            "losses": {
                "retrieval": {"name": "MultiPositiveInfoNCELoss", "temperature": 0.05},
                "sts": {"name": "CoDiEmbSTSLoss"},
                "pair_classification": {"name": "AnglEJointLoss"},
            },
            "negatives_per_query": 2,
            "curriculum": {"plan": str(curriculum_dir / "curriculum_plan.json")},
            "sampler": {"interleave": "round_robin", "instance_order": "easy_to_hard", "batch_sizes": balance},
            "training_args": {
                "max_steps": max_steps,
                "per_device_train_batch_size": 16,
                "learning_rate": 2e-5,
                "warmup_steps": 0.1,
                "logging_steps": max(1, max_steps // 5),
                "disable_tqdm": False,
            },
            "output_dir": str(output / name),
        },
        origin=f"demo:{name}",
    )
    return train_from_recipe(recipe, overwrite=True).model_dir


def evaluate(models: dict[str, str]) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.evaluation import run_suite

    return {name: run_suite(SentenceTransformer(path), SAMPLE_SUITE) for name, path in models.items()}


def results_table(results: dict[str, Any]) -> str:
    entries = [(e.name, e.primary_metric) for e in next(iter(results.values())).entries]
    header = ["model", *(f"{name} {metric}" for name, metric in entries)]
    rows = [header] + [
        [model, *(f"{result[name].metrics[metric]:.4f}" for name, metric in entries)]
        for model, result in results.items()
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/demo"))
    parser.add_argument("--base-model", help="default: the packaged all-MiniLM-L6-v2")
    parser.add_argument("--max-steps", type=int, default=30, help="optimizer steps of each training run")
    args = parser.parse_args()

    from hf_unified_embed.merge import merge_models
    from hf_unified_embed.recipe import packaged_minilm_path

    started = time.perf_counter()
    output: Path = args.output_dir
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)
    base = args.base_model or packaged_minilm_path()

    data_dir = build_data(output)
    curriculum_dir, curriculum_plan = plan(data_dir, output, base)

    stage("3/6 train an IR-leaning and an STS-leaning run (same base, same curriculum)")
    ir_run = train(
        "ir-leaning",
        curriculum_dir,
        output,
        base,
        args.max_steps,
        {"wikiqa": 16, "trecqa": 16, "stsb": 4, "sick": 4, "msrp": 4},
    )
    sts_run = train(
        "sts-leaning",
        curriculum_dir,
        output,
        base,
        args.max_steps,
        {"wikiqa": 4, "trecqa": 4, "stsb": 16, "sick": 16, "msrp": 16},
    )

    stage("4/6 hierarchical merge (CoDiEmb Eq. 10–12: per-layer weights from the runs' deltas)")
    merged = merge_models(
        [ir_run, sts_run],
        "hierarchical",
        output / "merged",
        ir_models=[ir_run],
        sts_models=[sts_run],
        base=base,
        ir_specialist=ir_run,
        sts_specialist=sts_run,
        model_name="hf-unified-embed/demo-merged",
        overwrite=True,
    )

    stage("5/6 evaluate base, both runs and the merge on the held-out sample suite")
    results = evaluate({"base": base, "ir-leaning": str(ir_run), "sts-leaning": str(sts_run), "merged": str(merged)})
    summary = {name: result.to_dict() for name, result in results.items()}
    (output / "results.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")

    stage("6/6 write the merged model's card with its evaluation")
    merge_models(
        [ir_run, sts_run],
        "hierarchical",
        output / "merged",
        ir_models=[ir_run],
        sts_models=[sts_run],
        base=base,
        ir_specialist=ir_run,
        sts_specialist=sts_run,
        model_name="hf-unified-embed/demo-merged",
        evaluation_results=[vars(r) for r in results["merged"].eval_results()],
        overwrite=True,
        show_progress=False,
    )

    print("\n" + results_table(results))
    print(f"\ncurriculum order: {' → '.join(curriculum_plan.order)}")
    print(f"\nfinished in {time.perf_counter() - started:.0f} s; outputs in {output}/:")
    for path, what in [
        (data_dir, "unified dataset (Hub layout: README.md card + parquet per task)"),
        (curriculum_dir, "dataset with difficulty, curriculum_plan.json, task_similarity.png, difficulty.png"),
        (ir_run, "IR-leaning model with its card (README.md) and recipe"),
        (sts_run, "STS-leaning model with its card and recipe"),
        (merged, "hierarchically merged model, card with layer weights and delta heatmap"),
        (output / "results.json", "all evaluation results"),
    ]:
        print(f"  {path}  — {what}")


if __name__ == "__main__":
    main()
