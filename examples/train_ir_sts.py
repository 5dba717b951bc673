"""Train one embedding model on retrieval and STS in a single SentenceTransformerTrainer call.

STS-B and SICK train with CoDiEmb's STS objective (``CoDiEmbSTSLoss``), WikiQA and TrecQA with its
multi-positive InfoNCE (``MultiPositiveInfoNCELoss``); ``CurriculumBatchSampler(interleave="shuffled")``
makes every optimizer step one task, in random task order (the configuration that measured best in
docs/quality.md). The raw files are converted by the package's source adapters; the training bridge
supplies the collator (fixed columns drawn anew each epoch), the per-task instructions as prompts
excluded from pooling, and the loss per task. Each piece is written out here; ``unified_training``
wires them all in one call (``examples/quickstart.py``).

    .venv/bin/python examples/train_ir_sts.py --max-steps 50 --output-dir outputs/ir-sts
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from example_cli import (
    example_parser,
    parse_example_args,
    require_files,
    run_example,
    training_arguments,
)

QA_INSTRUCTIONS = {
    "query_instruction": "Represent the question for retrieving supporting answers: ",
    "document_instruction": "Represent the answer sentence for retrieval: ",
}
SOURCES = [
    ("stsb", "stsb", "sts/stsbenchmark/sts-train.csv", "sts", {}),
    ("sick", "sick", "sts/sick2014/SICK_train.txt", "sts", {}),
    ("wikiqa", "wikiqa", "ir/wikiqa/train.tsv", "retrieval", QA_INSTRUCTIONS),
    ("trecqa", "trecqa", "ir/trecqa/train.csv", "retrieval", QA_INSTRUCTIONS),
]


def load_tasks(data_root: Path, max_rows: int | None):
    from hf_unified_embed.data import build_unified

    require_files(data_root, *(path for _, _, path, _, _ in SOURCES))
    recipe = {
        "sources": [
            {
                "name": name,
                "format": fmt,
                "data_files": str(data_root / path),
                "task_type": task_type,
                "max_rows": max_rows,
                **instructions,
            }
            for name, fmt, path, task_type, instructions in SOURCES
        ]
    }
    return build_unified(recipe)


def main(argv: Sequence[str] | None = None) -> None:
    parser = example_parser(__file__, __doc__)
    parser.add_argument("--max-rows", type=int, default=None, help="cap rows per source (quick runs)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--positives", type=int, default=2, help="K+ positives per retrieval query")
    parser.add_argument("--negatives", type=int, default=4, help="K− hard negatives per retrieval query")
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    args = parse_example_args(parser, argv, full_steps=100)

    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

    from hf_unified_embed.losses import CoDiEmbSTSLoss, MultiPositiveInfoNCELoss
    from hf_unified_embed.sampling import CurriculumBatchSampler
    from hf_unified_embed.training import (
        UnifiedDataCollator,
        exclude_instructions_from_pooling,
        losses_for_tasks,
        prompts_from_unified,
        publish_prompts,
    )

    train = load_tasks(args.data_root, args.max_rows)
    model = exclude_instructions_from_pooling(SentenceTransformer(args.base_model, device=args.device))
    losses = losses_for_tasks(
        model,
        train,
        {
            "retrieval": (MultiPositiveInfoNCELoss, {"positives_per_query": args.positives, "temperature": 0.02}),
            "sts": CoDiEmbSTSLoss,
        },
    )
    collator = UnifiedDataCollator.for_losses(model, train, losses, negatives_per_query=args.negatives, seed=args.seed)
    publish_prompts(model, train, collator.prompts)  # saved with the model: encode_query gives what trained
    trainer = SentenceTransformerTrainer(
        model=model,
        args=training_arguments(
            args,
            args.output_dir / "checkpoints",
            model=model,
            per_device_train_batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            warmup_steps=0.1,  # a float is a ratio of the steps
            logging_steps=max(1, args.max_steps // 10),
            prompts=prompts_from_unified(train),
            multi_dataset_batch_sampler=CurriculumBatchSampler.configure(interleave="shuffled"),
        ),
        train_dataset=train,
        loss=losses,
        data_collator=collator,
        callbacks=[collator.epoch_callback()],
    )
    trainer.train()
    model.save(str(args.output_dir / "final"))
    print(f"saved to {args.output_dir / 'final'} (model card: README.md)")


if __name__ == "__main__":
    run_example(main)
