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
main and many-task data hold no instructions (so the earlier tables stay reproducible), so the recipe's
``instructions: true`` adds none there. The table gives each trained row's mean optimizer-step time
relative to ``st-baseline`` in the same run.

**The shipped recipe** (``--rows recipe ...``; ``quality_recipe``): ``recipe`` is
``examples/recipes/train.yaml`` as users run it — its tasks, losses, negatives, per-task batch sizes,
learning rate and one epoch — on the report's data built **with the build recipe's instructions**
(``examples/recipes/sample.yaml``, what ``make demo`` builds), nothing else changed but the data folder,
the output folder, the seed and the device. ``recipe+levers`` changes the recipe by its levers
(``RECIPE_LEVERS``: ``batch128``, ``keep-base``, ``semeval12``, ``gur``, ``no-instructions``, ``mined``,
``2ep``, combinable in that order, optionally followed by ``kept-merge``: ``recipe+2ep+kept-merge``). Its
table (the ``<report-name>-recipe`` block) gives absolute costs —
optimizer steps, seconds per step, the whole training in minutes, peak memory (the process's peak
resident set on the CPU, the allocated peak on CUDA) — since its rows differ in steps and batch sizes.

Full report (a GPU: minutes; the 2-core CPU machine: hours)::

    .venv/bin/python bench/quality.py --device cuda --output-dir outputs/quality --markdown docs/quality.md

The shipped recipe and its levers, three seeds (one process per row and seed: its own peak memory)::

    .venv/bin/python bench/quality.py --seeds 42 --rows recipe recipe+kept-merge --output-dir outputs/quality-recipe --resume
    .venv/bin/python bench/quality.py --seeds 42 43 44 --rows base recipe recipe+kept-merge \\
        --output-dir outputs/quality-recipe --report-name quality-recipe --report-only --markdown docs/quality.md

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
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The examples' shared command line lives next to them (examples/example_cli.py), not in the package.
if str(REPO / "examples") not in sys.path:
    sys.path.insert(0, str(REPO / "examples"))
# The report's modules, and the step timing shared with bench/step.py, live beside this file.
if str(REPO / "bench") not in sys.path:
    sys.path.insert(0, str(REPO / "bench"))

from example_cli import (  # noqa: E402
    example_parser,
    parse_example_args,
    recipe_training_args,
)
from quality_recipe import (  # noqa: E402
    GUR_TASK,
    RECIPE_LEVERS,
    RECIPE_ROWS,
    SHIPPED_RECIPE,
    build_instructions,
    merged_run,
    recipe_levers,
    recipe_row_recipe,
    recipe_tasks,
)
from quality_report import (  # noqa: E402
    FORGETTING,
    FORGETTING_COLUMN,
    KEPT_FLOOR,
    STS_MEAN,
    UNSEEN_COLUMN,
    UNSEEN_MEAN,
    aggregate,
    chosen_row,
    cost_columns,
    line_gaps,
    markdown_table,
    report,
    row_of,
    rule_violations,
    step_ratios,
    summarize,
    write_report,
)
from quality_rows import (  # noqa: E402
    KEEP_ROWS,
    RETRIEVAL_TAU05,
    ROW_SPECS,
    ROWS,
    codiemb_loss_tables,
    keep_row_options,
    row_name,
    row_recipe,
)
from quality_run import Bench, PeakMemory, Setting, complete_evaluation, reduced_beir  # noqa: E402
from quality_sources import (  # noqa: E402
    INSTRUCTIONS_LIKE,
    MAIN_SOURCES,
    MAIN_TASKS,
    RECIPE_TASKS,
    _question_buckets,
    epoch_steps,
    gur_documents,
    many_task_sources,
    training_sources,
)

#: What the report's module gives its tests and bench/merge_search.py: the parts it is made of, by concern
#: (``quality_sources``: data; ``quality_rows`` and ``quality_recipe``: rows; ``quality_run``: training and
#: scoring; ``quality_report``: tables).
__all__ = [
    "FORGETTING",
    "FORGETTING_COLUMN",
    "GUR_TASK",
    "INSTRUCTIONS_LIKE",
    "KEEP_ROWS",
    "KEPT_FLOOR",
    "MAIN_SOURCES",
    "MAIN_TASKS",
    "RECIPE_LEVERS",
    "RECIPE_ROWS",
    "RECIPE_TASKS",
    "RETRIEVAL_TAU05",
    "ROWS",
    "ROW_SPECS",
    "SHIPPED_RECIPE",
    "STS_MEAN",
    "UNSEEN_COLUMN",
    "UNSEEN_MEAN",
    "Bench",
    "PeakMemory",
    "Setting",
    "_question_buckets",
    "aggregate",
    "build_instructions",
    "chosen_row",
    "codiemb_loss_tables",
    "complete_evaluation",
    "cost_columns",
    "epoch_steps",
    "gur_documents",
    "keep_row_options",
    "line_gaps",
    "main",
    "many_task_sources",
    "markdown_table",
    "merged_run",
    "parse_options",
    "recipe_levers",
    "recipe_row_recipe",
    "recipe_tasks",
    "recipe_training_args",
    "reduced_beir",
    "report",
    "row_of",
    "row_recipe",
    "rule_violations",
    "step_ratios",
    "summarize",
    "training_sources",
    "write_report",
]


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
    parser.add_argument(
        "--rows",
        nargs="+",
        type=row_name,
        default=list(ROWS),
        help=f"rows to run (default: the main and many-task settings): {', '.join(ROWS)}; the shipped recipe: "
        f"recipe, or recipe followed by +levers from {', '.join(RECIPE_LEVERS)} (in that order)",
    )
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
        "--report-name",
        default="quality",
        help="Markdown blocks <name>-main / <name>-many / <name>-recipe (default: quality)",
    )
    return parse_example_args(parser, argv, full_steps=-1)


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


if __name__ == "__main__":
    raise SystemExit(main())
