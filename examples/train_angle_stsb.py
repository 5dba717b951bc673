"""AnglE on STS-B: fine-tune all-MiniLM-L6-v2 with the AnglE joint loss, STS-B dev before and after.

The AnglE objective (Li & Li, 2024, Eq. 1–5) sums three terms over the scored pairs of a batch:
the cosine (CoSENT) ranking term, an in-batch negatives term over the pairs whose score passes
``positive_threshold``, and the angle term that ranks pairs by their angle difference in complex
space, which keeps gradients alive where the cosine saturates. Here it is
:class:`hf_unified_embed.losses.AnglEJointLoss` on the unified STS-B train rows, trained through the
recipe (:func:`hf_unified_embed.recipe.run.train_from_recipe`, an ordinary ``SentenceTransformerTrainer``).

Run::

    .venv/bin/python examples/train_angle_stsb.py                 # 1 epoch (~180 steps at batch 32)
    .venv/bin/python examples/train_angle_stsb.py --max-steps 2   # a quick check

The STS-B dev split (``sts-dev.csv``) is only evaluated, never trained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from example_cli import (
    evaluation_suite,
    example_parser,
    parse_example_args,
    recipe_training_args,
    require_files,
    run_example,
)

TRAIN, DEV = "sts/stsbenchmark/sts-train.csv", "sts/stsbenchmark/sts-dev.csv"


def stsb_dev_suite(data_root: Path) -> dict[str, object]:
    return {
        "name": "stsb-dev",
        "data_root": str(data_root),
        "diagnostics": False,
        "evaluations": [
            {
                "name": "stsb-dev",
                "kind": "sts",
                "source": "stsb",
                "data_files": DEV,
                "split": "validation",
                "dataset_id": "sentence-transformers/stsb",
            }
        ],
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = example_parser(__file__, __doc__)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    args = parse_example_args(parser, argv, full_steps=-1)
    require_files(args.data_root, TRAIN, DEV)

    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.data import build_unified, save_unified
    from hf_unified_embed.evaluation import run_suite
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe

    base = args.base_model
    data_dir = args.output_dir / "data"
    train = build_unified(
        {
            "sources": [
                {
                    "name": "stsb",
                    "format": "stsb",
                    "task_type": "sts",
                    "data_files": str(args.data_root / TRAIN),
                    "source": "STS Benchmark train (Cer et al., 2017); score/5",
                    "license": "CC-BY-SA-4.0 (scores)",
                }
            ]
        }
    )
    save_unified(train, data_dir, overwrite=True)
    suite = evaluation_suite(args, stsb_dev_suite(args.data_root))

    before = run_suite(SentenceTransformer(base, device=args.device), suite)
    recipe = recipe_from_dict(
        {
            "base_model": base,
            "model_name": "all-MiniLM-L6-v2 fine-tuned with AnglE on STS-B",
            "data": {"path": str(data_dir), "tasks": ["stsb"]},
            "losses": {"sts": {"name": "AnglEJointLoss"}},
            "instructions": False,
            "training_args": recipe_training_args(
                args,
                num_train_epochs=1,
                per_device_train_batch_size=args.batch_size,
                learning_rate=args.learning_rate,
                warmup_steps=0.1,
                logging_steps=10,
            ),
            "evaluation": suite,
            "output_dir": str(args.output_dir / "model"),
            "seed": args.seed,
        },
        origin="examples/train_angle_stsb.py",
    )
    outcome = train_from_recipe(recipe, overwrite=True)
    after = outcome.evaluation
    metric = before["stsb-dev"].primary_metric
    print(
        f"\nSTS-B dev {metric}: before {before['stsb-dev'].primary_value:.4f}, after {after['stsb-dev'].primary_value:.4f}"
    )
    print(f"model, card (README.md), recipe and evaluation.json in {outcome.model_dir}")


if __name__ == "__main__":
    run_example(main)
