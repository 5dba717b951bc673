"""The quality report as a living benchmark: does the unified recipe beat plain sentence-transformers?

Every trained row starts from all-MiniLM-L6-v2 (the packaged copy) and trains for the same number
of optimizer steps — ``--epochs`` (default 1) passes over its setting's data, or ``--max-steps`` —
at the same batch size, learning rate and seed; every model is saved under ``--output-dir`` and
evaluated with ``examples/suites/shared.yaml``. No evaluation file is used for training or for any
choice made here.

**Main setting** (four tasks: STS-B train + SICK train as ``sts``, WikiQA train + TrecQA train as
``retrieval``, built from ``--data-root`` by this package's adapters; ``--main-tasks stsb sick wikiqa
trecqa msrp`` adds MSRP train as ``pair_classification`` — its loss in the CoDiEmb rows is
``--pair-loss`` — and ``msrp-positives`` only its paraphrase pairs, as a retrieval task; measured to
cost general retrieval either way, so the recipe and the demo train the four tasks):

1. ``base``: the untrained model.
2. ``st-baseline``: sentence-transformers' own recipe — ``MultipleNegativesRankingLoss`` on
   retrieval, ``CoSENTLoss`` on STS, ``OnlineContrastiveLoss`` on pair classification (ST's loss for
   pairs with a class label), ST's ``PROPORTIONAL`` multi-dataset batch sampler.
3. ``codiemb``: ``MultiPositiveInfoNCELoss`` on retrieval, ``CoDiEmbSTSLoss`` on STS and pair
   classification, ``CurriculumBatchSampler(interleave="shuffled")`` (one task per optimizer step,
   random task order).
4. ``codiemb+curriculum``: (3) with the Data-CUBE curriculum: task order from ``plan_curriculum``
   (teacher: the base model, exact over every task order: 24 for four tasks), ``instance_order="easy_to_hard"``,
   ``interleave="round_robin"``.
5. ``hierarchical-merge``: CoDiEmb's hierarchical merge of an IR-leaning run (retrieval tasks only)
   and an STS-leaning run (every other task), each trained like (3) for its share of the steps (one
   epoch of its own tasks), so the row costs the same optimizer steps as the others.

**Keeping the base** (issue: every trained row lost general web-search retrieval), same setting:

* ``codiemb+mined``: (3) with the retrieval tasks' negatives mined by the base model
  (``mine_hard_negatives``: 4 per query, ``relative_margin`` 0.05, each task's own documents as the
  corpus; mined once per output folder and reused);
* ``codiemb+keep-base``: (3) with every task loss wrapped in ``KeepBaseLoss`` (self-distillation from
  the frozen base over the batch's candidates, ``--keep-base-weight``);
* ``codiemb+mined+keep-base``: both;
* ``codiemb+kept-merge``: the ``codiemb`` run of the same seed interpolated with the base by ``merge
  search`` on ``examples/suites/dev.yaml`` (λ ∈ ``KEPT_MERGE_WEIGHTS``), objective the mean of the dev
  metrics, subject to no dev metric below the base by more than ``KEPT_MERGE_EPSILON`` and the
  ``forgetting-dev`` neighbour overlap not below the base's (1) by more than ``KEPT_MERGE_FORGETTING``
  (both fixed before any run). Trains nothing beyond ``codiemb``;
* ``codiemb+tau05``: (3) with the retrieval loss at τ = 0.05 (``RETRIEVAL_TAU05``: the scale 20 of
  ``MultipleNegativesRankingLoss``, which all-MiniLM-L6-v2 was trained with) instead of CoDiEmb's 0.02;
  ``codiemb+tau05+mined`` and ``codiemb+tau05+kept-merge`` combine it with the options above.

A keep-the-base row's name is ``codiemb`` and its options (``+tau05``, ``+mined``, ``+keep-base``,
``+kept-merge``, in that order); ``+kept-merge`` merges the same seed's row without it.

Every model is also scored by a ``forgetting`` entry (neighbour overlap@10 with the base over
``--forgetting-texts`` MS MARCO passages, no labels; the table's "kept" column) and by STS12–15 without
the pairs any training file of either setting holds (the suite's ``sts1X-unseen`` entries: STS Benchmark
train holds about four in ten of the STS12–15 test pairs; the "unseen" column, outside the six-column
mean). ``--seeds`` trains every trained row once per seed; the tables then give the mean ± sample
standard deviation.

**Many-task setting** (where Data-CUBE says the curriculum pays): the shared sources split into 21
tasks — STS-B train by source file (6), SICK train by entailment label (3), the SemEval 2012 train
files (2; never the test files the suite evaluates), MSRP train (1), WikiQA train and TrecQA train
by question word (6 + 3; buckets under ``MIN_BUCKET_QUESTIONS`` questions join ``other``) — trained
with the ``codiemb`` losses for the same steps in two orders:

6. ``many-shuffled``: ``interleave="shuffled"``, rows in random order;
7. ``many-curriculum``: task order by simulated annealing over the 21 tasks, rows easy → hard.

Every trained row is a training recipe run by ``hf_unified_embed.recipe.train_from_recipe`` — the
function behind ``hf-unified-embed train`` and ``make demo``: ``examples/recipes/train.yaml`` (the
shipped recipe) with what this command line sets for every row (``bench_recipe``: the data folder
this script builds, ``--negatives``, ``--max-seq-length``, one ``--batch-size`` for every task,
``--learning-rate``, the steps, the seed, no evaluation inside the run) and the row's own recipe
values (``ROW_SPECS``: its ``losses``, ``sampler``, ``curriculum`` or ``keep_base``). So every row
goes through the recipe's data loading, model, loss table, collator (``UnifiedDataCollator``) and
sampler, and rows differ only in those values. The two merges (``hierarchical-merge``, ``+kept-merge``)
have no recipe form: their training runs are recipe runs, the merge after them is this script's. The
data built here holds no instructions (all-MiniLM-L6-v2 was not trained with them), so the recipe's
``instructions: true`` adds none. The table gives each trained row's mean optimizer-step time relative
to ``st-baseline`` in the same run.

Full report (a GPU: minutes; the 2-core CPU machine: hours)::

    .venv/bin/python bench/quality.py --device cuda --output-dir outputs/quality --markdown docs/quality.md

A row whose evaluation exists in ``--output-dir`` is reused with ``--resume``. A quick end-to-end
check: ``--max-steps 5 --max-rows-per-task 64 --eval-rows 32``. The reduced CPU setting of
docs/quality.md (same code, fewer steps, shorter texts, evaluation slices)::

    OMP_NUM_THREADS=1 .venv/bin/python bench/quality.py --max-steps 20 --batch-size 32 \
        --learning-rate 1e-4 --max-seq-length 48 --eval-max-seq-length 64 --eval-rows 30 \
        --msmarco-queries 6 --forgetting-texts 200 --max-rows-per-task 300 --seeds 1 2 3 \
        --report-name quality-cpu --output-dir outputs/quality-cpu --markdown docs/quality.md --resume
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import shutil
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
# The examples' shared command line lives next to them (examples/example_cli.py), not in the package.
if str(REPO / "examples") not in sys.path:
    sys.path.insert(0, str(REPO / "examples"))

from example_cli import evaluation_suite, example_parser, parse_example_args, recipe_training_args  # noqa: E402

# The step timing shared with bench/step.py lives beside this file.
if str(REPO / "bench") not in sys.path:
    sys.path.insert(0, str(REPO / "bench"))

from _timing import every_trainer_calls, step_timer  # noqa: E402

SUITE = REPO / "examples" / "suites" / "shared.yaml"
MAIN_ROWS = ("base", "st-baseline", "codiemb", "codiemb+curriculum", "hierarchical-merge")
KEEP_ROWS = (
    "codiemb+mined",
    "codiemb+keep-base",
    "codiemb+mined+keep-base",
    "codiemb+kept-merge",
    "codiemb+tau05",
    "codiemb+tau05+mined",
    "codiemb+tau05+kept-merge",
)
MANY_ROWS = ("many-shuffled", "many-curriculum")
ROWS = MAIN_ROWS + KEEP_ROWS + MANY_ROWS
DEV_SUITE = REPO / "examples" / "suites" / "dev.yaml"
#: The options a keep-the-base row's name may add to ``codiemb``, in the order they are written.
KEEP_OPTIONS = ("tau05", "mined", "keep-base", "kept-merge")
#: The retrieval τ of the ``+tau05`` rows (CoDiEmb's own is 0.02, ``MultiPositiveInfoNCELoss``'s default).
RETRIEVAL_TAU05 = 0.05
#: The kept-merge row's candidates and constraint, fixed before any run.
KEPT_MERGE_WEIGHTS = (0.25, 0.5, 0.75, 1.0)
KEPT_MERGE_EPSILON = 0.005
KEPT_MERGE_FORGETTING = 0.25
FORGETTING = "forgetting-msmarco"
FORGETTING_COLUMN = "kept (overlap@10)"
STS_MEAN = ("sts12", "sts13", "sts14", "sts15")
#: The same years without any pair of the training files (``exclude_seen`` in the suite); like "kept", not
#: one of the six quality columns, so that tables stay comparable with those measured before it existed.
UNSEEN_MEAN = tuple(f"{name}-unseen" for name in STS_MEAN)
UNSEEN_COLUMN = "STS12–15 unseen ρ"
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
SETTINGS = {"main": MAIN_ROWS + KEEP_ROWS, "many": MANY_ROWS}


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


def train_recipe(recipe: Mapping[str, Any], device: str) -> Trained:
    """Train a recipe mapping as ``hf-unified-embed train`` does: ``recipe_from_dict`` + ``train_from_recipe``
    (the model, its card and the recipe land in the recipe's ``output_dir``), timing its steps."""
    from hf_unified_embed.recipe import recipe_from_dict, train_from_recipe

    name = Path(recipe["output_dir"]).name
    timer = step_timer(device)
    with every_trainer_calls(timer):
        outcome = train_from_recipe(recipe_from_dict(recipe, origin=f"bench/quality.py:{name}"), overwrite=True)
    stamps = timer.stamps
    return Trained(
        Path(outcome.model_dir),
        steps=timer.steps,
        timed_steps=max(0, len(stamps) - 1),
        seconds=stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0,
        runtime=timer.runtime,
    )


#: The train files the main setting can draw on: task → (format, task type, path under --data-root, options).
MAIN_SOURCES: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "stsb": ("stsb", "sts", "sts/stsbenchmark/sts-train.csv", {}),
    "sick": ("sick", "sts", "sts/sick2014/SICK_train.txt", {}),
    "wikiqa": ("wikiqa", "retrieval", "ir/wikiqa/train.tsv", {}),
    "trecqa": ("trecqa", "retrieval", "ir/trecqa/train.csv", {}),
    # Each WikiQA question against its whole paragraph (its candidates joined): passage retrieval, in-batch.
    "wikiqa-passages": ("wikiqa", "retrieval", "ir/wikiqa/train.tsv", {"as_passage": True}),
    "msrp": ("msrp", "pair_classification", "pair/msrp/msr-para-train.tsv", {}),
    # The paraphrase pairs only, as (anchor, positive) retrieval rows: in-batch negatives, none of the
    # near-duplicate "not a paraphrase" pairs pushed apart.
    "msrp-positives": ("msrp", "retrieval", "pair/msrp/msr-para-train.tsv", {"positives_only": True}),
}
#: The main setting's tasks unless ``--main-tasks`` says otherwise (the H100 table's four).
MAIN_TASKS = ("stsb", "sick", "wikiqa", "trecqa")
#: The tasks the shipped recipe, ``make demo`` and the README quick start train (docs/quality.md, "WikiQA as
#: passages"): the four and WikiQA's questions against their whole paragraphs.
RECIPE_TASKS = ("stsb", "sick", "wikiqa", "wikiqa-passages", "trecqa")


