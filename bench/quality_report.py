"""The quality report's tables: a model's columns from its suite results, mean ± spread over seeds,
the Markdown table, ``quality.json`` and the Markdown blocks it rewrites."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from quality_recipe import is_recipe_row
from quality_rows import KEEP_ROWS, MAIN_ROWS, MANY_ROWS

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

#: The choice rule's floor on "kept": the base's neighbour overlap that the previous default (one epoch)
#: kept. A row below it gave away general retrieval that the six-column mean does not show.
KEPT_FLOOR = 0.80

#: The settings' tables and their rows (the recipe table: the base and every recipe row measured, see ``report``).
SETTINGS = {"main": MAIN_ROWS + KEEP_ROWS, "many": MANY_ROWS}


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


def rule_violations(
    row: Mapping[str, tuple[float, float | None]], base: Mapping[str, tuple[float, float | None]] | None
) -> list[str]:
    """Why ``row`` fails the choice rule (empty when it passes): ``kept`` below :data:`KEPT_FLOOR`, or a
    quality column below the base's by more than one seed spread (the larger of the two rows' spreads; with
    one seed, any drop counts)."""
    problems = []
    if FORGETTING_COLUMN in row and row[FORGETTING_COLUMN][0] < KEPT_FLOOR:
        problems.append(f"kept {row[FORGETTING_COLUMN][0]:.4f} < {KEPT_FLOOR:.2f}")
    for column, (mean, spread) in row.items():
        if base is None or column in (FORGETTING_COLUMN, UNSEEN_COLUMN) or column not in base:
            continue
        base_mean, base_spread = base[column]
        allowed = max(spread or 0.0, base_spread or 0.0)
        if mean < base_mean - allowed:
            problems.append(f"{column} {mean:.4f} < base {base_mean:.4f} - {allowed:.4f}")
    return problems


def chosen_row(table: Mapping[str, Mapping[str, tuple[float, float | None]]]) -> str | None:
    """The row the choice rule picks: the best six-column mean among the trained rows (not ``base``) that
    keep ``kept`` at or above :data:`KEPT_FLOOR` (when the table measures it) and have no quality column below
    the base's by more than one seed spread; ``None`` when no row passes."""
    measures_kept = any(FORGETTING_COLUMN in row for row in table.values())
    base = table.get("base")
    eligible = {
        model: six_column_mean(row)
        for model, row in table.items()
        if model != "base"
        and row
        and (FORGETTING_COLUMN in row or not measures_kept)
        and not rule_violations(row, base)
    }
    return max(eligible, key=eligible.__getitem__) if eligible else None


def line_gaps(per_seed: Mapping[str, Mapping[str, float]]) -> dict[str, tuple[float, float | None, int]]:
    """Each trained recipe row's six-column mean minus the kept–mean line through the base and the same
    seed's shipped recipe (``recipe@<seed>``) at the row's ``kept``, as (mean, sample standard deviation or
    ``None``, seeds) over the row's seeds: positive where a row learnt more for what it forgot than moving
    along that line (what interpolating the recipe's run with the base roughly traces) gives.

    Paired by seed so that a row measured on fewer seeds than the recipe is placed against the line of its
    own seeds, and the spread says whether a row sits on one side on every seed. ``per_seed`` maps results
    keys (``base``, ``recipe+llrd@43``) to their :func:`summarize` rows; a seed without a ``recipe`` run, or
    whose recipe kept what the base keeps, places nothing.
    """
    base = per_seed.get("base")
    if not base or FORGETTING_COLUMN not in base:
        return {}
    base_kept, base_mean = base[FORGETTING_COLUMN], _mean_of(base)
    gaps: dict[str, list[float]] = defaultdict(list)
    for key, row in per_seed.items():
        model, _, seed = key.partition("@")
        recipe = per_seed.get(f"recipe@{seed}")
        if not seed or model == "recipe" or not is_recipe_row(model) or not recipe or FORGETTING_COLUMN not in row:
            continue
        if FORGETTING_COLUMN not in recipe or recipe[FORGETTING_COLUMN] == base_kept:
            continue
        slope = (_mean_of(recipe) - base_mean) / (recipe[FORGETTING_COLUMN] - base_kept)
        gaps[model].append(_mean_of(row) - (base_mean + slope * (row[FORGETTING_COLUMN] - base_kept)))
    return {
        model: (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None, len(values))
        for model, values in gaps.items()
    }


