"""Build recipes: which raw sources become which unified tasks, as validated data classes.

A recipe is YAML (or a dict) of the form::

    sources:
      - name: stsb                    # the task name (and datasets config name)
        format: stsb                  # a registered source format
        data_files: ../data/stsb-train.tsv   # path, glob or list; relative to the recipe file
        task_type: sts
        query_instruction: "Represent the sentence for semantic similarity: "
        document_instruction: null    # null: same as the query's for symmetric task types, else ""
        split: train                  # optional, default train
        max_rows: 1000                # optional cap after skipping
        options: {}                   # format-specific keyword options
        license: CC-BY-SA-4.0         # optional, shown in the dataset card
        source: "STS Benchmark (Cer et al., 2017)"   # optional, shown in the dataset card
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hf_unified_embed.data.source_formats import get_source_format, source_format_names
from hf_unified_embed.errors import NameRuleError, RecipeError, SourceFormatError, shown
from hf_unified_embed.schema import TASK_TYPES
from hf_unified_embed.utils.naming import check_distinct_names, split_name_problem, task_name_problem
from hf_unified_embed.utils.typecheck import function_parameters, mismatched_field, type_problem
from hf_unified_embed.utils.yaml_files import read_yaml_mapping

#: Task types whose two sides are the same kind of text, so they share one instruction.
SYMMETRIC_TASK_TYPES = frozenset({"sts", "pair_classification", "classification", "clustering"})


@dataclass
class SourceSpec:
    """One raw source → one unified task (or several, for formats that carry a task per row)."""

    name: str
    format: str
    data_files: str | list[str]
    task_type: str | None = None
    query_instruction: str | None = None
    document_instruction: str | None = None
    split: str = "train"
    max_rows: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    license: str | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        def fail(field_name: str, message: str) -> RecipeError:
            return RecipeError(f"source {shown(self.name)}, field {shown(field_name)}: {message}")

        # The name becomes a folder and a config, the split part of file names: one naming rule for both.
        for field_name, problem in (
            ("name", task_name_problem(self.name)),
            ("split", split_name_problem(self.split)),
        ):
            if problem:
                raise NameRuleError(f"source {shown(self.name)}, field {shown(field_name)}: {problem}")
        # Every value must fit its field's annotation: a list where a text is expected fails here, not in an adapter.
        mismatch = mismatched_field(SourceSpec, {f.name: getattr(self, f.name) for f in fields(self)})
        if mismatch:
            raise fail(*mismatch)
        try:
            source_format = get_source_format(self.format)
        except SourceFormatError:
            raise fail(
                "format", f"unknown source format {shown(self.format)}; expected one of {source_format_names()}"
            ) from None
        unknown = sorted(set(self.options) - set(source_format.option_names))
        if unknown:
            takes = (
                f"its options are {list(source_format.option_names)}"
                if source_format.option_names
                else "it takes none"
            )
            raise fail("options", f"unknown option(s) {unknown} for format {shown(self.format)}; {takes}")
        parameters = function_parameters(source_format.read)
        for key, value in self.options.items():
            problem = type_problem(parameters[key][0], value)
            if problem:
                raise fail(
                    "options", f"option {shown(key)} of format {shown(self.format)}: {problem}, got {shown(value)}"
                )
        if self.task_type is not None and self.task_type not in TASK_TYPES:
            raise fail("task_type", f"got {shown(self.task_type)}; expected one of {list(TASK_TYPES)}")
        # A format that reads scores only from a column named by `score_column` gives an sts task no score
        # without it; said here, the message names the option instead of the first row's empty scores.
        if self.task_type == "sts" and "score_column" in parameters:
            default = inspect.signature(source_format.read).parameters["score_column"].default
            if {"score_column": default, **source_format.defaults, **self.options}["score_column"] is None:
                raise fail(
                    "options",
                    f"task_type 'sts' needs a score per pair, and format {shown(self.format)} reads none without "
                    "options.score_column: set it to the column of scores (and options.score_range to their "
                    "[low, high] unless they lie in [0, 1])",
                )
        # Rows are counted in a machine word (itertools.islice): a 26-digit cap passed and failed there.
        if self.max_rows is not None and not 1 <= self.max_rows <= sys.maxsize:
            raise fail("max_rows", f"got {shown(self.max_rows)}; expected a positive integer up to {sys.maxsize:,}")
        if not self.data_files:
            raise fail("data_files", "expected a path, glob or list of them")

    def instructions_for(self, task_type: str) -> tuple[str | None, str | None]:
        """The (query, document) instructions this recipe imposes; ``None`` leaves the row's own."""
        document = self.document_instruction
        if document is None and self.query_instruction is not None:
            document = self.query_instruction if task_type in SYMMETRIC_TASK_TYPES else ""
        return self.query_instruction, document


