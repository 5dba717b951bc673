"""The rows of an evaluation suite's entries: read through the data adapters or from unified folders, checked.

:func:`load_entry_rows` reads every entry's rows once — raw files through one build of the adapters, a
``unified:`` entry through :func:`~hf_unified_embed.data.load_unified` (``validate``'s row check first), a
``held_out_from:`` entry through its build recipe (:mod:`~hf_unified_embed.evaluation.held_out`) — and
leaves out the pairs an entry's ``exclude_seen`` sources hold. A command reads them before it loads its model,
so that a bad row is reported first.
"""

from __future__ import annotations

import logging
from pathlib import Path

from datasets import Dataset

from hf_unified_embed.errors import HfUnifiedEmbedError, InputNotFoundError, SuiteError, shown
from hf_unified_embed.evaluation.held_out import held_out_rows
from hf_unified_embed.evaluation.inputs import drop_seen_pairs, entry_files, row_pairs
from hf_unified_embed.evaluation.suite import EvaluationSuite, SuiteEntry

logger = logging.getLogger(__name__)


def load_entry_rows(suite: EvaluationSuite) -> dict[str, Dataset]:
    """The validated unified rows of every entry, read through the data adapters (one build)."""
    from hf_unified_embed.data import BuildRecipe, SourceSpec, build_unified_with_report

    rows: dict[str, Dataset] = {}
    specs = []
    for entry in suite.entries:
        if entry.source is not None:
            # Checked per entry first so that a missing file names its entry, not only the path.
            entry_files(entry.data_files or [], suite.data_root, evaluation=entry.name, field="data_files")
            specs.append(
                SourceSpec(
                    name=entry.name,
                    format=entry.source,
                    data_files=entry.data_files,  # type: ignore[arg-type]
                    task_type=entry.evaluation_kind.task_type,
                    split=entry.split,
                    options=entry.source_options,
                    max_rows=suite.rows_of(entry),
                )
            )
    if specs:
        report = build_unified_with_report(BuildRecipe(specs, base_dir=suite.data_root, origin=suite.origin))
        for name, dataset in report.dataset.items():
            if report.skipped.get(name):
                logger.info("%s: skipped %s", name, dict(report.skipped[name]))
            rows[name] = dataset
    for entry in suite.entries:
        if entry.unified is not None:
            dataset = _unified_rows(entry, suite.data_root)
            limit = suite.rows_of(entry)
            rows[entry.name] = dataset.select(range(min(limit, len(dataset)))) if limit else dataset
        elif entry.held_out_from is not None:
            rows[entry.name] = held_out_rows(entry, suite)
    seen_by_sources: dict[str, set[frozenset[str]]] = {}  # entries often share one list: read it once
    for entry in suite.entries:
        if entry.exclude_seen:
            sources = repr((entry.exclude_seen, entry.evaluation_kind.task_type))
            if sources not in seen_by_sources:
                seen_by_sources[sources] = _seen_pairs(entry, suite)
            rows[entry.name], dropped = drop_seen_pairs(rows[entry.name], seen_by_sources[sources], entry.name)
            logger.info("%s: left out %d pairs found in its exclude_seen sources", entry.name, dropped)
    return rows


def _seen_pairs(entry: SuiteEntry, suite: EvaluationSuite) -> set[frozenset[str]]:
    """The (query, text) pairs of every ``exclude_seen`` source of ``entry``, read by the data adapters."""
    from hf_unified_embed.data import BuildRecipe, SourceSpec, build_unified

    specs = []
    for index, seen in enumerate(entry.exclude_seen):
        field_name = f"exclude_seen[{index}].data_files"
        entry_files(seen["data_files"], suite.data_root, evaluation=entry.name, field=field_name)
        specs.append(
            SourceSpec(
                name=f"seen-{index}",
                format=seen["source"],
                data_files=seen["data_files"],
                # Read as the entry's own rows are unless told otherwise (a pair is a pair under either
                # type); null keeps the type each row carries (unified files).
                task_type=seen.get("task_type", entry.evaluation_kind.task_type),
                options=seen.get("options", {}),
            )
        )
    built = build_unified(BuildRecipe(specs, base_dir=suite.data_root, origin=f"{suite.origin}: {entry.name}"))
    return set().union(*(row_pairs(dataset) for dataset in built.values()))


def _unified_rows(entry: SuiteEntry, data_root: Path | None) -> Dataset:
    """The rows of a ``unified`` entry: a folder (relative to ``data_root`` when it is there) or a Hub repo."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    from hf_unified_embed.data import load_unified
    from hf_unified_embed.data.hub_layout import read_card, unified_tasks

    where = f"entry {shown(entry.name)}, field 'unified'"
    assert entry.unified is not None
    location = Path(entry.unified).expanduser()
    if data_root is not None and not location.is_absolute() and (data_root / location).exists():
        location = data_root / location
    source: str | Path = location
    missing = f"no folder {entry.unified}" + (
        f" (relative paths resolve in {data_root} or the working folder)" if data_root is not None else ""
    )
    if not location.exists():
        try:
            validate_repo_id(entry.unified)
        except HFValidationError:
            raise InputNotFoundError(f"{where}: {missing}") from None
        source = entry.unified
    try:
        declared = unified_tasks(read_card(source))
    except (OSError, HfUnifiedEmbedError) as error:
        # A folder without a dataset card, or a Hub repo that is absent or not cached (offline).
        problem = f"{missing}, and no Hub dataset of that name could be read" if source == entry.unified else ""
        raise InputNotFoundError(f"{where}: {problem or 'cannot read the unified dataset'}: {error}") from None
    task = entry.task or entry.name
    if task not in declared:
        raise SuiteError(
            f"entry {shown(entry.name)}, field 'task': {entry.unified} has no task {shown(task)}; it has {sorted(declared)}"
        )
    if entry.split not in declared[task]:
        raise SuiteError(
            f"entry {shown(entry.name)}, field 'split': task {shown(task)} of {entry.unified} has no split {shown(entry.split)}; "
            f"it has {declared[task]}"
        )
    return load_unified(source, [task], split=entry.split)[task]
