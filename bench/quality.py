"""A first quality report: does the unified recipe beat plain sentence-transformers on real data?

Five rows, all from all-MiniLM-L6-v2 (the packaged copy), all trained for the same number of
optimizer steps at the same batch size, learning rate and seed on the same unified training data
(STS-B train + SICK train as ``sts``, WikiQA train + TrecQA train as ``retrieval``, built from
``--data-root`` by this package's adapters):

1. ``base``: the untrained model.
2. ``st-baseline``: sentence-transformers' own recipe — ``MultipleNegativesRankingLoss`` on
   retrieval, ``CoSENTLoss`` on STS, ST's ``PROPORTIONAL`` multi-dataset batch sampler.
3. ``codiemb``: ``MultiPositiveInfoNCELoss`` on retrieval, ``CoDiEmbSTSLoss`` on STS,
   ``CurriculumBatchSampler(interleave="shuffled")`` (one task per optimizer step, random task order).
4. ``codiemb+curriculum``: (3) with the Data-CUBE curriculum: task order from ``plan_curriculum``
   (teacher: the base model), ``instance_order="easy_to_hard"``, ``interleave="round_robin"``.
5. ``hierarchical-merge``: CoDiEmb's hierarchical merge of an IR-leaning run (retrieval tasks only)
   and an STS-leaning run (STS tasks only), each trained like (3) for half the steps, so the row
   costs the same optimizer steps as the others.

Every row goes through the same collator (:class:`~hf_unified_embed.training.UnifiedDataCollator`:
``query, positive_1[, negative_1]`` for the contrastive losses, ``query, positive_1, label`` for the
scored-pair losses), so rows differ only in losses, sampler and curriculum. No instructions are
used (all-MiniLM-L6-v2 was not trained with them). Evaluation is ``examples/suites/shared.yaml``;
no evaluation file is used for training or for any choice made here.

Run (a row whose ``evaluation.json`` exists in ``--output-dir`` is reused with ``--resume``)::

    nice .venv/bin/python bench/quality.py --max-steps 200 --output-dir outputs/quality \\
        --markdown docs/quality.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "examples" / "suites" / "shared.yaml"
ROWS = ("base", "st-baseline", "codiemb", "codiemb+curriculum", "hierarchical-merge")
STS_MEAN = ("sts12", "sts13", "sts14", "sts15")
#: Table column → (suite entry, metric key pattern); the STS mean is derived from STS_MEAN.
COLUMNS: dict[str, tuple[str, str]] = {
    "STS-B dev ρ": ("stsb-dev", r"spearman_cosine"),
    "SICK trial ρ": ("sick-trial", r"spearman_cosine"),
    "MS MARCO nDCG@10": ("msmarco-dl", r"(cosine_)?ndcg@10"),
    "TrecQA MAP": ("trecqa-test", r"(cosine_)?map"),
    "MSRP AP": ("msrp-test", r"cosine_ap"),
}


def training_sources(data_root: Path) -> dict[str, Any]:
    """The unified build recipe of the training tasks (train splits only)."""
    return {
        "sources": [
            {
                "name": "stsb",
                "format": "stsb",
                "task_type": "sts",
                "data_files": str(data_root / "sts/stsbenchmark/sts-train.csv"),
            },
            {
                "name": "sick",
                "format": "sick",
                "task_type": "sts",
                "data_files": str(data_root / "sts/sick2014/SICK_train.txt"),
            },
            {
                "name": "wikiqa",
                "format": "wikiqa",
                "task_type": "retrieval",
                "data_files": str(data_root / "ir/wikiqa/train.tsv"),
            },
            {
                "name": "trecqa",
                "format": "trecqa",
                "task_type": "retrieval",
                "data_files": str(data_root / "ir/trecqa/train.csv"),
            },
        ]
    }


def train(
    name: str,
    tasks: Any,
    losses: Mapping[str, Any],
    sampler: Any,
    steps: int,
    options: argparse.Namespace,
) -> Path:
    """One ordinary ``SentenceTransformerTrainer`` run; returns the saved model folder."""
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    from hf_unified_embed.training import UnifiedDataCollator, losses_for_tasks

    output = options.output_dir / name
    model = SentenceTransformer(options.base_model, device="cpu")
    model.max_seq_length = options.max_seq_length
    task_losses = losses_for_tasks(model, tasks, losses)
    collator = UnifiedDataCollator.for_losses(
        model, tasks, task_losses, negatives_per_query=options.negatives, seed=options.seed, prompts={}
    )
    args = SentenceTransformerTrainingArguments(
        output_dir=str(options.output_dir / "checkpoints" / name),
        max_steps=steps,
        per_device_train_batch_size=options.batch_size,
        learning_rate=options.learning_rate,
        warmup_steps=0.1,  # a float is a ratio of the steps (warmup_ratio is deprecated in transformers 5)
        seed=options.seed,
        multi_dataset_batch_sampler=sampler,
        logging_steps=max(1, steps // 10),
        save_strategy="no",
        report_to="none",
        use_cpu=True,
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=tasks,
        loss=task_losses,
        data_collator=collator,
        callbacks=[collator.epoch_callback()],
    )
    trainer.train()
    if output.exists():
        shutil.rmtree(output)
    # The card of an intermediate benchmark model is not needed; the merge writes its own.
    model.save(str(output), create_model_card=False)
    return output


def pick_metric(metrics: Mapping[str, float], pattern: str, entry: str) -> float:
    matches = [key for key in metrics if re.fullmatch(pattern, key)]
    if len(matches) != 1:
        raise KeyError(f"{entry}: expected one metric matching {pattern!r}, found {matches} in {sorted(metrics)}")
    return float(metrics[matches[0]])


def summarize(results: Mapping[str, Any]) -> dict[str, float]:
    """The table row of one model from its ``SuiteResults.to_dict()``."""
    entries = results["results"]
    row = {
        "STS12–15 ρ (mean)": sum(pick_metric(entries[name]["metrics"], r"spearman_cosine", name) for name in STS_MEAN)
        / len(STS_MEAN)
    }
    for column, (entry, pattern) in COLUMNS.items():
        row[column] = pick_metric(entries[entry]["metrics"], pattern, entry)
    return row


def markdown_table(table: Mapping[str, Mapping[str, float]]) -> str:
    columns = list(next(iter(table.values())))
    lines = ["| model | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    best = {column: max(row[column] for row in table.values()) for column in columns}
    for model, row in table.items():
        cells = [f"**{row[c]:.4f}**" if row[c] == best[c] else f"{row[c]:.4f}" for c in columns]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine_note() -> str:
    import sentence_transformers
    import torch
    import transformers

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores (load average {load:.1f} at the end, "
        f"shared), torch {torch.__version__} ({torch.get_num_threads()} threads), transformers {transformers.__version__}, "
        f"sentence-transformers {sentence_transformers.__version__}, Python {platform.python_version()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--base-model", help="default: the packaged all-MiniLM-L6-v2")
    parser.add_argument("--max-steps", type=int, default=200, help="optimizer steps of every trained row")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128, help="during training")
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--negatives", type=int, default=1, help="hard negatives per retrieval row")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument("--diagnostics", action="store_true", help="also compute CoDiEmb §4 diagnostics")
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/quality"))
    parser.add_argument("--resume", action="store_true", help="reuse rows already evaluated in --output-dir")
    parser.add_argument("--markdown", type=Path, help="also write the table into this Markdown file")
    options = parser.parse_args(argv)

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.sampler import MultiDatasetBatchSamplers
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss, MultipleNegativesRankingLoss

    from hf_unified_embed.curriculum import plan_curriculum
    from hf_unified_embed.data import build_unified
    from hf_unified_embed.evaluation import run_suite
    from hf_unified_embed.losses import CoDiEmbSTSLoss, MultiPositiveInfoNCELoss
    from hf_unified_embed.merge import merge_models
    from hf_unified_embed.recipe import packaged_minilm_path
    from hf_unified_embed.sampling import CurriculumBatchSampler

    started = time.perf_counter()
    options.base_model = options.base_model or packaged_minilm_path()
    options.output_dir.mkdir(parents=True, exist_ok=True)
    tasks = build_unified(training_sources(options.data_root))
    print("training data: " + ", ".join(f"{name} ({len(ds)} rows)" for name, ds in tasks.items()), flush=True)
    codiemb_losses = {"retrieval": MultiPositiveInfoNCELoss, "sts": CoDiEmbSTSLoss}
    shuffled = CurriculumBatchSampler.configure(interleave="shuffled")

    def curriculum_run() -> Path:
        result = plan_curriculum(
            SentenceTransformer(options.base_model, device="cpu"),
            tasks,
            teacher_name="all-MiniLM-L6-v2",
            method="exact",  # four tasks: all 24 orders are enumerated
            seed=options.seed,
        )
        result.plan.save(options.output_dir / "curriculum_plan.json")
        print(f"curriculum task order: {' → '.join(result.plan.order)}", flush=True)
        sampler = CurriculumBatchSampler.configure(
            task_order=list(result.plan.order), interleave="round_robin", instance_order="easy_to_hard"
        )
        return train("codiemb+curriculum", result.tasks, codiemb_losses, sampler, options.max_steps, options)

    def merge_run() -> Path:
        half = max(1, options.max_steps // 2)
        retrieval = {name: ds for name, ds in tasks.items() if ds[0]["task_type"] == "retrieval"}
        sts = {name: ds for name, ds in tasks.items() if ds[0]["task_type"] == "sts"}
        ir_run = train(
            "ir-leaning", _dict(retrieval), {"retrieval": MultiPositiveInfoNCELoss}, shuffled, half, options
        )
        sts_run = train("sts-leaning", _dict(sts), {"sts": CoDiEmbSTSLoss}, shuffled, half, options)
        return merge_models(
            [ir_run, sts_run],
            "hierarchical",
            options.output_dir / "hierarchical-merge",
            ir_models=[ir_run],
            sts_models=[sts_run],
            base=options.base_model,
            ir_specialist=ir_run,
            sts_specialist=sts_run,
            overwrite=True,
        )

    builders: dict[str, Callable[[], Path | str]] = {
        "base": lambda: options.base_model,
        "st-baseline": lambda: train(
            "st-baseline",
            tasks,
            {"retrieval": MultipleNegativesRankingLoss, "sts": CoSENTLoss},
            MultiDatasetBatchSamplers.PROPORTIONAL,
            options.max_steps,
            options,
        ),
        "codiemb": lambda: train("codiemb", tasks, codiemb_losses, shuffled, options.max_steps, options),
        "codiemb+curriculum": curriculum_run,
        "hierarchical-merge": merge_run,
    }

    results: dict[str, Any] = {}
    for row in options.rows:
        saved = options.output_dir / "evaluations" / f"{row}.json"
        if options.resume and saved.is_file():
            results[row] = json.loads(saved.read_text(encoding="utf-8"))
            print(f"[{row}] reusing {saved}", flush=True)
            continue
        row_started = time.perf_counter()
        print(f"\n=== {row} ===", flush=True)
        model_path = builders[row]()
        evaluation = run_suite(
            SentenceTransformer(str(model_path), device="cpu"),
            SUITE,
            data_root=options.data_root,
            diagnostics=options.diagnostics,
        )
        evaluation.extra["seconds"] = time.perf_counter() - row_started
        evaluation.save_json(saved, overwrite=True)
        results[row] = json.loads(saved.read_text(encoding="utf-8"))
        print(f"[{row}] done in {evaluation.extra['seconds']:.0f} s", flush=True)
        # Written after every row, so an interrupted run still leaves the rows it finished.
        report(results, options, argv, started)

    report(results, options, argv, started)
    return 0


def report(results: Mapping[str, Any], options: argparse.Namespace, argv: list[str] | None, started: float) -> None:
    """Print the table and write ``quality.json`` (and the Markdown block) for the rows so far."""
    table = {row: summarize(result) for row, result in results.items()}
    command = ".venv/bin/python " + " ".join(["bench/quality.py", *(argv if argv is not None else sys.argv[1:])])
    summary = {
        "command": command,
        "settings": {key: str(value) for key, value in vars(options).items()},
        "machine": machine_note(),
        "seconds": time.perf_counter() - started,
        "rows_missing": [row for row in options.rows if row not in results],
        "table": table,
    }
    text = json.dumps(summary, indent=2, ensure_ascii=False) + "\n"
    (options.output_dir / "quality.json").write_text(text, encoding="utf-8")
    markdown = markdown_table(table)
    print("\n" + markdown)
    print(f"\n{summary['machine']}; {summary['seconds'] / 60:.1f} min in all", flush=True)
    if options.markdown:
        write_report(options.markdown, markdown, summary)


def _dict(tasks: Mapping[str, Any]) -> Any:
    from datasets import DatasetDict

    return DatasetDict(dict(tasks))


def write_report(path: Path, markdown: str, report: Mapping[str, Any]) -> None:
    """Replace the measured block between the markers of ``path`` (the rest is hand-written)."""
    begin, end = "<!-- quality:begin -->", "<!-- quality:end -->"
    block = (
        f"{begin}\n{markdown}\n\nCommand: `{report['command']}`  \n"
        f"Machine: {report['machine']}; {report['seconds'] / 60:.1f} min in all.  \n"
        f"JSON: `{Path(report['settings']['output_dir']) / 'quality.json'}` (per-row evaluations in `evaluations/`).\n{end}"
    )
    text = path.read_text(encoding="utf-8") if path.is_file() else f"# Quality report\n\n{begin}\n{end}\n"
    if begin not in text or end not in text:
        raise ValueError(f"{path}: no {begin} … {end} block to replace")
    head, rest = text.split(begin, 1)
    new = head + block + rest.split(end, 1)[1]
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(new, encoding="utf-8")
    os.replace(temporary, path)


if __name__ == "__main__":
    raise SystemExit(main())
