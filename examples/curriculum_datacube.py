"""Data-CUBE on the shared data: plan a curriculum with a teacher, then train with it.

1. Build the unified tasks from the shared STS Benchmark, WikiQA, TrecQA and MSRP files.
2. Plan with all-MiniLM-L6-v2 as the teacher: task similarity (Eq. 4–5) → task order by simulated
   annealing (Eq. 6–7) → difficulty φ per row (Eq. 8). The scored dataset (Hub layout), the plan JSON
   and the two PNGs go to ``OUTPUT/curriculum`` — the same as
   ``hf-unified-embed curriculum DATA --teacher MODEL -o OUTPUT/curriculum``.
3. Train a student with the stock ``SentenceTransformerTrainer``: ``CurriculumBatchSampler`` walks the
   tasks in tour order, one batch per task per round (Algorithm 1), each task's rows easy → hard;
   retrieval tasks use Data-CUBE's masked InfoNCE (Eq. 3, 9), STS the CoDiEmb STS loss, MSRP AnglE.

    .venv/bin/python examples/curriculum_datacube.py --output-dir outputs/datacube --max-steps 30

Nothing is downloaded: the teacher (``--teacher``) and the student (``--base-model``) default to the
packaged all-MiniLM-L6-v2. The curriculum is the point of this example; docs/quality.md says when it
pays (many tasks) and why the other examples train in shuffled task order.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from example_cli import (
    example_parser,
    parse_example_args,
    require_files,
    run_example,
    training_arguments,
)

SOURCES = [
    # name, format, file under --data-root, task type, query instruction, document instruction
    (
        "stsb",
        "stsb",
        "sts/stsbenchmark/sts-train.csv",
        "sts",
        "Represent the sentence for retrieving semantically similar sentences: ",
        "",
    ),
    (
        "wikiqa",
        "wikiqa",
        "ir/wikiqa/train.tsv",
        "retrieval",
        "Represent the Wikipedia question for retrieving supporting sentences: ",
        "Represent the Wikipedia sentence for retrieval: ",
    ),
    (
        "trecqa",
        "trecqa",
        "ir/trecqa/train.csv",
        "retrieval",
        "Represent the question for retrieving answer sentences: ",
        "Represent the answer sentence for retrieval: ",
    ),
    (
        "msrp",
        "msrp",
        "pair/msrp/msr-para-train.tsv",
        "pair_classification",
        "Represent the news sentence for finding paraphrases: ",
        "",
    ),
]


def recipe(data: Path) -> dict:
    require_files(data, *(path for _, _, path, _, _, _ in SOURCES))
    return {
        "sources": [
            {
                "name": name,
                "format": fmt,
                "data_files": str(data / path),
                "task_type": task_type,
                "query_instruction": query,
                "document_instruction": document,
            }
            for name, fmt, path, task_type, query, document in SOURCES
        ]
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = example_parser(__file__, __doc__)
    parser.add_argument("--teacher", help="model that plans the curriculum (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("--max-rows-per-task", type=int, default=2_000, help="keeps the example quick on a CPU")
    parser.add_argument("--iterations", type=int, default=2_000_000, help="annealing moves (the paper's 2M)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--difficulty-threshold", type=float, default=-0.2, help="δ of Eq. 9: retrieval rows with φ < δ are masked"
    )
    args = parse_example_args(parser, argv, full_steps=30, needs_hub=lambda parsed: parsed.teacher is not None)

    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

    from hf_unified_embed.curriculum import (
        PLAN_FILENAME,
        plan_curriculum,
        plot_difficulty_histograms,
        plot_task_similarity,
    )
    from hf_unified_embed.data import build_unified, save_unified
    from hf_unified_embed.losses import AnglEJointLoss, CoDiEmbSTSLoss, CurriculumInfoNCELoss
    from hf_unified_embed.recipe import packaged_minilm_path
    from hf_unified_embed.sampling import CurriculumBatchSampler
    from hf_unified_embed.training import UnifiedDataCollator, exclude_instructions_from_pooling, losses_for_tasks

    output: Path = args.output_dir
    teacher_path = args.teacher or packaged_minilm_path()

    print("== 1. unified tasks from the shared data")
    tasks = build_unified(recipe(args.data_root), cache_dir=tempfile.mkdtemp(prefix="datacube-"))
    for name in tasks:
        tasks[name] = tasks[name].shuffle(seed=args.seed).select(range(min(args.max_rows_per_task, len(tasks[name]))))
        print(f"   {name:<7} {tasks[name][0]['task_type']:<20} {len(tasks[name]):>5} rows")

    print(f"== 2. curriculum plan (teacher: {args.teacher or 'all-MiniLM-L6-v2'})")
    result = plan_curriculum(
        SentenceTransformer(teacher_path, device=args.device),
        tasks,
        teacher_name=args.teacher or "all-MiniLM-L6-v2",
        iterations=args.iterations,
        seed=args.seed,
    )
    curriculum_dir = save_unified(result.tasks, output / "curriculum", overwrite=True)
    result.plan.save(curriculum_dir / PLAN_FILENAME)
    plot_task_similarity(result.plan, curriculum_dir / "task_similarity.png")
    plot_difficulty_histograms(
        result.difficulty, curriculum_dir / "difficulty_histograms.png", order=result.plan.order
    )
    plan = result.plan
    print(f"   order: {' -> '.join(plan.order)}  (Eq. 6 score {plan.score:.4f})")
    for task in plan.order:
        stats = plan.task_statistics[task]
        print(f"   {task:<7} phi mean {stats.difficulty_mean:+.3f}  median {stats.difficulty_quantiles['p50']:+.3f}")

    print("== 3. training with the curriculum")
    model = SentenceTransformer(args.base_model, device=args.device)
    exclude_instructions_from_pooling(model)  # INSTRUCTOR: instruction tokens are not pooled
    losses = losses_for_tasks(
        model,
        result.tasks,
        {
            "retrieval": (CurriculumInfoNCELoss, {"difficulty_threshold": args.difficulty_threshold}),
            "sts": CoDiEmbSTSLoss,
            "pair_classification": AnglEJointLoss,
        },
    )
    collator = UnifiedDataCollator.for_losses(model, result.tasks, losses, negatives_per_query=3, seed=args.seed)
    training_args = training_arguments(
        args,
        output / "checkpoints",
        model=model,
        per_device_train_batch_size=args.batch_size,
        learning_rate=2e-5,
        warmup_steps=0.1,  # a float is a ratio of the steps
        logging_steps=max(1, args.max_steps // 5),
        multi_dataset_batch_sampler=CurriculumBatchSampler.configure(
            task_order=plan.order, interleave="round_robin", instance_order="easy_to_hard"
        ),
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=training_args,
        train_dataset=result.tasks,
        loss=losses,
        data_collator=collator,
        callbacks=[collator.epoch_callback()],
    )
    trainer.train()
    model.save(str(output / "model"))
    print(f"== wrote {curriculum_dir} (scored data, {PLAN_FILENAME}, plots) and {output / 'model'}")


if __name__ == "__main__":
    run_example(main)
