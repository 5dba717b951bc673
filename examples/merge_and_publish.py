"""Merge two fine-tuned checkpoints, evaluate the merge, write its card and publish it.

Give two model folders with ``--models``, or let the script train two short runs first from the
packaged all-MiniLM-L6-v2 (an IR-leaning run on WikiQA + TrecQA train, an STS-leaning run on STS-B +
SICK train, through :func:`hf_unified_embed.recipe.run.train_from_recipe`). Then:

1. merge them with ``--method soup`` (uniform weight average, Wortsman et al., 2022),
   ``hierarchical`` (CoDiEmb Eq. 10–12: per-layer weights from each run's delta to the base),
   ``ties`` (mergekit's TIES against the base, density 0.5) or ``slerp`` (t = 0.5); with
   ``--search``, the SLERP ``t`` is chosen on the development sets by ``merge search`` instead
   (the card then shows the search table and plot);
2. evaluate base, inputs and merge on the development sets (STS-B dev, SICK trial, TrecQA dev);
3. rewrite the merge's card with the results as ``model-index``;
4. :func:`hf_unified_embed.hub.publishing.push_folder`: without ``--repo-id``, or with ``--dry-run``,
   print the files and card that would be sent; with ``--repo-id`` and no ``--dry-run`` it really
   creates the repository and uploads (needs a Hub token and network).

Run::

    .venv/bin/python examples/merge_and_publish.py --max-steps 2              # quick check, dry run
    .venv/bin/python examples/merge_and_publish.py --models run-a run-b --method soup --dry-run \\
        --repo-id me/minilm-soup
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from example_cli import (
    evaluation_suite,
    example_parser,
    parse_example_args,
    recipe_training_args,
    run_example,
)

PLACEHOLDER_REPO_ID = "your-name/all-MiniLM-L6-v2-merged"


def dev_suite(data_root: Path) -> dict[str, Any]:
    """Development sets only: the choice of method or inputs may be made on these."""
    return {
        "name": "development",
        "data_root": str(data_root),
        "diagnostics": False,
        "evaluations": [
            {
                "name": "stsb-dev",
                "kind": "sts",
                "source": "stsb",
                "data_files": "sts/stsbenchmark/sts-dev.csv",
                "split": "validation",
            },
            {
                "name": "sick-trial",
                "kind": "sts",
                "source": "sick",
                "data_files": "sts/sick2014/SICK_trial.txt",
                "split": "validation",
            },
            {
                "name": "trecqa-dev",
                "kind": "reranking",
                "source": "trecqa",
                "data_files": "ir/trecqa/dev.csv",
                "split": "validation",
            },
        ],
    }


def train_run(
    name: str, tasks: list[str], losses: dict[str, Any], data_dir: Path, base: str, args: argparse.Namespace
) -> Path:
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe

    recipe = recipe_from_dict(
        {
            "base_model": base,
            "model_name": f"all-MiniLM-L6-v2 {name}",
            "data": {"path": str(data_dir), "tasks": tasks},
            "losses": losses,
            "instructions": False,
            "sampler": {"interleave": "shuffled"},
            "training_args": recipe_training_args(
                args, per_device_train_batch_size=32, learning_rate=2e-5, warmup_steps=0.1, logging_steps=10
            ),
            "output_dir": str(args.output_dir / name),
            "seed": args.seed,
        },
        origin=f"examples/merge_and_publish.py:{name}",
    )
    return train_from_recipe(recipe, overwrite=True).model_dir


def train_inputs(base: str, args: argparse.Namespace) -> tuple[Path, Path]:
    from hf_unified_embed.data import build_unified, save_unified

    root = args.data_root
    sources = [
        ("stsb", "stsb", "sts", "sts/stsbenchmark/sts-train.csv"),
        ("sick", "sick", "sts", "sts/sick2014/SICK_train.txt"),
        ("wikiqa", "wikiqa", "retrieval", "ir/wikiqa/train.tsv"),
        ("trecqa", "trecqa", "retrieval", "ir/trecqa/train.csv"),
    ]
    data = build_unified(
        {
            "sources": [
                {"name": name, "format": fmt, "task_type": task_type, "data_files": str(root / path)}
                for name, fmt, task_type, path in sources
            ]
        }
    )
    data_dir = args.output_dir / "data"
    save_unified(data, data_dir, overwrite=True)
    ir_run = train_run(
        "ir-leaning", ["wikiqa", "trecqa"], {"retrieval": "MultiPositiveInfoNCELoss"}, data_dir, base, args
    )
    sts_run = train_run("sts-leaning", ["stsb", "sick"], {"sts": "CoDiEmbSTSLoss"}, data_dir, base, args)
    return ir_run, sts_run


def main(argv: Sequence[str] | None = None) -> None:
    parser = example_parser(__file__, __doc__)
    parser.add_argument(
        "--models",
        nargs=2,
        type=Path,
        metavar=("IR_MODEL", "STS_MODEL"),
        help="two checkpoints of one architecture (for hierarchical: IR-leaning first)",
    )
    parser.add_argument("--method", choices=["soup", "hierarchical", "ties", "slerp"], default="hierarchical")
    parser.add_argument("--search", action="store_true", help="choose SLERP's t on the development sets")
    parser.add_argument(
        "--suite", type=Path, help="an evaluation suite YAML; default: STS-B dev, SICK trial, TrecQA dev"
    )
    parser.add_argument("--repo-id", help=f"Hub repository; without it a dry run for {PLACEHOLDER_REPO_ID}")
    parser.add_argument("--private", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="only list what would be uploaded")
    # full_steps: the steps of each run trained when --models is not given; a real upload needs the Hub.
    args = parse_example_args(
        parser, argv, full_steps=100, needs_hub=lambda parsed: bool(parsed.repo_id) and not parsed.dry_run
    )

    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.evaluation import run_suite
    from hf_unified_embed.hub.publishing import push_folder
    from hf_unified_embed.merge import merge_models
    from hf_unified_embed.merge.search import search_merge
    from hf_unified_embed.recipe import DEFAULT_BASE_MODEL_ID, packaged_minilm_path

    base = args.base_model
    ir_model, sts_model = args.models if args.models else train_inputs(base, args)
    method = "slerp" if args.search else args.method
    params: dict[str, Any] = {
        "hierarchical": {
            "ir_models": [ir_model],
            "sts_models": [sts_model],
            "base": base,
            "ir_specialist": ir_model,
            "sts_specialist": sts_model,
        },
        "ties": {"base": base, "density": 0.5},
        "slerp": {"t": 0.5},
    }.get(method, {})
    # The packaged base has no Hub id of its own on disk; the runs name it in their recipe copies.
    model_ids = {base: DEFAULT_BASE_MODEL_ID} if base == packaged_minilm_path() else None
    repo_id = args.repo_id or PLACEHOLDER_REPO_ID
    merged_dir = args.output_dir / f"merged-{method}"
    suite = evaluation_suite(args, args.suite or dev_suite(args.data_root))

    def merge(evaluation_results: Sequence[Mapping[str, Any]] = ()) -> Path:
        return merge_models(
            [ir_model, sts_model],
            method,
            merged_dir,
            model_name=repo_id,
            model_ids=model_ids,
            evaluation_results=evaluation_results,
            overwrite=True,
            **params,
        )

    if args.search:
        search = search_merge(
            [ir_model, sts_model],
            "slerp",
            merged_dir,
            suite=suite,
            search={"t": {"min": 0.0, "max": 1.0, "steps": 5}},
            objective={"stsb-dev": 0.5, "sick-trial": 0.5, "trecqa-dev": 1.0},
            model_name=repo_id,
            model_ids=model_ids,
            overwrite=True,
        )
        print(f"merge search chose t = {search.best.parameters['t']} (score {search.best.score:.4f})")
    else:
        merge()
    results = {
        name: run_suite(SentenceTransformer(str(path), device=args.device), suite)
        for name, path in [
            ("base", base),
            ("ir", ir_model),
            ("sts", sts_model),
            (f"merged ({method})", merged_dir),
        ]
    }
    entries = [(entry.name, entry.primary_metric) for entry in results["base"].entries]
    print("\n" + "model".ljust(22) + "".join(f"{name} {metric}".ljust(26) for name, metric in entries))
    for name, result in results.items():
        print(name.ljust(22) + "".join(f"{result[entry].primary_value:.4f}".ljust(26) for entry, _ in entries))

    if not args.search:  # a search's card already carries its dev results as model-index
        # The same merge again, now with the card carrying the evaluation as model-index.
        merge([vars(result) for result in results[f"merged ({method})"].eval_results()])
    dry_run = args.dry_run or args.repo_id is None
    outcome = push_folder(merged_dir, repo_id, private=args.private, dry_run=dry_run)
    if dry_run:
        print("\n" + outcome.describe())
    else:
        print(f"\npushed {merged_dir} to https://huggingface.co/{repo_id}: {outcome}")


if __name__ == "__main__":
    run_example(main)
