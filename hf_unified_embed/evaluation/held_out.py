"""The rows a build recipe's source leaves out: evaluation on held-out rows of the training file.

A build recipe source with ``max_rows: N`` trains on the first N rows its files give. A suite entry with
``held_out_from: RECIPE`` reads the same source — its format, files, options and task type, exactly as
``build`` reads them — and scores the rows after those N::

    # build recipe faq.yaml                # suite
    sources:                               evaluations:
      - name: faq                            - name: faq
        format: pairs                          kind: retrieval
        data_files: faq.tsv                    held_out_from: faq.yaml   # its source 'faq'
        task_type: retrieval
        max_rows: 400                      # rows 401, 402, … of faq.tsv are scored
        options: {anchor_column: question, positive_column: answer}

The entry's ``task`` names the source when it is not the entry's own name (or the recipe's only source).
Rows are counted as the build counts them (after skipped rows, one row per query where a format groups
lines), so the held-out rows are exactly the rows the build left out.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from datasets import Dataset

from hf_unified_embed.errors import InputNotFoundError, SuiteError, shown

if TYPE_CHECKING:
    from hf_unified_embed.data.build_recipe import BuildRecipe, SourceSpec


class SuiteEntry(Protocol):
    """What this module reads of a suite entry (:class:`~hf_unified_embed.evaluation.suite.SuiteEntry`); the suite
    module reads this one in turn, so the entry is described here rather than imported."""

    name: str
    held_out_from: str | None
    task: str | None

    @property
    def evaluation_kind(self) -> Any: ...


class EvaluationSuite(Protocol):
    """What this module reads of a suite (:class:`~hf_unified_embed.evaluation.suite.EvaluationSuite`)."""

    data_root: Path | None

    def rows_of(self, entry: Any) -> int | None: ...


def held_out_source(entry: SuiteEntry, data_root: Path | None) -> tuple[BuildRecipe, SourceSpec]:
    """The build recipe ``entry.held_out_from`` names (relative to ``data_root``) and the source it evaluates.

    Raises:
        InputNotFoundError: the recipe file does not exist.
        SuiteError: the recipe has no source of that name.
        RecipeError: the recipe itself is not valid.
    """
    from hf_unified_embed.data.build_recipe import BuildRecipe

    where = f"entry {shown(entry.name)}, field 'held_out_from'"
    assert entry.held_out_from is not None
    path = Path(entry.held_out_from).expanduser()
    if data_root is not None and not path.is_absolute():
        path = Path(os.path.normpath(data_root / path))  # named in errors as the user would write it
    if not path.is_file():
        raise InputNotFoundError(f"{where}: {path}: file does not exist (a build recipe)")
    recipe = BuildRecipe.from_yaml(path)
    name = entry.task or entry.name
    specs = [spec for spec in recipe.sources if spec.name == name]
    if not specs and entry.task is None and len(recipe.sources) == 1:
        specs = list(recipe.sources)
    if not specs:
        names = [spec.name for spec in recipe.sources]
        raise SuiteError(f"{where}: {path} has no source {shown(name)}; its sources are {names} (set 'task')")
    # A source listed once per split: the training split is the one whose rows were capped.
    training = [spec for spec in specs if spec.split == "train"]
    return recipe, (training or specs)[0]


def held_out_rows(entry: SuiteEntry, suite: EvaluationSuite) -> Dataset:
    """The unified rows of ``entry``'s recipe source past its ``max_rows`` (at most the suite's row cap).

    Raises:
        SuiteError: the source reads every row (no ``max_rows``) or its files hold no more rows than that,
            or its task type is not the one the entry's kind scores.
    """
    from hf_unified_embed.data import BuildRecipe, build_unified_with_report

    recipe, spec = held_out_source(entry, suite.data_root)
    where = f"entry {shown(entry.name)}, field 'held_out_from'"
    task_type = entry.evaluation_kind.task_type
    if spec.max_rows is None:
        raise SuiteError(
            f"{where}: source {shown(spec.name)} of {recipe.origin} trains on every row of its files (no max_rows), "
            "so none is held out; set its max_rows to the number of rows to train on"
        )
    if spec.task_type not in (None, task_type):
        raise SuiteError(
            f"{where}: source {shown(spec.name)} of {recipe.origin} is task_type {shown(spec.task_type)}, "
            f"kind {shown(entry.evaluation_kind.name)} scores {shown(task_type)} rows"
        )
    # The build's own reading of the source, uncapped; the cap's rows are the first ones.
    whole = dataclasses.replace(spec, name=entry.name, task_type=task_type, max_rows=None)
    built = build_unified_with_report(BuildRecipe([whole], base_dir=recipe.base_dir, origin=recipe.origin)).dataset
    if len(built) != 1:
        raise SuiteError(f"{where}: source {shown(spec.name)} of {recipe.origin} gives several tasks {list(built)}")
    rows = next(iter(built.values()))
    if len(rows) <= spec.max_rows:
        raise SuiteError(
            f"{where}: source {shown(spec.name)} of {recipe.origin} gives {len(rows)} rows, all within its "
            f"max_rows {spec.max_rows}: none is held out; lower max_rows"
        )
    held_out = range(spec.max_rows, len(rows))
    limit = suite.rows_of(entry)
    return rows.select(held_out[:limit] if limit else held_out)
