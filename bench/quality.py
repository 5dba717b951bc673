"""The quality report as a living benchmark: does the unified recipe beat plain sentence-transformers?

Every trained row starts from all-MiniLM-L6-v2 (the packaged copy) and trains for the same number
of optimizer steps — ``--epochs`` (default 1) passes over its setting's data, or ``--max-steps`` —
at the same batch size, learning rate and seed; every model is saved under ``--output-dir`` and
evaluated with ``examples/suites/shared.yaml``. No evaluation file is used for training or for any
choice made here.

**Main setting** (four tasks: STS-B train + SICK train as ``sts``, WikiQA train + TrecQA train as
``retrieval``, built from ``--data-root`` by this package's adapters):

1. ``base``: the untrained model.
2. ``st-baseline``: sentence-transformers' own recipe — ``MultipleNegativesRankingLoss`` on
   retrieval, ``CoSENTLoss`` on STS, ST's ``PROPORTIONAL`` multi-dataset batch sampler.
3. ``codiemb``: ``MultiPositiveInfoNCELoss`` on retrieval, ``CoDiEmbSTSLoss`` on STS,
   ``CurriculumBatchSampler(interleave="shuffled")`` (one task per optimizer step, random task order).
4. ``codiemb+curriculum``: (3) with the Data-CUBE curriculum: task order from ``plan_curriculum``
   (teacher: the base model, exact over the 24 orders), ``instance_order="easy_to_hard"``,
   ``interleave="round_robin"``.
5. ``hierarchical-merge``: CoDiEmb's hierarchical merge of an IR-leaning run (retrieval tasks only)
   and an STS-leaning run (STS tasks only), each trained like (3) for its share of the steps (one
   epoch of its own tasks), so the row costs the same optimizer steps as the others.

**Many-task setting** (where Data-CUBE says the curriculum pays): the shared sources split into 21
tasks — STS-B train by source file (6), SICK train by entailment label (3), the SemEval 2012 train
files (2; never the test files the suite evaluates), MSRP train (1), WikiQA train and TrecQA train
by question word (6 + 3; buckets under ``MIN_BUCKET_QUESTIONS`` questions join ``other``) — trained
with the ``codiemb`` losses for the same steps in two orders:

6. ``many-shuffled``: ``interleave="shuffled"``, rows in random order;
7. ``many-curriculum``: task order by simulated annealing over the 21 tasks, rows easy → hard.

Every row goes through the same collator (``UnifiedDataCollator``), so rows differ only in losses,
sampler and curriculum. No instructions are used (all-MiniLM-L6-v2 was not trained with them). The
table gives each trained row's mean optimizer-step time relative to ``st-baseline`` in the same run.

Full report (a GPU: minutes; the 2-core CPU machine: hours)::

    .venv/bin/python bench/quality.py --device cuda --output-dir outputs/quality --markdown docs/quality.md

A row whose evaluation exists in ``--output-dir`` is reused with ``--resume``. A quick end-to-end
check: ``--max-steps 5 --max-rows-per-task 64 --eval-rows 32``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from hf_unified_embed.example_cli import evaluation_suite, example_parser, parse_example_args, training_arguments

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "examples" / "suites" / "shared.yaml"
MAIN_ROWS = ("base", "st-baseline", "codiemb", "codiemb+curriculum", "hierarchical-merge")
MANY_ROWS = ("many-shuffled", "many-curriculum")
ROWS = MAIN_ROWS + MANY_ROWS
STS_MEAN = ("sts12", "sts13", "sts14", "sts15")
#: Table column → (suite entry, metric key pattern); the STS mean is derived from STS_MEAN.
COLUMNS: dict[str, tuple[str, str]] = {
    "STS-B dev ρ": ("stsb-dev", r"spearman_cosine"),
    "SICK trial ρ": ("sick-trial", r"spearman_cosine"),
    "MS MARCO nDCG@10": ("msmarco-dl", r"(cosine_)?ndcg@10"),
    "TrecQA MAP": ("trecqa-test", r"(cosine_)?map"),
    "MSRP AP": ("msrp-test", r"cosine_ap"),
}
STEP_COLUMN = "step time (× ST)"
#: A question-word bucket of WikiQA / TrecQA with fewer questions joins the ``other`` bucket.
MIN_BUCKET_QUESTIONS = 15
QUESTION_WORDS = ("what", "how", "who", "when", "where", "which", "why")
MARKERS = {"main": "quality-main", "many": "quality-many"}


@dataclass
class Trained:
    """A trained model and what its training cost.

    ``timed_steps`` and ``seconds`` cover the optimizer steps after the first of each run: the first
    also pays one-off set-up (dataloader workers, the sampler's plan, card widgets), which would
    dominate a short run and differs between samplers. ``runtime`` is the trainer's whole ``train()``.
    """

    path: Path
    steps: int
    timed_steps: int
    seconds: float
    runtime: float


class StepTimer(TrainerCallback):
    """Stamps the end of every optimizer step (after a CUDA synchronize, so the GPU's work is in it)."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")
        self.stamps: list[float] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        self.stamps.append(time.perf_counter())


def training_sources(data_root: Path, max_rows: int | None) -> dict[str, Any]:
    """The unified build recipe of the main setting's tasks (train splits only)."""
    sources = [
        ("stsb", "stsb", "sts", "sts/stsbenchmark/sts-train.csv"),
        ("sick", "sick", "sts", "sts/sick2014/SICK_train.txt"),
        ("wikiqa", "wikiqa", "retrieval", "ir/wikiqa/train.tsv"),
        ("trecqa", "trecqa", "retrieval", "ir/trecqa/train.csv"),
    ]
    return {
        "sources": [
            {
                "name": name,
                "format": fmt,
                "task_type": task_type,
                "data_files": str(data_root / path),
                "max_rows": max_rows,
            }
            for name, fmt, task_type, path in sources
        ]
    }


def question_word(question: str) -> str:
    words = question.strip().lower().split()
    return words[0] if words and words[0] in QUESTION_WORDS else "other"


def _write_buckets(
    target: Path,
    name: str,
    header: list[str] | None,
    rows: Iterable[list[str]],
    key: Callable[[list[str]], str],
    delimiter: str = "\t",
) -> dict[str, Path]:
    """Split delimited ``rows`` into one file per ``key`` value (``header`` repeated); returns ``{bucket: file}``.

    Tab-separated files are unquoted (their fields hold bare quote characters), so their rows are
    written back field by field; comma-separated ones (TrecQA) go through ``csv`` quoting.
    """
    groups: dict[str, list[list[str]]] = defaultdict(list)
    for row in rows:
        groups[key(row)].append(row)
    files = {}
    for bucket, bucket_rows in sorted(groups.items()):
        path = target / f"{name}-{bucket}{'.csv' if delimiter == ',' else '.tsv'}"
        lines = ([header] if header is not None else []) + bucket_rows
        with open(path, "w", encoding="utf-8", newline="") as handle:
            if delimiter == ",":
                csv.writer(handle, lineterminator="\n").writerows(lines)
            else:
                handle.writelines(delimiter.join(line) + "\n" for line in lines)
        files[bucket] = path
    return files


def _question_buckets(rows: list[list[str]], column: int) -> Callable[[list[str]], str]:
    """Rows → their question word; a word with fewer than ``MIN_BUCKET_QUESTIONS`` questions becomes ``other``."""
    questions: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        if len(row) > column:
            questions[question_word(row[column])].add(row[column])
    kept = {word for word, asked in questions.items() if len(asked) >= MIN_BUCKET_QUESTIONS and word != "other"}
    return lambda row: (
        question_word(row[column]) if len(row) > column and question_word(row[column]) in kept else "other"
    )


def _read(path: Path, **csv_options: Any) -> tuple[list[str], list[list[str]]]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle, **csv_options))
    return rows[0], rows[1:]


