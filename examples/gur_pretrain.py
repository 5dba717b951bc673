"""GUR post-pretraining: mine similar sentence pairs from raw documents, train with GURLoss.

    .venv/bin/python examples/gur_pretrain.py --documents docs.jsonl --output-dir outputs/gur --max-steps 200

``--documents`` takes text files (one document per line), JSON lines with ``text`` (and ``title``)
or folders of .txt files. Without it, the WikiQA candidate sentences of ``--data-root``
(``ir/wikiqa/train.tsv``), grouped by question (each group comes from one Wikipedia summary),
serve as documents.
"""

from __future__ import annotations

import csv
import json
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

WIKIQA = "ir/wikiqa/train.tsv"


def wikiqa_as_documents(data_root: Path, target: Path) -> Path:
    require_files(data_root, WIKIQA)
    groups: dict[str, list[str]] = {}
    with open(data_root / WIKIQA, encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            groups.setdefault(row["Question"], []).append(row["Sentence"].strip())
    with open(target, "w", encoding="utf-8") as handle:
        for sentences in groups.values():
            handle.write(json.dumps({"text": "\n".join(sentences)}) + "\n")
    return target


def main(argv: Sequence[str] | None = None) -> None:
    parser = example_parser(__file__, __doc__)
    parser.add_argument("--documents", nargs="*", type=Path, help="raw document files or folders")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-4)  # GUR Table I
    parser.add_argument("--num-proc", type=int, default=1)
    parser.add_argument(
        "--save-mlm-head", action="store_true", help="also write mlm_head.safetensors next to the model"
    )
    args = parse_example_args(parser, argv, full_steps=100)

    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

    from hf_unified_embed.gur_pairs import PairMiningConfig, mine_dataset
    from hf_unified_embed.losses import GURLoss

    with tempfile.TemporaryDirectory() as scratch:
        documents = args.documents or [wikiqa_as_documents(args.data_root, Path(scratch) / "wikiqa.jsonl")]
        pairs = mine_dataset(documents, PairMiningConfig(window=4), num_proc=args.num_proc)
    print(f"mined {len(pairs):,} pairs, e.g. {pairs[0]['query']!r} ↔ {pairs[0]['positives'][0]!r}")
    train_dataset = pairs.map(
        lambda row: {"anchor": row["query"], "positive": row["positives"][0]},
        remove_columns=pairs.column_names,
    ).shuffle(seed=args.seed)

    model = SentenceTransformer(args.base_model, device=args.device)
    loss = GURLoss(model)  # mlm_weight=1, temperature=0.1, 15% hump-geometric span masking
    steps = args.max_steps if args.max_steps > 0 else len(train_dataset) // args.batch_size
    training_args = training_arguments(
        args,
        args.output_dir / "checkpoints",
        model=model,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant_with_warmup",  # GUR Table I
        warmup_steps=min(100, steps // 10),
        logging_steps=max(1, steps // 10),
    )
    SentenceTransformerTrainer(model=model, args=training_args, train_dataset=train_dataset, loss=loss).train()
    model.save(str(args.output_dir / "final"))
    if args.save_mlm_head:
        print(f"MLM head written to {loss.save_mlm_head(args.output_dir / 'final')}")
    print(f"model saved to {args.output_dir / 'final'}")


if __name__ == "__main__":
    run_example(main)