def training_sources(data_root: Path, max_rows: int | None, tasks: Iterable[str] = MAIN_TASKS) -> dict[str, Any]:
    """The unified build recipe of the main setting's ``tasks`` (train splits only)."""
    sources = []
    for name in tasks:
        fmt, task_type, path, fmt_options = MAIN_SOURCES[name]
        sources.append(
            {
                "name": name,
                "format": fmt,
                "task_type": task_type,
                "data_files": str(data_root / path),
                "options": fmt_options,
                "max_rows": max_rows,
            }
        )
    return {"sources": sources}


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


#: The recipe a user runs (``hf-unified-embed train examples/recipes/train.yaml``; ``make demo`` trains
#: the same values): every trained row is this recipe with the changes of ``bench_recipe`` and its row's.
SHIPPED_RECIPE = REPO / "examples" / "recipes" / "train.yaml"
#: Data-CUBE's order (train.yaml's comment): task order from the curriculum plan, rows easy → hard.
CURRICULUM_SAMPLER = {"interleave": "round_robin", "instance_order": "easy_to_hard"}
#: sentence-transformers' own loss table: scored pairs → CoSENT; pairs with a class label (MSRP) → OnlineContrastive.
ST_LOSSES = {
    "retrieval": {"name": "MultipleNegativesRankingLoss"},
    "sts": {"name": "CoSENTLoss"},
    "pair_classification": {"name": "OnlineContrastiveLoss"},
}
#: The two runs of the ``hierarchical-merge`` row (its recipe values): an IR-leaning run on the retrieval
#: tasks and an STS-leaning run on every other task (pair classification included), CoDiEmb's losses at
#: their defaults.
MERGE_RUNS: dict[str, dict[str, Any]] = {
    "ir-leaning": {"losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss"}}},
    "sts-leaning": {"losses": {"sts": {"name": "CoDiEmbSTSLoss"}, "pair_classification": {"name": "CoDiEmbSTSLoss"}}},
}