def many_task_sources(data_root: Path, target: Path, max_rows: int | None) -> dict[str, Any]:
    """The many-task build recipe: the shared train files split into ≥ 20 tasks (bucket files under ``target``)."""
    target.mkdir(parents=True, exist_ok=True)
    sources: list[dict[str, Any]] = []

    def add(name: str, fmt: str, task_type: str, path: Path, source: str) -> None:
        sources.append(
            {
                "name": name.lower().replace("_", "-"),
                "format": fmt,
                "task_type": task_type,
                "data_files": str(path),
                "max_rows": max_rows,
                "source": source,
            }
        )

    # STS-B train by source file (column 2: MSRvid, images, headlines, MSRpar, deft-forum, deft-news).
    with open(data_root / "sts/stsbenchmark/sts-train.csv", encoding="utf-8") as handle:
        stsb = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    for bucket, path in _write_buckets(target, "stsb", None, stsb, lambda row: row[1]).items():
        add(f"stsb-{bucket}", "stsb", "sts", path, f"STS Benchmark train, {bucket} pairs")
    # SICK train by entailment label.
    header, sick = _read(data_root / "sts/sick2014/SICK_train.txt", delimiter="\t", quoting=csv.QUOTE_NONE)
    label = header.index("entailment_judgment")
    for bucket, path in _write_buckets(target, "sick", header, sick, lambda row: row[label].lower()).items():
        add(f"sick-{bucket}", "sick", "sts", path, f"SICK train, {bucket} pairs")
    # SemEval 2012 train files (the test files are the suite's STS12–15).
    for path in sorted((data_root / "sts/semeval/2012").glob("*.train.tsv")):
        add(f"semeval12-{path.name.split('.')[0]}", "semeval-sts", "sts", path, f"SemEval 2012 STS train, {path.name}")
    add("msrp", "msrp", "pair_classification", data_root / "pair/msrp/msr-para-train.tsv", "MSRP train")
    # WikiQA and TrecQA train by question word.
    header, wikiqa = _read(data_root / "ir/wikiqa/train.tsv", delimiter="\t", quoting=csv.QUOTE_NONE)
    key = _question_buckets(wikiqa, header.index("Question"))
    for bucket, path in _write_buckets(target, "wikiqa", header, wikiqa, key).items():
        add(f"wikiqa-{bucket}", "wikiqa", "retrieval", path, f"WikiQA train, '{bucket}' questions")
    header, trecqa = _read(data_root / "ir/trecqa/train.csv")
    key = _question_buckets(trecqa, header.index("qtext"))
    for bucket, path in _write_buckets(target, "trecqa", header, trecqa, key, delimiter=",").items():
        add(f"trecqa-{bucket}", "trecqa", "retrieval", path, f"TrecQA train, '{bucket}' questions")
    return {"sources": sources}


