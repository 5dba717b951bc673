"""Evaluation suites: a YAML list of evaluation sets → sentence-transformers evaluators → results.

A suite is YAML (or a dict, or a bare list of entries)::

    name: shared-benchmarks          # optional, shown in results and cards
    data_root: data                  # relative data paths resolve here (default: the suite's folder)
    batch_size: 64                   # encoding batch size of every evaluator
    diagnostics: {max_texts: 512}    # CoDiEmb §4 diagnostics per set; false to skip
    max_rows: null                   # evaluate on the first N rows of every set (a smoke run)
    evaluations:
      - name: sts13                  # unique, a valid task name; prefixes the metric keys
        kind: sts                    # a registered evaluation kind, or my_pkg.kinds:MyKind
        source: semeval-sts          # a registered source format (hf_unified_embed.data) ...
        data_files: sts/semeval/2013/*.tsv
        options: {}                  # ... with its options
      - name: my-dev
        kind: sts
        unified: outputs/unified     # ... or a unified folder / Hub repo,
        task: stsb                   # its task (default: the entry name)
        split: validation            # and split (default: test; for BEIR folders the qrels file)
      - name: msmarco
        kind: retrieval
        source: beir                 # its corpus.jsonl joins the corpus; see corpus_files
        data_files: ir/msmarco-dl-subset
        evaluator: {relevance_threshold: 0.5}   # options of the kind's evaluator class
        dataset_id: mteb/msmarco     # optional Hub id for the model-index
        max_rows: 20                 # optional: this set's own row cap (queries here)
      - name: sts14-unseen
        kind: sts
        source: semeval-sts
        data_files: sts/semeval/2014/*.tsv
        exclude_seen:                # leave out the pairs these training files hold (kinds
          - {source: stsb, data_files: sts/stsbenchmark/sts-train.csv}   # that score pairs)
      - name: faq
        kind: retrieval
        held_out_from: faq.yaml      # ... or a build recipe: its source `task` (default: the entry
        task: faq                    # name), read as the build reads it, past the source's max_rows

Each ``kind`` is an :class:`~hf_unified_embed.evaluation.kinds.EvaluationKind` (the unified task type
of its rows, its sentence-transformers evaluator, primary and reported metrics); the built-in ones
(all scoring with cosine similarity):

============================  ====================================================  ======================
kind                          evaluator                                              reported metrics
============================  ====================================================  ======================
``sts``                       :class:`STSEvaluator` (``EmbeddingSimilarityEvaluator``) Spearman*, Pearson
``retrieval``                 :class:`GradedInformationRetrievalEvaluator`           nDCG@10*, MRR@10, Recall@10/100
``reranking``                 :class:`AnswerRerankingEvaluator` (``RerankingEvaluator``) MAP*, MRR@10, nDCG@10
``pair_classification``       :class:`PairClassificationEvaluator` (``BinaryClassificationEvaluator``) AP*, F1, accuracy
``forgetting``                :class:`~hf_unified_embed.evaluation.kinds.forgetting.ForgettingEvaluator`  neighbour overlap@10*, pair-similarity Spearman vs a reference model (no labels)
============================  ====================================================  ======================

(* the primary metric.) Rows are read through the unified data adapters, so STS files, BEIR folders,
TrecQA and MSRP parse exactly as they do for training. Entry names become file names (the
evaluators' CSV files), so they follow the task naming rule (:mod:`hf_unified_embed.utils.naming`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_unified_embed.data.source_formats import source_format_names
from hf_unified_embed.errors import HfUnifiedEmbedError, SuiteError, shown
from hf_unified_embed.evaluation.kinds import EvaluationKind, get_evaluation_kind
from hf_unified_embed.schema import TASK_TYPES
from hf_unified_embed.utils.arguments import checked_arguments
from hf_unified_embed.utils.naming import split_name_problem, task_name_problem
from hf_unified_embed.utils.typecheck import mismatched_field, type_problem
from hf_unified_embed.utils.yaml_files import read_yaml_mapping

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)


@dataclass
class DiagnosticsConfig:
    """How the CoDiEmb §4 diagnostics are computed: at most ``max_texts`` distinct texts per set
    (a seeded random sample when there are more), encoded ``batch_size`` at a time."""

    max_texts: int = 512
    batch_size: int = 32
    seed: int = 0
    rtol: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_texts", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SuiteError(f"diagnostics: {name} must be a positive integer, got {shown(value)}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise SuiteError(f"diagnostics: seed must be an integer, got {shown(self.seed)}")
        rtol = self.rtol
        if rtol is not None and (isinstance(rtol, bool) or not isinstance(rtol, (int, float)) or not rtol >= 0):
            raise SuiteError(f"diagnostics: rtol must be a non-negative number or null, got {shown(rtol)}")


def _max_rows_problem(value: Any) -> str | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return None
    return f"got {shown(value)}; expected a positive integer or null (all rows)"


@dataclass
class SuiteEntry:
    """One evaluation set: where its rows come from and which evaluator scores it."""

    name: str
    kind: str
    source: str | None = None
    data_files: str | list[str] | None = None
    unified: str | None = None
    held_out_from: str | None = None
    task: str | None = None
    split: str = "test"
    options: dict[str, Any] = field(default_factory=dict)
    evaluator: dict[str, Any] = field(default_factory=dict)
    corpus_files: str | list[str] | None = None
    dataset_id: str | None = None
    diagnostics: bool = True
    max_rows: int | None = None
    exclude_seen: list[dict[str, Any]] = field(default_factory=list)
    evaluation_kind: EvaluationKind = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        def fail(field_name: str, message: str) -> SuiteError:
            return SuiteError(f"entry {shown(self.name)}, field {shown(field_name)}: {message}")

        # The name prefixes the metrics and names the evaluators' CSV files: the task naming rule.
        problem = task_name_problem(self.name)
        if problem:
            raise SuiteError(f"entry {shown(self.name)}, field 'name': {problem}")
        mismatch = mismatched_field(SuiteEntry, {f.name: getattr(self, f.name) for f in fields(self) if f.init})
        if mismatch:
            raise fail(*mismatch)
        try:
            self.evaluation_kind = get_evaluation_kind(self.kind)
        except SuiteError as error:
            raise fail("kind", str(error)) from None
        if [self.source, self.unified, self.held_out_from].count(None) != 2:
            raise fail(
                "source",
                "give either 'source' (a source format) with 'data_files', 'unified' (a folder or repo), or "
                "'held_out_from' (a build recipe)",
            )
        if self.source is not None and self.source not in source_format_names():
            raise fail(
                "source", f"unknown source format {shown(self.source)}; expected one of {source_format_names()}"
            )
        if self.source is not None and not self.data_files:
            raise fail("data_files", f"source {shown(self.source)} needs data_files (a path, glob or list)")
        if self.unified is not None and (self.data_files or self.options):
            raise fail("unified", "a unified dataset takes 'task' and 'split', not 'data_files' or 'options'")
        if self.held_out_from is not None and (self.data_files or self.options):
            raise fail(
                "held_out_from",
                "the recipe's source gives the files and options: set 'task', not 'data_files' or 'options'",
            )
        problem = task_name_problem(self.task) if self.task is not None else None
        if problem:
            raise fail("task", problem)
        problem = split_name_problem(self.split)
        if problem:
            raise fail("split", problem)
        problem = _max_rows_problem(self.max_rows)
        if problem:
            raise fail("max_rows", problem)
        if self.corpus_files is not None and not self.evaluation_kind.takes_corpus_files:
            raise fail("corpus_files", f"kind {shown(self.evaluation_kind.name)} has no corpus (retrieval kinds do)")
        try:
            self.evaluation_kind.check_options(self.evaluator)
        except SuiteError as error:
            raise fail("evaluator", str(error)) from None
        if self.exclude_seen and not self.evaluation_kind.scores_pairs:
            raise fail(
                "exclude_seen",
                f"kind {shown(self.evaluation_kind.name)} does not score pairs one by one (sts and pair_classification do)",
            )
        for index, seen in enumerate(self.exclude_seen):
            problem = _seen_source_problem(seen)
            if problem:
                raise fail(f"exclude_seen[{index}]", problem)

    @property
    def source_options(self) -> dict[str, Any]:
        # A BEIR folder holds one qrels file per split; the entry's split picks it.
        if self.source == "beir":
            return {"qrels_split": self.split, **self.options}
        return dict(self.options)


#: The fields of an ``exclude_seen`` item: a source read like a training source, whose pairs are left out.
_SEEN_SOURCE: dict[str, Any] = {
    "source": str,
    "data_files": str | list[str],
    "task_type": str | None,
    "options": dict[str, Any],
}


def _seen_source_problem(seen: Mapping[str, Any]) -> str | None:
    unknown = sorted(set(seen) - set(_SEEN_SOURCE))
    missing = [name for name in ("source", "data_files") if name not in seen]
    if unknown or missing:
        problem = f"unknown field(s) {unknown}" if unknown else f"missing field(s) {missing}"
        return f"{problem}; fields are {sorted(_SEEN_SOURCE)}"
    for key, annotation in _SEEN_SOURCE.items():
        mistyped = type_problem(annotation, seen[key]) if key in seen else None
        if mistyped:
            return f"{key}: {mistyped}, got {shown(seen[key])}"
    if seen["source"] not in source_format_names():
        return f"unknown source format {shown(seen['source'])}; expected one of {source_format_names()}"
    if seen.get("task_type") is not None and seen["task_type"] not in TASK_TYPES:
        return f"task_type: got {shown(seen['task_type'])}; expected one of {list(TASK_TYPES)}"
    return None


#: A suite file's top-level fields besides ``evaluations``, as YAML writes them.
_TOP_LEVEL: dict[str, Any] = {
    "name": str,
    "data_root": str | None,
    "batch_size": int,
    "diagnostics": bool | dict[str, Any] | None,
    "max_rows": int | None,
}


@dataclass
class EvaluationSuite:
    """A named list of evaluation sets plus the settings shared by all of them."""

    entries: list[SuiteEntry]
    name: str = "evaluation-suite"
    data_root: Path | None = None
    batch_size: int = 32
    diagnostics: DiagnosticsConfig | None = field(default_factory=DiagnosticsConfig)
    max_rows: int | None = None
    origin: str = "<suite>"

    def __post_init__(self) -> None:
        if not self.entries:
            raise SuiteError(f"{self.origin}: the suite has no evaluations")
        problem = _max_rows_problem(self.max_rows)
        if problem:
            raise SuiteError(f"{self.origin}: max_rows: {problem}")
        names = [entry.name for entry in self.entries]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise SuiteError(f"{self.origin}: evaluation names must be unique; repeated: {duplicates}")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise SuiteError(f"{self.origin}: batch_size must be a positive integer, got {shown(self.batch_size)}")

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        base_dir: Path | None = None,
        origin: str = "<suite>",
    ) -> EvaluationSuite:
        """Build from parsed YAML; ``base_dir`` anchors a relative ``data_root`` (default: cwd)."""
        if isinstance(data, Sequence) and not isinstance(data, str):
            data = {"evaluations": list(data)}
        if not isinstance(data, Mapping) or not isinstance(data.get("evaluations"), list):
            raise SuiteError(
                f"{origin}: expected a mapping with an 'evaluations' list (or a bare list of evaluations)"
            )
        unknown_top = sorted(set(data) - {*_TOP_LEVEL, "evaluations"})
        if unknown_top:
            raise SuiteError(
                f"{origin}: unknown top-level field(s) {unknown_top}; fields are {sorted({*_TOP_LEVEL, 'evaluations'})}"
            )
        for key, annotation in _TOP_LEVEL.items():
            problem = type_problem(annotation, data[key]) if key in data else None
            if problem:
                raise SuiteError(f"{origin}: {key}: {problem}, got {shown(data[key])}")
        known = {f.name for f in fields(SuiteEntry) if f.init}
        entries = []
        for index, item in enumerate(data["evaluations"]):
            where = f"{origin}: evaluations[{index}]"
            if not isinstance(item, Mapping):
                raise SuiteError(f"{where}: expected a mapping, got {type(item).__name__}")
            unknown = sorted(set(item) - known)
            missing = [name for name in ("name", "kind") if name not in item]
            if unknown or missing:
                problem = f"unknown field(s) {unknown}" if unknown else f"missing field(s) {missing}"
                raise SuiteError(f"{where} ({item.get('name', '?')}): {problem}; fields are {sorted(known)}")
            try:
                entries.append(SuiteEntry(**item))
            except SuiteError as error:
                raise SuiteError(f"{where}: {error}") from None
        data_root = data.get("data_root")
        root = Path(data_root).expanduser() if data_root is not None else base_dir
        if root is not None and base_dir is not None and not root.is_absolute():
            root = base_dir / root
        return cls(
            entries,
            name=str(data.get("name", "evaluation-suite")),
            data_root=root,
            batch_size=data.get("batch_size", 32),
            diagnostics=_diagnostics_config(data.get("diagnostics", True), origin),
            max_rows=data.get("max_rows"),
            origin=origin,
        )

    def rows_of(self, entry: SuiteEntry) -> int | None:
        """How many rows of ``entry`` are evaluated: its own ``max_rows``, else the suite's (``None``: all)."""
        return entry.max_rows if entry.max_rows is not None else self.max_rows

    @classmethod
    def from_yaml(cls, path: str | Path) -> EvaluationSuite:
        path = Path(path)
        data = read_yaml_mapping(path, SuiteError)
        return cls.from_dict(data, base_dir=path.resolve().parent, origin=str(path))


