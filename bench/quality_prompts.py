"""Benchmark: the report's models scored as a user of the saved folder encodes them, beside the alternatives.

A model trained with instructions saves them as its named prompts (``query`` / ``document`` are the default
task's; see docs/training.md, "Prompts"), and the quality report (docs/quality.md) loads each saved folder
as a user does, so its numbers are what ``encode_query`` / ``encode_document`` give. This shows, once each,
what differs from that: the texts encoded bare (the prompts a model saved before the instructions became
prompts: empty), and each ``--tasks`` task's training-time instructions (from ``--data``, the report's
instructed data, as the collator used them) where they are not the saved ones. MS MARCO
(``InformationRetrievalEvaluator``) and TrecQA (``RerankingEvaluator``) call ``encode_query`` and
``encode_document``; the STS and pair-classification evaluators call ``encode`` without a prompt, so those
columns do not change and are not scored here.

Usage (the report's models of seeds 42–44)::

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
    return {
        task: {"query": prompts.get(task, {}).get("query", ""), "document": prompts.get(task, {}).get("positive", "")}
        for task in tasks
    }


def score(model: Any, prompts: dict[str, str], data_root: Path | None) -> dict[str, float]:
    """The ``ENTRIES`` of the suite with ``prompts`` as the model's ``query`` / ``document`` (its own restored after)."""
    from hf_unified_embed.evaluation import load_suite, run_suite

    suite = load_suite(SUITE, data_root)
    suite.entries = [entry for entry in suite.entries if entry.name in ENTRIES]
    saved = dict(model.prompts)
    model.prompts = {**saved, **prompts}
    try:
        results = run_suite(model, suite, diagnostics=False, show_progress_bar=False)
    finally:
        model.prompts = saved
    return {name: results[name].metrics[metric] for name, metric in ENTRIES.items()}


def variants(model: Any, data: Path | None, tasks: list[str]) -> dict[str, dict[str, str]]:
    """``saved`` (the folder's own prompts), then each alternative that encodes differently from it, once."""
    own = {side: model.prompts.get(side, "") for side in ("query", "document")}
    candidates = {"bare": {"query": "", "document": ""}}
    if data is not None and tasks:
        candidates.update({f"{task} (training)": side for task, side in task_prompts(data, tasks, model).items()})
    result = {"saved": own}
    for name, prompts in candidates.items():
        if prompts not in result.values():
            result[name] = prompts
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--data", type=Path, default=None, help="the report's instructed data (recipe-data)")
    parser.add_argument("--tasks", nargs="+", default=[], help="tasks whose training instructions to score too")
    parser.add_argument("--data-root", type=Path, default=None, help="overrides the suite's data_root")
    parser.add_argument("--json", type=Path, default=None, help="also write the values here")
    args = parser.parse_args(argv)

    from sentence_transformers import SentenceTransformer

    values: dict[str, dict[str, dict[str, float]]] = {}
    print("| model | prompts | MS MARCO nDCG@10 | Δ | TrecQA MAP | Δ |\n|---|---|---:|---:|---:|---:|")
    for path in args.models:
        model = SentenceTransformer(str(path), device="cpu")
        values[path.name] = {}
        for name, prompts in variants(model, args.data, args.tasks).items():
            values[path.name][name] = got = score(model, prompts, args.data_root)
            saved = values[path.name]["saved"]
            cells = [f"{got[entry]:.4f} | {got[entry] - saved[entry]:+.4f}" for entry in ENTRIES]
            print(f"| {path.name} | {name} | {' | '.join(cells)} |", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(values, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