@dataclass
class BuildRecipe:
    """A list of sources plus the folder that relative ``data_files`` are resolved against."""

    sources: list[SourceSpec]
    base_dir: Path | None = None
    origin: str = "<recipe>"

    def __post_init__(self) -> None:
        if not self.sources:
            raise RecipeError(f"{self.origin}: the recipe has no sources")
        seen: set[tuple[str, str]] = set()
        for spec in self.sources:
            key = (spec.name, spec.split)
            if key in seen:
                raise RecipeError(
                    f"{self.origin}: source {shown(spec.name)} appears twice for split {shown(spec.split)}; list several data_files in one source instead"
                )
            seen.add(key)
        # Every task is a folder and every split part of a file name in the output: on Windows and
        # macOS names that differ only in case are the same file.
        check_distinct_names(dict.fromkeys(spec.name for spec in self.sources), "task", self.origin)
        check_distinct_names(self.splits, "split", self.origin)

    @property
    def splits(self) -> list[str]:
        return list(dict.fromkeys(spec.split for spec in self.sources))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], base_dir: Path | None = None, origin: str = "<recipe>") -> BuildRecipe:
        if not isinstance(data, Mapping) or not isinstance(data.get("sources"), list):
            raise RecipeError(f"{origin}: expected a mapping with a 'sources' list")
        known = {f.name for f in fields(SourceSpec)}
        specs = []
        for index, entry in enumerate(data["sources"]):
            if not isinstance(entry, Mapping):
                raise RecipeError(f"{origin}: sources[{index}] must be a mapping")
            unknown = sorted(set(entry) - known)
            missing = [name for name in ("name", "format", "data_files") if name not in entry]
            if unknown or missing:
                problem = f"unknown field(s) {unknown}" if unknown else f"missing field(s) {missing}"
                raise RecipeError(
                    f"{origin}: sources[{index}] ({entry.get('name', '?')}): {problem}; fields are {sorted(known)}"
                )
            try:
                specs.append(SourceSpec(**entry))
            except (RecipeError, NameRuleError) as error:
                raise type(error)(f"{origin}: sources[{index}]: {error}") from None
        unknown_top = sorted(set(data) - {"sources"})
        if unknown_top:
            raise RecipeError(f"{origin}: unknown top-level field(s) {unknown_top}")
        return cls(specs, base_dir=base_dir, origin=origin)

    @classmethod
    def from_yaml(cls, path: str | Path) -> BuildRecipe:
        path = Path(path)
        data = read_yaml_mapping(path, RecipeError)
        return cls.from_dict(data, base_dir=path.resolve().parent, origin=str(path))


def load_build_recipe(recipe: BuildRecipe | Mapping[str, Any] | str | Path) -> BuildRecipe:
    """Accept a :class:`BuildRecipe`, a dict or the path of a YAML file."""
    if isinstance(recipe, BuildRecipe):
        return recipe
    if isinstance(recipe, Mapping):
        return BuildRecipe.from_dict(recipe)
    return BuildRecipe.from_yaml(recipe)
