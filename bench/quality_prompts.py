"""Benchmark: the shipped recipe's models scored with their training instructions as prompts, beside bare.

The recipe trains with every task's instructions (INSTRUCTOR: each text behind its task's instruction, the
instruction left out of the pooling); the model it saves has empty ``query`` and ``document`` prompts, so a
user — and the quality report (docs/quality.md) — encodes bare texts. This measures what shipping a task's
instructions as the model's ``query`` / ``document`` prompts would change where sentence-transformers uses
them: MS MARCO (``InformationRetrievalEvaluator``) and TrecQA (``RerankingEvaluator``) call ``encode_query``
and ``encode_document``, which put the model's prompts of those names in front of the texts. The STS and
pair-classification evaluators call ``encode`` without a prompt, so those columns do not change.

For each model: the two entries of ``examples/suites/shared.yaml`` scored bare, then with the ``query`` /
``document`` prompts of each ``--tasks`` task (its instructions in ``--data``, the report's instructed data,
as the collator used them), in one process; the table gives each variant's values and its difference from
bare. Usage (the report's models of seeds 42–44)::

    .venv/bin/python bench/quality_prompts.py outputs/q39/all/recipe@42 outputs/q39/all/recipe@43 \\
        outputs/q39/all/recipe@44 --data outputs/q39/all/recipe-data --tasks trecqa wikiqa-passages
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "examples" / "suites" / "shared.yaml"
#: The suite entries whose evaluators encode with the model's ``query`` / ``document`` prompts, and their metric.
ENTRIES = {"msmarco-dl": "cosine_ndcg@10", "trecqa-test": "map"}


def task_prompts(data: Path, tasks: list[str], model: Any) -> dict[str, dict[str, str]]:
    """``{task: {"query": ..., "document": ...}}``: each task's instructions as the training collator used them."""
    from hf_unified_embed.data import load_unified
    from hf_unified_embed.training.prompts import prompts_from_unified

    prompts = prompts_from_unified(load_unified(data, tasks=tasks), model.tokenizer, model.max_seq_length)
    return {task: {"query": prompts[task]["query"], "document": prompts[task]["positive"]} for task in tasks}


def score(model: Any, prompts: dict[str, str], data_root: Path | None) -> dict[str, float]:
    from hf_unified_embed.evaluation import load_suite, run_suite

    suite = load_suite(SUITE, data_root)
    suite.entries = [entry for entry in suite.entries if entry.name in ENTRIES]
    model.prompts = dict(prompts)
    results = run_suite(model, suite, diagnostics=False, show_progress_bar=False)
    return {name: results[name].metrics[metric] for name, metric in ENTRIES.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--data", type=Path, required=True, help="the report's instructed data (recipe-data)")
    parser.add_argument("--tasks", nargs="+", required=True, help="tasks whose instructions become the prompts")
    parser.add_argument("--data-root", type=Path, default=None, help="overrides the suite's data_root")
    parser.add_argument("--json", type=Path, default=None, help="also write the values here")
    args = parser.parse_args(argv)

    from sentence_transformers import SentenceTransformer

    values: dict[str, dict[str, dict[str, float]]] = {}
    print("| model | prompts | MS MARCO nDCG@10 | Δ | TrecQA MAP | Δ |\n|---|---|---:|---:|---:|---:|")
    for path in args.models:
        model = SentenceTransformer(str(path), device="cpu")
        variants = {"bare": {"query": "", "document": ""}, **task_prompts(args.data, args.tasks, model)}
        values[path.name] = {}
        for name, prompts in variants.items():
            values[path.name][name] = got = score(model, prompts, args.data_root)
            bare = values[path.name]["bare"]
            cells = [f"{got[entry]:.4f} | {got[entry] - bare[entry]:+.4f}" for entry in ENTRIES]
            print(f"| {path.name} | {name} | {' | '.join(cells)} |", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(values, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
