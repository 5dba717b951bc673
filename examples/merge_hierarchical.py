"""CoDiEmb hierarchical fusion end to end on the shared data, on CPU in a few minutes.

1. Fine-tune all-MiniLM-L6-v2 three times for ``--max-steps`` steps: IR only (WikiQA question →
   answer pairs, in-batch negatives), STS only (STS Benchmark, CoSENT) and mixed (both datasets,
   one loss per dataset, task-homogeneous batches).
2. Measure each layer's deviation from the base in the IR-only and STS-only runs (CoDiEmb Figure 4)
   and write the heatmap.
3. Fuse an IR soup (IR-only + mixed) and an STS soup (STS-only + mixed) with per-layer weights
   w_IR = softmax(δ_IR/τ, δ_STS/τ) (Eq. 11–12) and print them.

    .venv/bin/python examples/merge_hierarchical.py --max-steps 20 --output-dir outputs/merge-example
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Sequence
from pathlib import Path

from example_cli import (
    example_parser,
    parse_example_args,
    require_files,
    run_example,
    training_arguments,
)


def sts_pairs(data: Path):
    from datasets import Dataset

    with (data / "sts/stsbenchmark/sts-train.csv").open(encoding="utf-8") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    return Dataset.from_dict(
        {
            "sentence1": [r[5] for r in rows],
            "sentence2": [r[6] for r in rows],
            "score": [float(r[4]) / 5 for r in rows],
        }
    )


def ir_pairs(data: Path):
    from datasets import Dataset

    with (data / "ir/wikiqa/train.tsv").open(encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE) if r["Label"] == "1"]
    return Dataset.from_dict({"anchor": [r["Question"] for r in rows], "positive": [r["Sentence"] for r in rows]})


def fine_tune(output_dir: Path, tasks: list[str], options: argparse.Namespace) -> Path:
    from datasets import DatasetDict
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss, MultipleNegativesRankingLoss

    model = SentenceTransformer(options.base_model, device=options.device)
    model.max_seq_length = 64
    datasets = {"ir": ir_pairs(options.data_root), "sts": sts_pairs(options.data_root)}
    losses = {"ir": MultipleNegativesRankingLoss(model), "sts": CoSENTLoss(model)}
    args = training_arguments(
        options, output_dir / "trainer", model=model, per_device_train_batch_size=16, learning_rate=5e-5
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=DatasetDict({task: datasets[task] for task in tasks}),
        loss={task: losses[task] for task in tasks},
    )
    trainer.train()
    model.save(str(output_dir))
    return output_dir


def main(argv: Sequence[str] | None = None) -> None:
    parser = example_parser(__file__, __doc__)
    parser.add_argument(
        "--temperature", type=float, default=None, help="τ of Eq. 11 (default: the mean |δ_IR − δ_STS|)"
    )
    args = parse_example_args(parser, argv, full_steps=20)

    from hf_unified_embed.merge import analyze_deltas, fusion_weights, merge_models

    require_files(args.data_root, "sts/stsbenchmark/sts-train.csv", "ir/wikiqa/train.tsv")

    base = args.base_model
    root = args.output_dir
    runs = {
        name: fine_tune(root / name, tasks, args)
        for name, tasks in (("ir-only", ["ir"]), ("sts-only", ["sts"]), ("mixed", ["ir", "sts"]))
    }
    report = analyze_deltas(base, {"IR": runs["ir-only"], "STS": runs["sts-only"]}, plot_path=root / "deltas.png")
    gaps = [abs(report.norms["IR"][g] - report.norms["STS"][g]) for g in report.groups]
    # Deviation norms after a short run are small; a τ on their scale keeps the weights informative.
    temperature = args.temperature or max(sum(gaps) / len(gaps), 1e-6)
    merged = merge_models(
        [runs["ir-only"], runs["sts-only"], runs["mixed"]],
        "hierarchical",
        root / "merged",
        ir_models=[0, 2],
        sts_models=[1, 2],
        base=base,
        ir_specialist=runs["ir-only"],
        sts_specialist=runs["sts-only"],
        temperature=temperature,
        overwrite=True,
    )
    print(f"\nτ = {temperature:.4g}; heatmap: {root / 'deltas.png'}; merged model: {merged}\n")
    print(f"{'layer':<20} {'δ_IR':>10} {'δ_STS':>10} {'w_IR':>7} {'w_STS':>7}")
    for group in report.groups:
        d_ir, d_sts = report.norms["IR"][group], report.norms["STS"][group]
        w_ir = fusion_weights(d_ir, d_sts, temperature)
        print(f"{group:<20} {d_ir:>10.4f} {d_sts:>10.4f} {w_ir:>7.3f} {1 - w_ir:>7.3f}")


if __name__ == "__main__":
    run_example(main)