def _mean_of(row: Mapping[str, float]) -> float:
    """The six-column mean of one seed's :func:`summarize` row."""
    return six_column_mean({column: (value, None) for column, value in row.items()})


def six_column_mean(row: Mapping[str, tuple[float, float | None]]) -> float:
    """A row's mean over its quality columns (``kept`` and the unseen STS column are not quality columns)."""
    quality = [column for column in row if column not in (FORGETTING_COLUMN, UNSEEN_COLUMN)]
    return statistics.fmean(row[column][0] for column in quality) if quality else float("nan")


def markdown_table(
    table: Mapping[str, Mapping[str, tuple[float, float | None]]],
    step_ratio: Mapping[str, float | None],
    costs: Mapping[str, Mapping[str, str]] | None = None,
    gaps: Mapping[str, tuple[float, float | None, int]] | None = None,
) -> str:
    """The rows (mean, ± standard deviation over seeds when several) with the best mean of each metric in
    bold, each row's mean over the six quality columns, then its step time relative to ST's — or, given
    ``costs`` (``{column: {row: text}}``, :func:`cost_columns`), those columns instead — and below the table
    the row the choice rule picks (:func:`chosen_row`) and, given ``gaps`` (:func:`line_gaps`), each row's
    place against the kept–mean line."""
    columns = list(dict.fromkeys(column for row in table.values() for column in row))
    header = [*columns, "mean (6)"]
    tail = list(costs) if costs is not None else [STEP_COLUMN]
    lines = ["| model | " + " | ".join([*header, *tail]) + " |", "|---|" + "---:|" * (len(header) + len(tail))]
    means = {model: six_column_mean(row) if row else float("nan") for model, row in table.items()}
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
        if costs is not None:
            cells.extend(costs[column].get(model, "—") for column in costs)
        else:
            ratio = step_ratio.get(model)
            cells.append("—" if ratio is None else f"{ratio:.2f}")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    chosen = chosen_row(table)
    lines += [
        "",
        f"Chosen by the rule (best six-column mean with kept ≥ {KEPT_FLOOR:.2f} and no column below the base by "
        f"more than one seed spread): " + (f"**{chosen}**" if chosen else "no row passes"),
    ]
    if gaps:
        lines += [
            "",
            "Mean (6) above the kept–mean line through `base` and the same seed's `recipe`, at each row's kept "
            "(mean ± s.d. over the row's seeds): "
            + ", ".join(
                f"{model} {mean:+.4f}" + (f" ± {spread:.4f}" if spread is not None else "") + f" ({count} seed"
                f"{'s' if count > 1 else ''})"
                for model, (mean, spread, count) in gaps.items()
            ),
        ]
    return "\n".join(lines)


#: The cost columns of the recipe table: absolute, since its rows have no ``st-baseline`` of their own. "seeds"
#: says how many runs a row's means are over, since rows measured on fewer seeds share the table.
COST_COLUMNS = ("seeds", "steps", "s / step", "train min", "peak memory (MiB)")