def _diagnostics_config(value: Any, origin: str) -> DiagnosticsConfig | None:
    if value is False or value is None:
        return None
    if value is True:
        return DiagnosticsConfig()
    if not isinstance(value, Mapping):
        raise SuiteError(
            f"{origin}: diagnostics must be true, false or a mapping of {[f.name for f in fields(DiagnosticsConfig)]}"
        )
    known = {f.name for f in fields(DiagnosticsConfig)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise SuiteError(f"{origin}: diagnostics: unknown field(s) {unknown}; fields are {sorted(known)}")
    try:
        return DiagnosticsConfig(**value)
    except SuiteError as error:
        raise SuiteError(f"{origin}: {error}") from None


@checked_arguments
def load_suite(
    suite: EvaluationSuite | Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | Path,
    data_root: str | Path | None = None,
) -> EvaluationSuite:
    """Accept an :class:`EvaluationSuite`, a dict / list or a YAML path; ``data_root`` overrides the suite's."""
    if isinstance(suite, EvaluationSuite):
        loaded = suite
    elif isinstance(suite, (str, Path)):
        loaded = EvaluationSuite.from_yaml(suite)
    else:
        loaded = EvaluationSuite.from_dict(suite)
    if data_root is not None:
        loaded.data_root = Path(data_root).expanduser()
    return loaded


def suite_inputs(suite: EvaluationSuite) -> list[Path]:
    """Every local file and folder ``suite`` reads: its YAML file, each entry's data, corpus and
    ``exclude_seen`` files, its unified folder and a local reference model. A command's output may be none
    of them (:func:`~hf_unified_embed.utils.outputs.check_output`). A pattern that matches nothing yet is
    listed as the path it names, so an output cannot become the file it waits for."""
    from hf_unified_embed.utils.locations import looks_local
    from hf_unified_embed.utils.readers import resolve_files

    root = suite.data_root
    found: list[Path] = [Path(suite.origin)] if Path(suite.origin).is_file() else []

    def add(patterns: Any) -> None:
        for pattern in [patterns] if isinstance(patterns, (str, Path)) else list(patterns or []):
            try:
                found.extend(resolve_files(pattern, root))
            except HfUnifiedEmbedError:
                path = Path(pattern).expanduser()
                found.append(root / path if root is not None and not path.is_absolute() else path)

    for entry in suite.entries:
        add(entry.data_files)
        add(entry.corpus_files)
        for seen in entry.exclude_seen:
            if isinstance(seen, Mapping):
                add(seen.get("data_files"))
        if entry.held_out_from is not None:
            found.append(root / entry.held_out_from if root is not None else Path(entry.held_out_from))
            with contextlib.suppress(HfUnifiedEmbedError):
                from hf_unified_embed.evaluation.held_out import held_out_source

                recipe, spec = held_out_source(entry, root)
                found.extend(resolve_files(spec.data_files, recipe.base_dir))  # type: ignore[arg-type]
        if entry.unified is not None and (looks_local(entry.unified, root) or looks_local(entry.unified)):
            location = Path(entry.unified).expanduser()
            found.append(location)
            if root is not None and not location.is_absolute():
                found.append(root / location)
        reference = entry.evaluator.get("reference")
        if isinstance(reference, (str, Path)) and looks_local(reference):
            found.append(Path(reference))
    return list(dict.fromkeys(found))


def set_reference_model(suite: EvaluationSuite, reference: str | Path) -> EvaluationSuite:
    """Fill ``reference`` into the entries whose kind compares with a reference model and that leave it out.

    A training run or merge search knows its base model; a suite written for many runs (a
    ``forgetting`` entry without ``evaluator: {reference: ...}``) takes it from here. Entries that
    name their own reference keep it. Returns ``suite`` (changed in place).
    """
    for entry in suite.entries:
        if entry.evaluation_kind.uses_reference_model and entry.evaluator.get("reference") is None:
            entry.evaluator["reference"] = str(reference)
    return suite


def check_suite_models(suite: EvaluationSuite) -> None:
    """Refuse, before any work, a model an entry names (a ``forgetting`` entry's ``reference``) that cannot load:
    the one model rule (:func:`~hf_unified_embed.utils.model_loading.check_model_reference`)."""
    from hf_unified_embed.utils.model_loading import check_model_reference

    for entry in suite.entries:
        reference = entry.evaluator.get("reference") if entry.evaluation_kind.uses_reference_model else None
        if isinstance(reference, (str, Path)):
            check_model_reference(reference, f"entry {shown(entry.name)}, field 'evaluator.reference':")
