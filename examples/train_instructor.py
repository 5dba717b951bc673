"""INSTRUCTOR-style training: one embedding model, a task instruction in front of every text.

INSTRUCTOR (Su et al., 2023) prepends a natural-language instruction ("Represent the Wikipedia
question for retrieving supporting documents: ") to each input, trains every task with one
bidirectional in-batch contrastive loss (§2.3) on task-homogeneous batches, and pools only the
text tokens, not the instruction's. Here:

* the unified data carries the instructions per task (``query_instruction`` /
  ``document_instruction``); :class:`~hf_unified_embed.training.UnifiedDataCollator` turns them into
  sentence-transformers prompts and :func:`~hf_unified_embed.training.exclude_instructions_from_pooling`
  keeps them out of the mean pooling (saved with the model, so ``encode(..., prompt=...)`` does the
  same at inference);
* :class:`~hf_unified_embed.losses.InstructorLoss` is the loss of every task;
* :class:`~hf_unified_embed.sampling.CurriculumBatchSampler` with ``interleave="shuffled"`` gives
  task-homogeneous batches in random task order (one task per optimizer step).

Tasks (shared data): WikiQA and TrecQA answer retrieval with their hard negatives, and MSRP
paraphrase pairs (label 1 only) with a symmetric instruction.

Run::

    .venv/bin/python examples/train_instructor.py                # 1 epoch
    .venv/bin/python examples/train_instructor.py --max-steps 2  # a quick check
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

FILES = ("ir/wikiqa/train.tsv", "ir/trecqa/train.csv", "pair/msrp/msr-para-train.tsv")


def sources(data_root: Path) -> list[dict[str, object]]:
    require_files(data_root, *FILES)
    return [
        {
            "name": "wikiqa",
            "format": "wikiqa",
            "task_type": "retrieval",
            "data_files": str(data_root / FILES[0]),
            "query_instruction": "Represent the Wikipedia question for retrieving supporting sentences: ",
            "document_instruction": "Represent the Wikipedia sentence for retrieval: ",
        },
        {
            "name": "trecqa",
            "format": "trecqa",
            "task_type": "retrieval",
            "data_files": str(data_root / FILES[1]),
            "query_instruction": "Represent the question for retrieving answer sentences: ",
            "document_instruction": "Represent the answer sentence for retrieval: ",
        },
        {
            "name": "msrp",
            "format": "msrp",
            "task_type": "pair_classification",
            "data_files": str(data_root / FILES[2]),
            "options": {"positives_only": True},
            "query_instruction": "Represent the news sentence for finding paraphrases: ",
            "document_instruction": "Represent the news sentence for finding paraphrases: ",
        },
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = example_parser(__file__, __doc__)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--negatives", type=int, default=3, help="hard negatives per query (K−)")
    parser.add_argument("--temperature", type=float, default=0.01, help="γ of the INSTRUCTOR loss")
    args = parse_example_args(parser, argv, full_steps=-1)

    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

    from hf_unified_embed.data import build_unified
    from hf_unified_embed.losses import InstructorLoss
    from hf_unified_embed.sampling import CurriculumBatchSampler
    from hf_unified_embed.training import (
        UnifiedDataCollator,
        exclude_instructions_from_pooling,
        losses_for_tasks,
        prompts_from_unified,
        publish_prompts,
    )

    train = build_unified({"sources": sources(args.data_root)})
    prompts = prompts_from_unified(train)
    model = SentenceTransformer(args.base_model, device=args.device)
    exclude_instructions_from_pooling(model)

    losses = losses_for_tasks(
        model,
        train,
        {
            "retrieval": (InstructorLoss, {"temperature": args.temperature}),
            "pair_classification": (InstructorLoss, {"temperature": args.temperature}),
        },
    )
    collator = UnifiedDataCollator.for_losses(
        model, train, losses, negatives_per_query=args.negatives, seed=args.seed, prompts=prompts
    )
    publish_prompts(model, train, collator.prompts)  # saved with the model: encode_query gives what trained
    training_args = training_arguments(
        args,
        args.output_dir / "checkpoints",
        model=model,
        num_train_epochs=1,
        per_device_train_batch_size=args.batch_size,
        learning_rate=2e-5,
        warmup_steps=0.1,
        logging_steps=10,
        multi_dataset_batch_sampler=CurriculumBatchSampler.configure(interleave="shuffled"),
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=training_args,
        train_dataset=train,
        loss=losses,
        data_collator=collator,
        callbacks=[collator.epoch_callback()],
    )
    trainer.train()
    model_dir = args.output_dir / "model"
    model.save(str(model_dir))

    # At inference the instruction is a prompt; the pooling leaves its tokens out, as in training.
    question, answer = "how are glacier caves formed?", "A glacier cave is a cave formed within the ice of a glacier."
    query = model.encode(question, prompt=prompts["wikiqa"]["query"])
    document = model.encode(answer, prompt=prompts["wikiqa"]["positive"])
    print(f"\ncos(question, answer) with WikiQA instructions: {float(model.similarity(query, document)):.4f}")
    print(f"model and card in {model_dir}")


if __name__ == "__main__":
    run_example(main)
