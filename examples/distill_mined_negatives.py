"""Hub dataset → mined hard negatives → distillation: the three steps in one script.

1. A folder in the Hub layout (parquet under ``pair/`` plus a README whose ``configs`` YAML maps it,
   as ``sentence-transformers`` datasets are published) stands in for a Hub dataset: it is written
   here from the WikiQA training questions and their first correct sentence (``anchor``/``positive``),
   and the wrong candidate sentences become a plain-text corpus. Give ``--hub-dataset ORG/NAME``
   (with network) or a path to use another dataset with ``anchor``/``positive`` columns instead.
2. ``build`` reads it with the ``hub`` source format (``datasets.load_dataset(path, "pair")``, the
   call a Hub id takes) into a unified folder whose card records the dataset and revision.
3. ``mine-negatives`` embeds the queries and documents once with the teacher (all-MiniLM-L6-v2 by
   default), searches exactly, drops the query's positives and candidates within 5 % of the positive's
   score (NV-Retriever), and writes 4 negatives per query with the teacher's scores.
4. A training recipe distils the teacher's score distribution into the student with
   :class:`~hf_unified_embed.losses.DistillKLLoss` (``SentenceTransformerTrainer`` underneath).

Run::

    .venv/bin/python examples/distill_mined_negatives.py --max-steps 200
    .venv/bin/python examples/distill_mined_negatives.py --max-steps 2 --max-rows 64   # a quick check
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from example_cli import (
    example_parser,
    parse_example_args,
    recipe_training_args,
    require_files,
    run_example,
)


def write_hub_copy(data_root: Path, folder: Path, max_rows: int, corpus_size: int) -> tuple[Path, Path]:
    """WikiQA pairs as a Hub-layout dataset (config ``pair``) and its wrong candidates as a corpus file."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    from hf_unified_embed.data import build_unified

    wikiqa = build_unified(
        {
            "sources": [
                {
                    "name": "wikiqa",
                    "format": "wikiqa",
                    "task_type": "retrieval",
                    "data_files": str(data_root / "ir/wikiqa/train.tsv"),
                }
            ]
        }
    )["wikiqa"]
    rows = wikiqa.select(range(min(max_rows, len(wikiqa))))
    (folder / "pair").mkdir(parents=True, exist_ok=True)
    table = pa.table({"anchor": rows["query"], "positive": [positives[0] for positives in rows["positives"]]})
    pq.write_table(table, folder / "pair" / "train-00000-of-00001.parquet")
    card = {"configs": [{"config_name": "pair", "data_files": [{"split": "train", "path": "pair/train-*"}]}]}
    (folder / "README.md").write_text(f"---\n{yaml.safe_dump(card)}---\n\n# WikiQA pairs (local copy)\n")
    wrong = dict.fromkeys(text for negatives in wikiqa["negatives"] for text in negatives)
    corpus = folder.parent / "corpus.txt"
    corpus.write_text("\n".join(list(wrong)[:corpus_size]) + "\n", encoding="utf-8")
    return folder, corpus


def main(argv: Sequence[str] | None = None) -> None:
    parser = example_parser(__file__, __doc__)
    parser.add_argument("--teacher", help="the mining teacher (default: the base model, the student)")
    parser.add_argument("--hub-dataset", help="a Hub id or folder with anchor/positive columns (config 'pair')")
    parser.add_argument(
        "--max-rows", type=int, default=872, help="questions taken from WikiQA train (default: %(default)s)"
    )
    parser.add_argument(
        "--corpus-size",
        type=int,
        default=3_000,
        help="wrong WikiQA candidates added as documents (default: %(default)s)",
    )
    parser.add_argument("--batch-size", type=int, default=16, help="rows per step (default: %(default)s)")
    args = parse_example_args(
        parser, argv, full_steps=200, needs_hub=lambda parsed: bool(parsed.teacher or parsed.hub_dataset)
    )

    from hf_unified_embed.data import build_unified_with_report, save_unified
    from hf_unified_embed.negatives import HardNegativeConfig, mine_negatives_folder
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe

    base = args.base_model
    corpus = None
    dataset = args.hub_dataset
    if dataset is None:
        require_files(args.data_root, "ir/wikiqa/train.tsv")
        hub_copy, corpus = write_hub_copy(
            args.data_root, args.output_dir / "hub-copy", args.max_rows, args.corpus_size
        )
        dataset = str(hub_copy)

    built = build_unified_with_report(
        {
            "sources": [
                {
                    "name": "wikiqa-pairs",
                    "format": "hub",
                    "data_files": dataset,
                    "task_type": "retrieval",
                    "options": {"config": "pair"},
                    "license": "Microsoft Research Data License (WikiQA)",
                }
            ]
        }
    )
    data_dir = save_unified(
        built.dataset, args.output_dir / "data", sources=built.sources, notes=built.notes, overwrite=True
    )
    mined_dir, mined = mine_negatives_folder(
        data_dir,
        args.output_dir / "mined",
        args.teacher or base,
        HardNegativeConfig(num_negatives=4, relative_margin=0.05),
        corpus=corpus,
        overwrite=True,
    )
    report = mined.reports["wikiqa-pairs"]
    print(
        f"mined {report.negatives} negatives for {report.queries} queries over {report.corpus} documents "
        f"(dropped: {report.dropped}; {report.short_queries} queries with fewer than 4)"
    )
    recipe = recipe_from_dict(
        {
            "base_model": base,
            "model_name": "all-MiniLM-L6-v2 distilled on mined WikiQA negatives",
            "data": {"path": str(mined_dir)},
            # The bare KL (FlagEmbedding's scale, like an InfoNCE loss at τ = 0.02) suits this learning rate;
            # the default τ_s² factor (sentence-transformers' DistillKLDivLoss scaling) would make it 2,500× smaller.
            "losses": {"retrieval": {"name": "DistillKLLoss", "scale_by_student_temperature": False}},
            "negatives_per_query": 4,
            "instructions": False,
            "training_args": recipe_training_args(
                args,
                per_device_train_batch_size=args.batch_size,
                learning_rate=2e-5,
                warmup_steps=0.1,
                logging_steps=10,
            ),
            "output_dir": str(args.output_dir / "model"),
            "seed": args.seed,
        },
        origin="examples/distill_mined_negatives.py",
    )
    outcome = train_from_recipe(recipe, overwrite=True)
    print(f"train loss {outcome.train_loss:.4f}; model and card in {outcome.model_dir}")


if __name__ == "__main__":
    run_example(main)