def cost_columns(results: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Per trained row: its seeds, and mean over them optimizer steps, seconds per step (after the first), the
    trainer's whole ``train()`` in minutes, and the run's peak memory (:class:`PeakMemory`)."""
    runs: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for key, result in results.items():
        if result.get("training"):
            runs[row_of(key)].append(result["training"])
    columns: dict[str, dict[str, str]] = {column: {} for column in COST_COLUMNS}
    for row, trainings in runs.items():
        timed = [t["seconds"] / t["timed_steps"] for t in trainings if t.get("timed_steps")]
        peaks = [t["peak_memory_mib"] for t in trainings if t.get("peak_memory_mib")]
        columns["seeds"][row] = str(len(trainings))
        columns["steps"][row] = f"{statistics.fmean(t['steps'] for t in trainings):.0f}"
        columns["s / step"][row] = f"{statistics.fmean(timed):.2f}" if timed else "—"
        columns["train min"][row] = f"{statistics.fmean(t['train_runtime'] for t in trainings) / 60:.1f}"
        columns["peak memory (MiB)"][row] = f"{max(peaks):,.0f}" if peaks else "—"
    return columns


def machine_note(device: str, results: Mapping[str, Any]) -> str:
    """The machine, its load, and the torch threads the trained rows ran with.

    The threads are those each run recorded (a ``--report-only`` process may run with others); this
    process's own count stands in only where no run recorded one.
    """
    import sentence_transformers
    import torch
    import transformers

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    accelerator = f", {torch.cuda.get_device_name()}" if device.startswith("cuda") else ""
    recorded = sorted({t["threads"] for r in results.values() if (t := r.get("training")) and t.get("threads")})
    counts = recorded or [torch.get_num_threads()]
    threads = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    plural = "s" if counts != [1] else ""
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores (load average {load:.1f} at the end)"
        f"{accelerator}, device {device}, torch {torch.__version__} ({threads} thread{plural}), "
        f"transformers {transformers.__version__}, sentence-transformers {sentence_transformers.__version__}, "
        f"Python {platform.python_version()}"
    )


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


def report(results: Mapping[str, Any], options: argparse.Namespace, argv: list[str] | None) -> None:
    """Print the tables and write ``quality.json`` (and the Markdown blocks) for the rows so far."""
    ratios = step_ratios(results)
    per_seed = {key: summarize(result) for key, result in results.items()}
    per_row: dict[str, list[dict[str, float]]] = defaultdict(list)
    for key, row in per_seed.items():
        per_row[row_of(key)].append(row)
    gaps = line_gaps(per_seed)
    # The recipe table: its rows in the order they were measured, beside the base (none without a recipe row).
    recipe_rows = tuple(row for row in per_row if is_recipe_row(row))
    settings = {**SETTINGS, "recipe": ("base", *recipe_rows) if recipe_rows else ()}
    tables = {
        setting: {row: aggregate(per_row[row]) for row in rows if row in per_row} for setting, rows in settings.items()
    }
    command = ".venv/bin/python " + " ".join(["bench/quality.py", *(argv if argv is not None else sys.argv[1:])])
    summary: dict[str, Any] = {
        "command": command,
        "settings": {key: str(value) for key, value in vars(options).items()},
        "machine": machine_note(options.device, results),
        # Each row's own wall time (training, merge search, evaluation) summed, so that a --resume-d or
        # --report-only run states what the whole table cost, not how long this invocation took.
        "seconds": sum(float(result.get("seconds") or 0.0) for result in results.values()),
        "rows_missing": [row for row in options.rows if row not in per_row],
        "training": {key: result.get("training") for key, result in results.items()},
        "step_time_vs_st_baseline": ratios,
        "per_seed": per_seed,
        "tables": {
            setting: {row: {column: list(value) for column, value in table[row].items()} for row in table}
            for setting, table in tables.items()
        },
        "chosen": {setting: chosen_row(table) for setting, table in tables.items()},
        "above_line": {model: list(gap) for model, gap in gaps.items()},
    }
    text = json.dumps(summary, indent=2, ensure_ascii=False) + "\n"
    (options.output_dir / "quality.json").write_text(text, encoding="utf-8")
    for setting, table in tables.items():
        if set(table) <= {"base"}:  # no row of this setting measured: the base alone is no table of it
            continue
        recipe = setting == "recipe"
        markdown = markdown_table(table, ratios, cost_columns(results) if recipe else None, gaps if recipe else None)
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
