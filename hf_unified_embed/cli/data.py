"""``hf-unified-embed build`` and ``validate``: raw sources → unified Hub-layout folder, and checks."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_unified_embed.cli.arg_types import path, process_count, shard_size
from hf_unified_embed.errors import shown

if TYPE_CHECKING:
    from hf_unified_embed.data.layout_check import FolderLayout


def register(subparsers: Any) -> None:
    build = subparsers.add_parser(
        "build",
        help="build a unified dataset folder from a recipe",
        description="Build every source of RECIPE (YAML) into the unified schema and write the Hub layout to OUT.",
    )
    build.add_argument(
        "recipe", type=path, help="recipe YAML (sources: name, format, data_files, task_type, instructions, ...)"
    )
    build.add_argument(  # a str: an empty value (an unset shell variable) is refused by name, not read as "."
        "-o", "--output", required=True, help="output folder (data/<task>/<split>-*.parquet + README.md)"
    )
    build.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    build.add_argument(
        "--num-proc",
        type=process_count,
        default=None,
        metavar="N",
        help="processes reading sources and writing shards in parallel (default: one per ~128 MB of input, "
        "at most the CPUs this process may use; more than those CPUs is capped to them); the output does not "
        "depend on it",
    )
    build.add_argument(
        "--max-shard-size",
        type=shard_size,
        default=None,
        metavar="SIZE",
        help="largest Parquet shard per task and split, as datasets writes sizes (e.g. 50MB, 1GB; at least 1MB; "
        "default 500MB)",
    )
    build.set_defaults(func=run_build)

    validate = subparsers.add_parser(
        "validate",
        help="check a unified dataset folder against the schema",
        description=(
            "Check a unified folder: its card, its layout (no stray files), every Parquet file's columns "
            "and types, and every row against the schema."
        ),
    )
    validate.add_argument("folder", type=path, help="a folder written by `build` / save_unified")
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
    from hf_unified_embed.data import build_unified_with_report, load_build_recipe
    from hf_unified_embed.data.build_plan import available_cpus, processes_worth
    from hf_unified_embed.data.hub_layout import DEFAULT_MAX_SHARD_BYTES, write_unified
    from hf_unified_embed.data.source_formats import get_source_format
    from hf_unified_embed.errors import HfUnifiedEmbedError
    from hf_unified_embed.utils.outputs import StagedOutput
    from hf_unified_embed.utils.readers import local_files, resolve_inputs

    recipe = load_build_recipe(args.recipe)
    inputs: list[str | Path] = [args.recipe]
    resolved = []
    for index, spec in enumerate(recipe.sources):
        try:
            files = resolve_inputs(
                spec.data_files, recipe.base_dir, dataset_ids=get_source_format(spec.format).dataset_ids
            )
        except HfUnifiedEmbedError as error:  # a missing file: say which recipe and source name it
            raise error.within(f"{recipe.origin}: sources[{index}] ({spec.name})") from None
        inputs += local_files(files)
        resolved.append((spec, files))
    splits, sources, skipped, notes, summaries = {}, {}, {}, {}, {}
    # They read the sources, then write the shards; a small input is not worth starting processes for.
    processes = processes_worth(resolved) if args.num_proc is None else min(args.num_proc, available_cpus())
    if args.num_proc is not None and processes < args.num_proc:
        # More readers than CPUs only share them: --num-proc 1000 started 1,001 processes and took the memory.
        print(
            f"warning: --num-proc {args.num_proc}: this process may use {processes} CPU(s); starting {processes}",
            file=sys.stderr,
        )
    # The staging folder exists before the first row is read: an unwritable output fails at once, and
    # datasets' Arrow cache and every temporary file live inside it, so nothing outlives a killed build.
    with StagedOutput(args.output, overwrite=args.overwrite, inputs=inputs) as stage:
        for split in recipe.splits:
            result = build_unified_with_report(
                recipe, split=split, cache_dir=stage.scratch / "cache", num_proc=processes
            )
            splits[split] = result.dataset
            sources.update(result.sources)
            skipped.update(result.skipped)
            notes.update(result.notes)
            # Gathered by the processes that read the rows: nothing reads them again to print this.
            summaries.update({(split, task): summary for task, summary in result.summaries.items()})
        # Every row was validated while it was built.
        write_unified(
            splits,
            stage.path,
            sources=sources,
            skipped=skipped,
            notes=notes,
            validate=False,
            max_shard_bytes=args.max_shard_size or DEFAULT_MAX_SHARD_BYTES,
            num_proc=processes,  # each process writes its own shards
            summaries=summaries,
        )
        rows = [
            {"task": task, "split": split, **summaries[split, task], "skipped": skipped.get(task, {})}
            for split, tasks in splits.items()
            for task in tasks
        ]
    print(summary_table(rows))
    print(f"\nwrote {sum(r['rows'] for r in rows)} rows in {len(rows)} task(s) to {stage.target}")
    return 0


def run_validate(args: argparse.Namespace) -> int:
    from hf_unified_embed.data.row_check import validate_unified_folder

    # Layout, Parquet files and every row are checked with pyarrow in one pass that also gathers the
    # summary: datasets never loads (or copies into its cache) anything.
    layout = validate_unified_folder(args.folder)
    rows = []
    for split in dict.fromkeys(split for splits in layout.declared.values() for split in splits):
        for task, splits in layout.declared.items():
            if split in splits:
                rows.append({"task": task, "split": split, **layout.summaries[task, split]})
    print(summary_table(rows))
    for warning in _instruction_warnings(layout):
        print(f"warning: {warning}", file=sys.stderr)
    print(f"\n{args.folder}: {len(rows)} task(s) valid")
    return 0


def _instruction_warnings(layout: FolderLayout) -> Iterator[str]:
    """Warnings for long instructions (validate has no tokenizer: ``train`` and ``mine-negatives`` check every
    instruction in tokens). The row check has made each task's instructions uniform, so its summary's are all."""
    from hf_unified_embed.schema import INSTRUCTION_COLUMNS
    from hf_unified_embed.training.instruction_fit import long_instruction_warning

    for (task, split), summary in layout.summaries.items():
        for column in INSTRUCTION_COLUMNS:
            warning = long_instruction_warning(
                summary[column] or "", f"task {shown(task)} ({split}), field {shown(column)}"
            )
            if warning:
                yield warning
