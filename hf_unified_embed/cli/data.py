"""``hf-unified-embed build`` and ``validate``: raw sources → unified Hub-layout folder, and checks."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hf_unified_embed.errors import UsageError


def register(subparsers: Any) -> None:
    build = subparsers.add_parser(
        "build",
        help="build a unified dataset folder from a recipe",
        description="Build every source of RECIPE (YAML) into the unified schema and write the Hub layout to OUT.",
    )
    build.add_argument(
        "recipe", type=Path, help="recipe YAML (sources: name, format, data_files, task_type, instructions, ...)"
    )
    build.add_argument(
        "-o", "--output", type=Path, required=True, help="output folder (data/<task>/<split>-*.parquet + README.md)"
    )
    build.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    build.set_defaults(func=run_build)

    validate = subparsers.add_parser(
        "validate",
        help="check a unified dataset folder against the schema",
        description="Load every task of a unified folder and validate it.",
    )
    validate.add_argument("folder", type=Path, help="a folder written by `build` / save_unified")
    validate.set_defaults(func=run_validate)


def summary_table(rows: list[dict[str, Any]]) -> str:
    """A fixed-width table of the per-task summaries."""
    headers = ["task", "split", "type", "rows", "pos/row", "neg/row", "scores", "skipped"]
    body = []
    for row in rows:
        scores = "-" if row["score_min"] is None else f"{row['score_min']:.2f}-{row['score_max']:.2f}"
        skipped = sum(row.get("skipped", {}).values())
        body.append(
            [
                row["task"],
                row["split"],
                row["task_type"],
                str(row["rows"]),
                f"{row['positives_per_row']:.2f}",
                f"{row['negatives_per_row']:.2f}",
                scores,
                str(skipped),
            ]
        )
    widths = [max(len(line[i]) for line in [headers, *body]) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [headers, *body]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def run_build(args: argparse.Namespace) -> int:
    from hf_unified_embed.data import build_unified_with_report, load_build_recipe, save_unified, task_summary
    from hf_unified_embed.data.readers import resolve_files

    recipe = load_build_recipe(args.recipe)
    output = args.output.resolve()
    if output.is_dir() and any(output.iterdir()) and not args.overwrite:
        raise UsageError(f"{output} is not empty; pass --overwrite to replace it")
    for spec in recipe.sources:
        for path in resolve_files(spec.data_files, recipe.base_dir):
            if path.resolve().is_relative_to(output):
                raise UsageError(f"input {path} lies inside the output folder {output}; choose another output")
    splits, sources, skipped = {}, {}, {}
    for split in recipe.splits:
        result = build_unified_with_report(recipe, split=split)
        splits[split] = result.dataset
        sources.update(result.sources)
        skipped.update(result.skipped)
    save_unified(splits, output, overwrite=args.overwrite, sources=sources, skipped=skipped)
    rows = [
        {"task": task, "split": split, **task_summary(dataset), "skipped": skipped.get(task, {})}
        for split, tasks in splits.items()
        for task, dataset in tasks.items()
    ]
    print(summary_table(rows))
    print(f"\nwrote {sum(r['rows'] for r in rows)} rows in {len(rows)} task(s) to {output}")
    return 0


def run_validate(args: argparse.Namespace) -> int:
    from hf_unified_embed.data import load_unified, task_summary
    from hf_unified_embed.data.hub_layout import read_card, unified_tasks
    from hf_unified_embed.schema import validate_unified

    declared = unified_tasks(read_card(args.folder))
    if not declared:
        raise UsageError(f"{args.folder}/README.md declares no task configs")
    rows = []
    for split in dict.fromkeys(split for splits in declared.values() for split in splits):
        for task, dataset in load_unified(args.folder, split=split).items():
            validate_unified(dataset, source=f"{args.folder}/data/{task}")
            rows.append({"task": task, "split": split, **task_summary(dataset)})
    print(summary_table(rows))
    print(f"\n{args.folder}: {len(rows)} task(s) valid")
    return 0