def epoch_steps(tasks: Mapping[str, Any], batch_size: int) -> int:
    """Optimizer steps of one pass over ``tasks`` with one task per step (a task's last step may be partial)."""
    return sum(-(-len(dataset) // batch_size) for dataset in tasks.values())


def train(
    name: str, tasks: Any, losses: Mapping[str, Any], sampler: Any, steps: int, options: argparse.Namespace
) -> Trained:
    """One ordinary ``SentenceTransformerTrainer`` run; the model is saved under ``--output-dir``."""
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

    from hf_unified_embed.training import UnifiedDataCollator, losses_for_tasks

    output = options.output_dir / name
    model = SentenceTransformer(options.base_model, device=options.device)
    model.max_seq_length = options.max_seq_length
    task_losses = losses_for_tasks(model, tasks, losses)
    collator = UnifiedDataCollator.for_losses(
        model, tasks, task_losses, negatives_per_query=options.negatives, seed=options.seed, prompts={}
    )
    args = training_arguments(
        options,
        options.output_dir / "checkpoints" / name,
        max_steps=steps,
        per_device_train_batch_size=options.batch_size,
        learning_rate=options.learning_rate,
        warmup_steps=0.1,  # a float is a ratio of the steps (warmup_ratio is deprecated in transformers 5)
        multi_dataset_batch_sampler=sampler,
        logging_steps=max(1, steps // 10),
    )
    timer = StepTimer(options.device)
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=tasks,
        loss=task_losses,
        data_collator=collator,
        callbacks=[collator.epoch_callback(), timer],
    )
    result = trainer.train()
    if output.exists():
        shutil.rmtree(output)
    # The card of an intermediate benchmark model is not needed; the merge writes its own.
    model.save(str(output), create_model_card=False)
    stamps = timer.stamps
    return Trained(
        output,
        steps=int(result.global_step),
        timed_steps=len(stamps) - 1,
        seconds=stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0,
        runtime=float(result.metrics["train_runtime"]),
    )


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


def markdown_table(table: Mapping[str, Mapping[str, float]], step_ratio: Mapping[str, float | None]) -> str:
    """The rows with the best value of each metric in bold, then each row's step time relative to ST's."""
    columns = list(next(iter(table.values())))
    lines = ["| model | " + " | ".join(columns) + f" | {STEP_COLUMN} |", "|---|" + "---:|" * (len(columns) + 1)]
    best = {column: max(row[column] for row in table.values()) for column in columns}
    for model, row in table.items():
        cells = [f"**{row[c]:.4f}**" if row[c] == best[c] else f"{row[c]:.4f}" for c in columns]
        ratio = step_ratio.get(model)
        cells.append("—" if ratio is None else f"{ratio:.2f}")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine_note(device: str) -> str:
    import sentence_transformers
    import torch
    import transformers

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    accelerator = f", {torch.cuda.get_device_name()}" if device.startswith("cuda") else ""
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores (load average {load:.1f} at the end)"
        f"{accelerator}, device {device}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"transformers {transformers.__version__}, sentence-transformers {sentence_transformers.__version__}, "
        f"Python {platform.python_version()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = example_parser(__file__, __doc__)
    parser.add_argument("--epochs", type=float, default=1.0, help="passes over each setting's data (default: 1)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128, help="during training")
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--negatives", type=int, default=1, help="hard negatives per retrieval row")
    parser.add_argument("--max-rows-per-task", type=int, help="cap the rows of every training task (a faster run)")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument("--diagnostics", action="store_true", help="also compute CoDiEmb §4 diagnostics")
    parser.add_argument("--resume", action="store_true", help="reuse rows already evaluated in --output-dir")
    parser.add_argument("--markdown", type=Path, help="also write the tables into this Markdown file")
    options = parse_example_args(parser, argv, full_steps=-1)

    from datasets import DatasetDict
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.sampler import MultiDatasetBatchSamplers
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss, MultipleNegativesRankingLoss

    from hf_unified_embed.curriculum import plan_curriculum
    from hf_unified_embed.data import build_unified
    from hf_unified_embed.evaluation import run_suite
    from hf_unified_embed.losses import CoDiEmbSTSLoss, MultiPositiveInfoNCELoss
    from hf_unified_embed.merge import merge_models
    from hf_unified_embed.sampling import CurriculumBatchSampler

    started = time.perf_counter()
    options.output_dir.mkdir(parents=True, exist_ok=True)
    suite = evaluation_suite(options, SUITE, data_root=options.data_root)
    codiemb_losses = {
        "retrieval": MultiPositiveInfoNCELoss,
        "sts": CoDiEmbSTSLoss,
        "pair_classification": CoDiEmbSTSLoss,
    }
    shuffled = CurriculumBatchSampler.configure(interleave="shuffled")
    settings: dict[str, Any] = {}

    def setting(name: str) -> tuple[Any, int]:
        """The tasks of a setting (built once) and the optimizer steps every row of it trains."""
        if name not in settings:
            recipe = (
                training_sources(options.data_root, options.max_rows_per_task)
                if name == "main"
                else many_task_sources(
                    options.data_root, options.output_dir / "many-task-sources", options.max_rows_per_task
                )
            )
            tasks = build_unified(recipe)
            epoch = epoch_steps(tasks, options.batch_size)
            steps = options.max_steps if options.max_steps > 0 else max(1, round(options.epochs * epoch))
            print(
                f"{name} setting: {len(tasks)} tasks, {sum(len(ds) for ds in tasks.values()):,} rows, "
                f"{epoch} steps per epoch; every row trains {steps} steps",
                flush=True,
            )
            settings[name] = (tasks, steps)
        return settings[name]

    def curriculum_run(name: str, setting_name: str, method: str) -> Trained:
        tasks, steps = setting(setting_name)
        planned = time.perf_counter()
        result = plan_curriculum(
            SentenceTransformer(options.base_model, device=options.device),
            tasks,
            teacher_name="all-MiniLM-L6-v2",
            method=method,  # type: ignore[arg-type]
            seed=options.seed,
        )
        print(
            f"[{name}] curriculum planned in {time.perf_counter() - planned:.0f} s; task order: "
            f"{' → '.join(result.plan.order)}",
            flush=True,
        )
        sampler = CurriculumBatchSampler.configure(
            task_order=list(result.plan.order), interleave="round_robin", instance_order="easy_to_hard"
        )
        trained = train(name, result.tasks, codiemb_losses, sampler, steps, options)
        result.plan.save(trained.path / "curriculum_plan.json")  # next to the model it ordered
        return trained

    def merge_run() -> Trained:
        tasks, steps = setting("main")
        by_type = {
            kind: DatasetDict({name: ds for name, ds in tasks.items() if ds[0]["task_type"] == kind})
            for kind in ("retrieval", "sts")
        }
        # Each specialist trains its share of the steps: one epoch of its own tasks at the default length.
        share = epoch_steps(by_type["retrieval"], options.batch_size) / epoch_steps(tasks, options.batch_size)
        ir_steps = max(1, round(steps * share))
        ir_run = train(
            "ir-leaning", by_type["retrieval"], {"retrieval": MultiPositiveInfoNCELoss}, shuffled, ir_steps, options
        )
        sts_run = train(
            "sts-leaning", by_type["sts"], {"sts": CoDiEmbSTSLoss}, shuffled, max(1, steps - ir_steps), options
        )
        merged = merge_models(
            [ir_run.path, sts_run.path],
            "hierarchical",
            options.output_dir / "hierarchical-merge",
            ir_models=[ir_run.path],
            sts_models=[sts_run.path],
            base=options.base_model,
            ir_specialist=ir_run.path,
            sts_specialist=sts_run.path,
            overwrite=True,
            show_progress=False,
        )
        return Trained(
            merged,
            steps=ir_run.steps + sts_run.steps,
            timed_steps=ir_run.timed_steps + sts_run.timed_steps,
            seconds=ir_run.seconds + sts_run.seconds,
            runtime=ir_run.runtime + sts_run.runtime,
        )

    builders: dict[str, Callable[[], Trained | None]] = {
        "base": lambda: None,
        "st-baseline": lambda: train(
            "st-baseline",
            setting("main")[0],
            {"retrieval": MultipleNegativesRankingLoss, "sts": CoSENTLoss},
            MultiDatasetBatchSamplers.PROPORTIONAL,
            setting("main")[1],
            options,
        ),
        "codiemb": lambda: train("codiemb", setting("main")[0], codiemb_losses, shuffled, setting("main")[1], options),
        "codiemb+curriculum": lambda: curriculum_run("codiemb+curriculum", "main", "exact"),  # 4 tasks: all 24 orders
        "hierarchical-merge": merge_run,
        "many-shuffled": lambda: train(
            "many-shuffled", setting("many")[0], codiemb_losses, shuffled, setting("many")[1], options
        ),
        "many-curriculum": lambda: curriculum_run("many-curriculum", "many", "annealing"),
    }

    results: dict[str, Any] = {}
    reported = False
    for row in options.rows:
        saved = options.output_dir / "evaluations" / f"{row}.json"
        if options.resume and saved.is_file():
            results[row] = json.loads(saved.read_text(encoding="utf-8"))
            print(f"[{row}] reusing {saved}", flush=True)
            reported = False
            continue
        row_started = time.perf_counter()
        print(f"\n=== {row} ===", flush=True)
        trained = builders[row]()
        model_path = options.base_model if trained is None else str(trained.path)
        evaluation = run_suite(
            SentenceTransformer(model_path, device=options.device),
            suite,
            diagnostics=options.diagnostics,
        )
        evaluation.extra["seconds"] = time.perf_counter() - row_started
        if trained is not None:
            evaluation.extra["training"] = {
                "steps": trained.steps,
                "timed_steps": trained.timed_steps,
                "seconds": trained.seconds,
                "train_runtime": trained.runtime,
            }
        evaluation.save_json(saved, overwrite=True)
        results[row] = json.loads(saved.read_text(encoding="utf-8"))
        print(f"[{row}] done in {evaluation.extra['seconds']:.0f} s", flush=True)
        # Written after every row, so an interrupted run still leaves the rows it finished.
        report(results, options, argv, started)
        reported = True

    if not reported:
        report(results, options, argv, started)
    return 0


def step_ratios(results: Mapping[str, Any]) -> dict[str, float | None]:
    """Each trained row's mean seconds per optimizer step (after the first of each run) over the ST baseline's.

    ``None`` for a row that did not train or timed no step.
    """
    per_step = {
        row: result["training"]["seconds"] / result["training"]["timed_steps"]
        for row, result in results.items()
        if result.get("training") and result["training"].get("timed_steps")
    }
    baseline = per_step.get("st-baseline")
    return {row: (per_step[row] / baseline if baseline and row in per_step else None) for row in results}


def report(results: Mapping[str, Any], options: argparse.Namespace, argv: list[str] | None, started: float) -> None:
    """Print the tables and write ``quality.json`` (and the Markdown blocks) for the rows so far."""
    ratios = step_ratios(results)
    tables = {
        setting: {row: summarize(result) for row, result in results.items() if row in rows}
        for setting, rows in (("main", MAIN_ROWS), ("many", MANY_ROWS))
    }
    command = ".venv/bin/python " + " ".join(["bench/quality.py", *(argv if argv is not None else sys.argv[1:])])
    summary = {
        "command": command,
        "settings": {key: str(value) for key, value in vars(options).items()},
        "machine": machine_note(options.device),
        "seconds": time.perf_counter() - started,
        "rows_missing": [row for row in options.rows if row not in results],
        "training": {row: result.get("training") for row, result in results.items()},
        "step_time_vs_st_baseline": ratios,
        "tables": tables,
    }
    text = json.dumps(summary, indent=2, ensure_ascii=False) + "\n"
    (options.output_dir / "quality.json").write_text(text, encoding="utf-8")
    for setting, table in tables.items():
        if not table:
            continue
        markdown = markdown_table(table, ratios)
        print(f"\n{setting} setting\n{markdown}")
        if options.markdown:
            write_report(options.markdown, MARKERS[setting], markdown, summary)
    print(f"\n{summary['machine']}; {summary['seconds'] / 60:.1f} min in all", flush=True)


def write_report(path: Path, marker: str, markdown: str, report: Mapping[str, Any]) -> None:
    """Replace the measured block between ``<!-- marker:begin -->`` and ``<!-- marker:end -->`` of ``path``."""
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
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