def shipped_recipe() -> dict[str, Any]:
    """``examples/recipes/train.yaml`` as a mapping."""
    recipe: dict[str, Any] = yaml.safe_load(SHIPPED_RECIPE.read_text(encoding="utf-8"))
    return recipe


def bench_recipe(
    options: argparse.Namespace, data: Path, tasks: Sequence[str], steps: int, name: str
) -> dict[str, Any]:
    """The shipped recipe with what this command line sets for every row; the rest is train.yaml's.

    Set here: the data (the unified folder built from ``--data-root`` and the setting's ``tasks``), the
    run's name and folder (``--output-dir``/``name``), ``--base-model``, ``--negatives``,
    ``--max-seq-length``, one batch size for every task (``--batch-size``; train.yaml gives the
    retrieval tasks their own), the training arguments (``--learning-rate``, ``steps``, the seed, the
    device, no checkpoints, a log every tenth of the steps) and no evaluation inside the run: every
    model is evaluated alike afterwards (the shared suite at ``--eval-max-seq-length``, the
    forgetting entry). A row's own values (``ROW_SPECS``) then replace whole sections.
    """
    from hf_unified_embed.recipe import packaged_minilm_path

    recipe = shipped_recipe()
    base = str(options.base_model)
    recipe.update(
        base_model=None if base == str(packaged_minilm_path()) else base,
        model_name=f"all-MiniLM-L6-v2 {name} (bench/quality.py)",
        data={"path": str(data), "tasks": list(tasks)},
        negatives_per_query=options.negatives,
        max_seq_length=options.max_seq_length,
        sampler={**recipe["sampler"], "batch_sizes": {}},
        training_args={
            **recipe["training_args"],
            **recipe_training_args(
                options,
                max_steps=steps,
                per_device_train_batch_size=options.batch_size,
                learning_rate=options.learning_rate,
                logging_steps=max(1, steps // 10),
            ),
        },
        evaluation=None,
        output_dir=str(options.output_dir / name),
        seed=options.seed,
    )
    return recipe


def codiemb_loss_tables(options: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recipe ``losses`` sections of the CoDiEmb rows and of the ``+tau05`` rows, as the options set them.

    A ``CoDiEmbSTSLoss`` setting is written only where it differs from the loss's default (τ 0.02 and
    middle-layer weight 1, CoDiEmb's), so that with the default options the STS entry is train.yaml's.
    """
    import inspect

    from hf_unified_embed.losses import CoDiEmbSTSLoss

    sts: dict[str, Any] = {"name": options.sts_loss}
    if options.sts_loss == "CoDiEmbSTSLoss":
        defaults = inspect.signature(CoDiEmbSTSLoss).parameters
        given = {
            "infonce_temperature": options.sts_infonce_temperature,
            "mid_layer_weight": options.sts_mid_layer_weight,
        }
        sts.update({key: value for key, value in given.items() if value != defaults[key].default})
    codiemb = {
        "retrieval": {"name": "MultiPositiveInfoNCELoss"},  # τ 0.02: the loss's default, CoDiEmb's
        "sts": sts,
        "pair_classification": {"name": options.pair_loss},
    }
    return codiemb, {**codiemb, "retrieval": {"name": "MultiPositiveInfoNCELoss", "temperature": RETRIEVAL_TAU05}}


def codiemb_values(options: argparse.Namespace, tau05: bool = False, keep_base: bool = False) -> dict[str, Any]:
    """The recipe values of a CoDiEmb row: its losses, and ``keep_base`` (``--keep-base-weight``) if asked.

    The sampler is train.yaml's: one task per step, tasks shuffled, rows in random order.
    """
    values: dict[str, Any] = {"losses": codiemb_loss_tables(options)[1 if tau05 else 0]}
    if keep_base:
        values["keep_base"] = {"weight": options.keep_base_weight}
    return values


def curriculum_values(method: str) -> Callable[[argparse.Namespace], dict[str, Any]]:
    """The recipe values of a Data-CUBE row: the CoDiEmb losses, a curriculum planned inside the run with
    the base model as teacher (task order by ``method``, the difficulty of every row) and its sampler."""

    def values(options: argparse.Namespace) -> dict[str, Any]:
        return {
            **codiemb_values(options),
            "curriculum": {"teacher": str(options.base_model), "method": method},
            "sampler": CURRICULUM_SAMPLER,
        }

    return values


@dataclass(frozen=True)
class RowSpec:
    """How one row of the table is made.

    Attributes:
        setting: the data and steps it trains (``"main"`` or ``"many"``); ``None``: the untrained base.
        values: the row's recipe values (a function of the options); each replaces that section of
            ``bench_recipe`` whole.
        mined: train on the main setting with its retrieval negatives mined by the base model.
        merge: a row with no recipe form: ``"hierarchical"`` (the ``MERGE_RUNS`` recipes, then CoDiEmb's
            hierarchical merge) or ``"kept"`` (the ``merges`` row of the same seed interpolated with
            the base by ``merge search``).
        merges: the row a kept merge starts from.
    """

    setting: str | None = "main"
    values: Callable[[argparse.Namespace], dict[str, Any]] = field(default=lambda options: {})
    mined: bool = False
    merge: str | None = None
    merges: str | None = None


def keep_row_options(row: str) -> list[str]:
    """The options of a keep-the-base row, ``codiemb+tau05+kept-merge`` → ``["tau05", "kept-merge"]``.

    Options come in the order of ``KEEP_OPTIONS`` (so one configuration has one name, one output folder).
    """
    head, *options = row.split("+")
    if (
        head != "codiemb"
        or any(o not in KEEP_OPTIONS for o in options)
        or options != sorted(options, key=KEEP_OPTIONS.index)
    ):
        raise ValueError(f"{row!r}: expected codiemb followed by +options from {KEEP_OPTIONS}, in that order")
    if len(set(options)) != len(options):
        raise ValueError(f"{row!r}: an option is repeated")
    return options


def keep_row_spec(row: str) -> RowSpec:
    """The spec of ``codiemb`` and of a keep-the-base row, from the options its name lists."""
    options_of_row = keep_row_options(row)
    if options_of_row[-1:] == ["kept-merge"]:
        return RowSpec(merge="kept", merges=row.removesuffix("+kept-merge"))
    return RowSpec(
        values=lambda options: codiemb_values(
            options, tau05="tau05" in options_of_row, keep_base="keep-base" in options_of_row
        ),
        mined="mined" in options_of_row,
    )


#: Every row of the table: the setting it trains and its recipe values, or the merge it is.
ROW_SPECS: dict[str, RowSpec] = {
    "base": RowSpec(setting=None),
    # sentence-transformers' own recipe: its loss table and its PROPORTIONAL multi-dataset batch sampler.
    "st-baseline": RowSpec(values=lambda options: {"losses": ST_LOSSES, "sampler": {"kind": "proportional"}}),
    # Every task order (24 for four tasks, 120 for five).
    "codiemb+curriculum": RowSpec(values=curriculum_values("exact")),
    "hierarchical-merge": RowSpec(merge="hierarchical"),
    **{row: keep_row_spec(row) for row in ("codiemb", *KEEP_ROWS)},
    "many-shuffled": RowSpec("many", values=codiemb_values),
    "many-curriculum": RowSpec("many", values=curriculum_values("annealing")),
}


def row_recipe(
    row: str, options: argparse.Namespace, data: Path, tasks: Sequence[str], steps: int, name: str | None = None
) -> dict[str, Any]:
    """The recipe mapping a row trains (``name``: its run's name, default the row's): ``bench_recipe`` with
    the row's values."""
    spec = ROW_SPECS[row]
    if spec.setting is None or spec.merge is not None:
        raise ValueError(f"{row}: no recipe of its own (it trains nothing, or it is a merge)")
    recipe = bench_recipe(options, data, tasks, steps, name or row)
    recipe.update(spec.values(options))
    return recipe


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
    if FORGETTING in entries:
        row[FORGETTING_COLUMN] = pick_metric(entries[FORGETTING]["metrics"], r"neighbour_overlap@10", FORGETTING)
    if all(name in entries for name in UNSEEN_MEAN):
        row[UNSEEN_COLUMN] = statistics.fmean(
            pick_metric(entries[name]["metrics"], r"spearman_cosine", name) for name in UNSEEN_MEAN
        )
    return row


def aggregate(rows: Iterable[Mapping[str, float]]) -> dict[str, tuple[float, float | None]]:
    """Per column: the mean over seeds and the sample standard deviation (``None`` for one seed)."""
    rows = list(rows)
    return {
        column: (
            statistics.fmean(row[column] for row in rows),
            statistics.stdev(row[column] for row in rows) if len(rows) > 1 else None,
        )
        for column in rows[0]
        if all(column in row for row in rows)
    }


def markdown_table(
    table: Mapping[str, Mapping[str, tuple[float, float | None]]], step_ratio: Mapping[str, float | None]
) -> str:
    """The rows (mean, ± standard deviation over seeds when several) with the best mean of each metric in
    bold, each row's mean over the six quality columns, then its step time relative to ST's."""
    columns = list(dict.fromkeys(column for row in table.values() for column in row))
    quality = [column for column in columns if column not in (FORGETTING_COLUMN, UNSEEN_COLUMN)]
    header = [*columns, "mean (6)"]
    lines = ["| model | " + " | ".join(header) + f" | {STEP_COLUMN} |", "|---|" + "---:|" * (len(header) + 1)]
    means = {
        model: statistics.fmean(row[c][0] for c in quality if c in row) if row else float("nan")
        for model, row in table.items()
    }
    best = {column: max(row[column][0] for row in table.values() if column in row) for column in columns}
    best["mean (6)"] = max(means.values())
    for model, row in table.items():
        cells = []
        for column in columns:
            if column not in row:
                cells.append("—")
                continue
            mean, spread = row[column]
            text = f"{mean:.4f}" + (f" ± {spread:.4f}" if spread is not None else "")
            cells.append(f"**{text}**" if mean == best[column] else text)
        cells.append(f"**{means[model]:.4f}**" if means[model] == best["mean (6)"] else f"{means[model]:.4f}")
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


def parse_options(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: the examples' shared options and the report's own."""
    parser = example_parser(__file__, __doc__)
    parser.add_argument("--epochs", type=float, default=1.0, help="passes over each setting's data (default: 1)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128, help="during training")
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--negatives", type=int, default=1, help="hard negatives per retrieval row")
    parser.add_argument("--max-rows-per-task", type=int, help="cap the rows of every training task (a faster run)")
    parser.add_argument(
        "--main-tasks",
        nargs="+",
        choices=list(MAIN_SOURCES),
        default=list(MAIN_TASKS),
        help="the main setting's training tasks (default: the four of the H100 table, which the recipe "
        "and the demo train; add msrp or msrp-positives to measure MSRP in training)",
    )
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument("--diagnostics", action="store_true", help="also compute CoDiEmb §4 diagnostics")
    parser.add_argument("--resume", action="store_true", help="reuse rows already evaluated in --output-dir")
    parser.add_argument(
        "--report-only", action="store_true", help="only tabulate the rows already evaluated in --output-dir"
    )
    parser.add_argument("--markdown", type=Path, help="also write the tables into this Markdown file")
    parser.add_argument(
        "--seeds", type=int, nargs="+", help="train every trained row once per seed (default: --seed); mean ± s.d."
    )
    parser.add_argument(
        "--sts-infonce-temperature",
        type=float,
        default=0.02,
        help="CoDiEmbSTSLoss's (middle-layer) InfoNCE τ in every CoDiEmb row (default: CoDiEmb's 0.02)",
    )
    parser.add_argument(
        "--sts-mid-layer-weight",
        type=float,
        default=1.0,
        help="CoDiEmbSTSLoss's middle-layer InfoNCE weight in every CoDiEmb row (default: CoDiEmb's 1; 0 leaves "
        "the STS loss its list-wise terms only)",
    )
    parser.add_argument(
        "--sts-loss",
        choices=("CoDiEmbSTSLoss", "CoSENTLoss"),
        default="CoDiEmbSTSLoss",
        help="the CoDiEmb rows' STS loss (default: CoDiEmbSTSLoss; CoSENTLoss is st-baseline's)",
    )
    parser.add_argument(
        "--pair-loss",
        choices=("CoDiEmbSTSLoss", "AnglEJointLoss"),
        default="CoDiEmbSTSLoss",
        help="the CoDiEmb rows' pair-classification loss (default: CoDiEmbSTSLoss; the recipe's is AnglEJointLoss)",
    )
    parser.add_argument("--keep-base-weight", type=float, default=1.0, help="KeepBaseLoss weight (default: 1)")
    parser.add_argument(
        "--forgetting-texts", type=int, default=2000, help="MS MARCO passages of the forgetting column (default: 2000)"
    )
    parser.add_argument(
        "--eval-max-seq-length", type=int, help="evaluate every model (the base too) at this length (default: its own)"
    )
    parser.add_argument(
        "--msmarco-queries",
        type=int,
        help="evaluate MS MARCO on its first N queries and only their judged passages (the CPU setting)",
    )
    parser.add_argument(
        "--report-name", default="quality", help="Markdown blocks <name>-main / <name>-many (default: quality)"
    )
    return parse_example_args(parser, argv, full_steps=-1)


def report_suite(options: argparse.Namespace) -> dict[str, Any]:
    """The suite every model is scored with: shared.yaml, the forgetting entry, MS MARCO reduced if asked."""
    suite = evaluation_suite(options, SUITE, data_root=options.data_root)
    suite["evaluations"] = [*suite["evaluations"], forgetting_entry(options)]
    if options.msmarco_queries:
        folder = reduced_beir(
            options.data_root / "ir" / "msmarco-dl-subset",
            options.output_dir / "msmarco-reduced",
            options.msmarco_queries,
        )
        for entry in suite["evaluations"]:
            if entry["name"] in ("msmarco-dl", FORGETTING):
                entry["data_files"] = str(folder.resolve())  # not relative to the suite's data root
    return suite


@dataclass
class Setting:
    """Training data of a setting: the unified folder a recipe reads, its tasks, and the steps every row trains."""

    path: Path
    tasks: Any  # DatasetDict: sizes and task types for the merge row's split
    steps: int


class Bench:
    """One report run: the settings built so far and the results; makes, evaluates and records rows."""

    def __init__(self, options: argparse.Namespace, argv: list[str] | None) -> None:
        self.options = options
        self.argv = argv
        self.suite = report_suite(options)
        self.settings: dict[str, Setting] = {}
        self.results: dict[str, Any] = {}

    def key(self, row: str, seed: int) -> str:
        """A row's name in the results, the output folder and ``evaluations/``: ``row@seed`` under ``--seeds``
        (so runs of one seed each, ``--resume``-d together, aggregate)."""
        return row if row == "base" or self.options.seeds is None else f"{row}@{seed}"

    def setting(self, name: str) -> Setting:
        """A setting's tasks, built from ``--data-root`` and saved as a unified folder once per run."""
        from hf_unified_embed.data import build_unified, save_unified

        if name not in self.settings:
            options = self.options
            sources = (
                training_sources(options.data_root, options.max_rows_per_task, options.main_tasks)
                if name == "main"
                else many_task_sources(
                    options.data_root, options.output_dir / "many-task-sources", options.max_rows_per_task
                )
            )
            tasks = build_unified(sources)
            path = save_unified(tasks, options.output_dir / f"{name}-data", overwrite=True)
            epoch = epoch_steps(tasks, options.batch_size)
            steps = options.max_steps if options.max_steps > 0 else max(1, round(options.epochs * epoch))
            print(
                f"{name} setting: {len(tasks)} tasks, {sum(len(ds) for ds in tasks.values()):,} rows, "
                f"{epoch} steps per epoch; every row trains {steps} steps",
                flush=True,
            )
            self.settings[name] = Setting(Path(path), tasks, steps)
        return self.settings[name]

    def mined(self) -> Setting:
        """The main setting with its retrieval tasks' negatives mined by the base (once per output folder)."""
        from sentence_transformers import SentenceTransformer

        from hf_unified_embed.data import load_unified, save_unified
        from hf_unified_embed.negatives import HardNegativeConfig, mine_hard_negatives

        if "mined" not in self.settings:
            options, main = self.options, self.setting("main")
            folder = options.output_dir / "mined-main"
            if not (folder / "README.md").is_file():  # written whole by save_unified (staged)
                began = time.perf_counter()
                scratch = options.output_dir / "mining-scratch"
                scratch.mkdir(parents=True, exist_ok=True)
                result = mine_hard_negatives(
                    main.tasks,
                    SentenceTransformer(options.base_model, device=options.device),
                    HardNegativeConfig(num_negatives=4),
                    scratch_dir=scratch,
                )
                shutil.rmtree(scratch, ignore_errors=True)
                save_unified(result.tasks, folder, overwrite=True)
                print(
                    f"[mining] retrieval negatives mined by the base in {time.perf_counter() - began:.0f} s",
                    flush=True,
                )
            self.settings["mined"] = Setting(folder, load_unified(folder), main.steps)
        return self.settings["mined"]

    def train(self, row: str, name: str) -> Trained:
        """A row with a recipe form: its recipe, trained by ``train_from_recipe``."""
        spec = ROW_SPECS[row]
        assert spec.setting is not None
        setting = self.mined() if spec.mined else self.setting(spec.setting)
        trained = train_recipe(
            row_recipe(row, self.options, setting.path, list(setting.tasks), setting.steps, name),
            self.options.device,
        )
        plan = trained.path / "curriculum_plan.json"  # the recipe run keeps its plan next to the model
        if plan.is_file():
            order = json.loads(plan.read_text(encoding="utf-8"))["order"]
            print(f"[{name}] curriculum task order: {' → '.join(order)}", flush=True)
        return trained

    def make(self, row: str, name: str, seed: int) -> Trained | None:
        """Train (or merge) a row; ``None`` for the base."""
        spec = ROW_SPECS[row]
        if spec.setting is None:
            return None
        if spec.merge == "kept":
            assert spec.merges is not None
            return self.kept_merge(name, spec.merges, seed)
        if spec.merge == "hierarchical":
            return self.hierarchical_merge(name)
        return self.train(row, name)

    # The two merges have no recipe form (a recipe trains one model); their training runs are recipe runs.

    def kept_merge(self, name: str, run_row: str, seed: int) -> Trained:
        """The seed's ``run_row`` run interpolated with the base, λ chosen under the keep-the-base constraint."""
        from hf_unified_embed.merge.search import search_merge

        options = self.options
        run_key = self.key(run_row, seed)
        run = options.output_dir / run_key
        training = self.results.get(run_key, {}).get("training")
        if not (run / "modules.json").is_file() or training is None:
            raise SystemExit(f"{name}: needs the {run_key} row first (put {run_row} before it in --rows)")
        dev = evaluation_suite(options, DEV_SUITE, data_root=options.data_root)
        dev_metrics = [entry["name"] for entry in dev["evaluations"] if entry["kind"] != "forgetting"]
        result = search_merge(
            [run],
            "task_arithmetic",
            options.output_dir / name,
            base=options.base_model,
            suite=dev,
            search={"weights": list(KEPT_MERGE_WEIGHTS)},
            objective={metric: 1.0 / len(dev_metrics) for metric in dev_metrics},
            constraint={"epsilon": {"default": KEPT_MERGE_EPSILON, "forgetting-dev": KEPT_MERGE_FORGETTING}},
            device=options.device,
            overwrite=True,
            show_progress=False,
        )
        print(f"[{name}] chose {result.best.parameters} (admissible: {result.best.admissible})", flush=True)
        return Trained(
            options.output_dir / name,
            steps=training["steps"],
            timed_steps=training["timed_steps"],
            seconds=training["seconds"],
            runtime=training["train_runtime"],
        )

    def hierarchical_merge(self, name: str) -> Trained:
        """The ``MERGE_RUNS`` recipes, each for its share of the steps, merged hierarchically (CoDiEmb)."""
        from hf_unified_embed.merge import merge_models

        options, main = self.options, self.setting("main")
        tasks = {
            "ir-leaning": [task for task, ds in main.tasks.items() if ds[0]["task_type"] == "retrieval"],
            "sts-leaning": [task for task, ds in main.tasks.items() if ds[0]["task_type"] != "retrieval"],
        }
        # Each run trains its share of the steps: one epoch of its own tasks at the default length.
        ir_tasks = {task: main.tasks[task] for task in tasks["ir-leaning"]}
        share = epoch_steps(ir_tasks, options.batch_size) / epoch_steps(main.tasks, options.batch_size)
        ir_steps = max(1, round(main.steps * share))
        steps = {"ir-leaning": ir_steps, "sts-leaning": max(1, main.steps - ir_steps)}
        runs = {}
        for run, values in MERGE_RUNS.items():
            recipe = bench_recipe(options, main.path, tasks[run], steps[run], run)
            runs[run] = train_recipe({**recipe, **values}, options.device)
        ir_run, sts_run = runs["ir-leaning"], runs["sts-leaning"]
        merged = merge_models(
            [ir_run.path, sts_run.path],
            "hierarchical",
            options.output_dir / name,
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

    def run_row(self, row: str, seed: int) -> bool | None:
        """Reuse (``--resume``, ``--report-only``) or make and evaluate one row.

        Returns whether the report holds the row: ``True`` once written (after every evaluated row, so an
        interrupted run keeps the rows it finished), ``False`` for a reused row, ``None`` for a row skipped.
        """
        options = self.options
        key = self.key(row, seed)
        saved = options.output_dir / "evaluations" / f"{key}.json"
        if options.report_only and not saved.is_file():
            return None
        if (options.resume or options.report_only) and saved.is_file():
            self.results[key] = json.loads(saved.read_text(encoding="utf-8"))
            print(f"[{key}] reusing {saved}", flush=True)
            if options.resume:
                model_path = options.base_model if row == "base" else str(options.output_dir / key)
                self.results[key] = complete_evaluation(self.results[key], saved, model_path, self.suite, options)
            return False
        from hf_unified_embed.evaluation import run_suite

        row_started = time.perf_counter()
        print(f"\n=== {key} ===", flush=True)
        trained = self.make(row, key, seed)
        model_path = options.base_model if trained is None else str(trained.path)
        evaluation = run_suite(evaluation_model(model_path, options), self.suite, diagnostics=options.diagnostics)
        evaluation.extra["seconds"] = time.perf_counter() - row_started
        evaluation.extra["row"], evaluation.extra["seed"] = row, None if trained is None else seed
        if trained is not None:
            evaluation.extra["training"] = {
                "steps": trained.steps,
                "timed_steps": trained.timed_steps,
                "seconds": trained.seconds,
                "train_runtime": trained.runtime,
            }
        evaluation.save_json(saved, overwrite=True)
        self.results[key] = json.loads(saved.read_text(encoding="utf-8"))
        print(f"[{key}] done in {evaluation.extra['seconds']:.0f} s", flush=True)
        report(self.results, options, self.argv)
        return True


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    options.output_dir.mkdir(parents=True, exist_ok=True)
    bench = Bench(options, argv)
    reported = False
    for seed in options.seeds or [options.seed]:
        options.seed = seed
        for row in options.rows:
            if bench.key(row, seed) in bench.results:
                continue  # the base: once for all seeds
            outcome = bench.run_row(row, seed)
            reported = reported if outcome is None else outcome
    if not reported:
        report(bench.results, options, argv)
    return 0


def evaluation_model(model_path: str, options: argparse.Namespace) -> Any:
    """The saved model at ``model_path`` as every row is evaluated: on ``--device``, at ``--eval-max-seq-length``."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_path, device=options.device)
    if options.eval_max_seq_length:
        model.max_seq_length = options.eval_max_seq_length
    return model


def complete_evaluation(
    evaluation: dict[str, Any], saved: Path, model_path: str, suite: Mapping[str, Any], options: argparse.Namespace
) -> dict[str, Any]:
    """A reused row's evaluation with the suite entries added since it was scored (its saved model scores
    them; the entries it has are kept as they are), written back to ``saved``."""
    from hf_unified_embed.evaluation import run_suite
    from hf_unified_embed.utils.outputs import StagedOutput

    missing = [entry for entry in suite["evaluations"] if entry["name"] not in evaluation["results"]]
    if not missing:
        return evaluation
    names = [entry["name"] for entry in missing]
    if not Path(model_path).is_dir():
        print(f"  its model {model_path} is gone: {names} stay unscored", flush=True)
        return evaluation
    print(f"  scoring {names}, added to the suite since", flush=True)
    model = evaluation_model(model_path, options)
    added = json.loads(run_suite(model, {**suite, "evaluations": missing}, diagnostics=options.diagnostics).to_json())
    evaluation["results"].update(added["results"])
    evaluation["table"] += added["table"]
    evaluation["model-index"][0]["results"] += added["model-index"][0]["results"]
    with StagedOutput(saved, overwrite=True, kind="file") as stage:
        stage.path.write_text(json.dumps(evaluation, indent=2) + "\n", encoding="utf-8")
    return evaluation


def row_of(key: str) -> str:
    """The row of a results key (``codiemb@2`` → ``codiemb``)."""
    return key.split("@", 1)[0]


def step_ratios(results: Mapping[str, Any]) -> dict[str, float | None]:
    """Each trained row's mean seconds per optimizer step (after the first of each run; mean over seeds) over
    the ST baseline's.

    ``None`` for a row that did not train or timed no step.
    """
    per_step: dict[str, list[float]] = defaultdict(list)
    for key, result in results.items():
        if result.get("training") and result["training"].get("timed_steps"):
            per_step[row_of(key)].append(result["training"]["seconds"] / result["training"]["timed_steps"])
    means = {row: statistics.fmean(values) for row, values in per_step.items()}
    baseline = means.get("st-baseline")
    rows = dict.fromkeys(row_of(key) for key in results)
    return {row: (means[row] / baseline if baseline and row in means else None) for row in rows}


def reduced_beir(source: Path, target: Path, queries: int) -> Path:
    """A BEIR folder with the first ``queries`` queries of ``source`` and only the passages judged for them.

    The CPU setting's MS MARCO: every query keeps all its judged passages (graded nDCG@10 is computed
    over the same judgements), the corpus loses the other queries' pools (so it is smaller and the
    task easier: values are comparable between rows, not with the full corpus).
    """

    def lines(path: Path) -> list[str]:  # not splitlines(): passages hold U+2028 inside their JSON strings
        return [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]

    kept = [json.loads(line) for line in lines(source / "queries.jsonl")][:queries]
    ids = {query["_id"] for query in kept}
    qrels = lines(source / "qrels" / "test.tsv")
    header = [qrels.pop(0).split("\t")] if qrels and qrels[0].startswith("query-id") else []
    judgements = [line.split("\t") for line in qrels if line.split("\t")[0] in ids]
    judged = {fields[1] for fields in judgements}
    (target / "qrels").mkdir(parents=True, exist_ok=True)
    with open(target / "corpus.jsonl", "w", encoding="utf-8") as corpus:
        for line in lines(source / "corpus.jsonl"):
            if json.loads(line)["_id"] in judged:
                corpus.write(line + "\n")
    (target / "queries.jsonl").write_text("".join(json.dumps(query) + "\n" for query in kept), encoding="utf-8")
    (target / "qrels" / "test.tsv").write_text(
        "".join("\t".join(f) + "\n" for f in header + judgements), encoding="utf-8"
    )
    return target


def forgetting_entry(options: argparse.Namespace) -> dict[str, Any]:
    """The suite entry of the "kept" column: neighbour overlap@10 with the base over MS MARCO passages (no labels)."""
    return {
        "name": FORGETTING,
        "kind": "forgetting",
        "source": "beir",
        "data_files": "ir/msmarco-dl-subset",
        "split": "test",
        "evaluator": {"reference": str(options.base_model), "k": 10, "max_texts": options.forgetting_texts},
        "diagnostics": False,
    }


def report(results: Mapping[str, Any], options: argparse.Namespace, argv: list[str] | None) -> None:
    """Print the tables and write ``quality.json`` (and the Markdown blocks) for the rows so far."""
    ratios = step_ratios(results)
    per_row: dict[str, list[dict[str, float]]] = defaultdict(list)
    for key, result in results.items():
        per_row[row_of(key)].append(summarize(result))
    tables = {
        setting: {row: aggregate(per_row[row]) for row in rows if row in per_row} for setting, rows in SETTINGS.items()
    }
    command = ".venv/bin/python " + " ".join(["bench/quality.py", *(argv if argv is not None else sys.argv[1:])])
    summary: dict[str, Any] = {
        "command": command,
        "settings": {key: str(value) for key, value in vars(options).items()},
        "machine": machine_note(options.device),
        # Each row's own wall time (training, merge search, evaluation) summed, so that a --resume-d or
        # --report-only run states what the whole table cost, not how long this invocation took.
        "seconds": sum(float(result.get("seconds") or 0.0) for result in results.values()),
        "rows_missing": [row for row in options.rows if row not in per_row],
        "training": {key: result.get("training") for key, result in results.items()},
        "step_time_vs_st_baseline": ratios,
        "per_seed": {key: summarize(result) for key, result in results.items()},
        "tables": {
            setting: {row: {column: list(value) for column, value in table[row].items()} for row in table}
            for setting, table in tables.items()
        },
    }
    text = json.dumps(summary, indent=2, ensure_ascii=False) + "\n"
    (options.output_dir / "quality.json").write_text(text, encoding="utf-8")
    for setting, table in tables.items():
        if not table:
            continue
        markdown = markdown_table(table, ratios)
        print(f"\n{setting} setting\n{markdown}")
        if options.markdown:
            write_report(options.markdown, f"{options.report_name}-{setting}", markdown, summary)
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
