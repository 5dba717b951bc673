"""Evaluation suites: a YAML list of evaluation sets → sentence-transformers evaluators → results.

A suite is YAML (or a dict, or a bare list of entries)::

    name: shared-benchmarks          # optional, shown in results and cards
    data_root: ../../../shared/data  # relative data paths resolve here (default: the suite's folder)
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

import logging
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasets import Dataset
from sentence_transformers.sentence_transformer.evaluation import SequentialEvaluator
from tqdm.auto import tqdm

from hf_unified_embed.data.source_formats import source_format_names
from hf_unified_embed.errors import HfUnifiedEmbedError, InputNotFoundError, SuiteError, shown
from hf_unified_embed.evaluation.diagnostics import EmbeddingSpaceDiagnostics, embedding_space_diagnostics
from hf_unified_embed.evaluation.inputs import drop_seen_pairs, entry_files, row_pairs
from hf_unified_embed.evaluation.kinds import EvaluationKind, get_evaluation_kind
from hf_unified_embed.evaluation.results import EntryResult, SuiteResults
from hf_unified_embed.schema import TASK_TYPES
from hf_unified_embed.utils.naming import split_name_problem, task_name_problem
from hf_unified_embed.utils.typecheck import mismatched_field, type_problem
from hf_unified_embed.utils.yaml_files import read_yaml_mapping

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

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
        if (self.source is None) == (self.unified is None):
            raise fail(
                "source", "give either 'source' (a source format) with 'data_files', or 'unified' (a folder or repo)"
            )
        if self.source is not None and self.source not in source_format_names():
            raise fail(
                "source", f"unknown source format {shown(self.source)}; expected one of {source_format_names()}"
            )
        if self.source is not None and not self.data_files:
            raise fail("data_files", f"source {shown(self.source)} needs data_files (a path, glob or list)")
        if self.unified is not None and (self.data_files or self.options):
            raise fail("unified", "a unified dataset takes 'task' and 'split', not 'data_files' or 'options'")
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


def build_evaluators(
    suite: EvaluationSuite | Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | Path,
    data_root: str | Path | None = None,
) -> dict[str, BaseEvaluator]:
    """One evaluator per suite entry, keyed by entry name, in suite order."""
    loaded = load_suite(suite, data_root)
    rows = load_entry_rows(loaded)
    return {
        entry.name: entry.evaluation_kind.evaluator(
            entry, rows[entry.name], batch_size=loaded.batch_size, data_root=loaded.data_root
        )
        for entry in loaded.entries
    }


def build_sequential_evaluator(
    suite: EvaluationSuite | Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | Path,
    data_root: str | Path | None = None,
) -> SequentialEvaluator:
    """The whole suite as one evaluator for ``SentenceTransformerTrainer(evaluator=...)``.

    Its ``sequential_score`` (the metric ``metric_for_best_model="eval_sequential_score"`` selects) is
    the mean of the entries' primary metrics.
    """
    return SequentialEvaluator(build_evaluators(suite, data_root).values(), main_score_function=statistics.fmean)


def run_suite(
    model: SentenceTransformer,
    suite: EvaluationSuite | Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | Path,
    *,
    data_root: str | Path | None = None,
    diagnostics: bool | None = None,
    output_path: str | None = None,
    show_progress_bar: bool = True,
    rows: Mapping[str, Dataset] | None = None,
) -> SuiteResults:
    """Evaluate ``model`` on every entry of ``suite``.

    Args:
        model: the sentence-transformers model.
        suite: an :class:`EvaluationSuite`, its dict / list form or a YAML path.
        data_root: overrides the suite's ``data_root``.
        diagnostics: compute the CoDiEmb §4 diagnostics; default as the suite says.
        output_path: where the evaluators write their CSV files (none by default).
        show_progress_bar: a tqdm bar over the suite entries.
        rows: the entries' rows when already read (:func:`load_entry_rows`, which a command calls before it
            loads the model, so that a bad row is reported first); read here otherwise.

    Returns:
        :class:`SuiteResults`: per-entry metrics, a flat table, the diagnostics and ``model-index``
        entries (``huggingface_hub.EvalResult``) for the model card.

    Example::

        from sentence_transformers import SentenceTransformer
        from hf_unified_embed.evaluation import run_suite

        results = run_suite(SentenceTransformer("all-MiniLM-L6-v2"), "examples/suites/shared.yaml")
        print(results.format_table())
        card_yaml = {"model-index": results.model_index()}
    """
    loaded = load_suite(suite, data_root)
    rows = load_entry_rows(loaded) if rows is None else rows
    settings = loaded.diagnostics if diagnostics is not False else None
    if diagnostics and settings is None:
        settings = DiagnosticsConfig()
    entries: list[EntryResult] = []
    for entry in tqdm(loaded.entries, desc="Evaluating", unit="set", disable=not show_progress_bar):
        kind = entry.evaluation_kind
        evaluator = kind.evaluator(entry, rows[entry.name], batch_size=loaded.batch_size, data_root=loaded.data_root)
        raw = evaluator(model, output_path=output_path)
        assert isinstance(raw, dict), "every suite evaluator returns a metrics dict"
        prefix = f"{entry.name}_"
        metrics = {key.removeprefix(prefix): float(value) for key, value in raw.items()}
        space: EmbeddingSpaceDiagnostics | None = None
        if settings is not None and entry.diagnostics:
            texts = kind.texts(evaluator, rows[entry.name])
            if len(texts) > settings.max_texts:
                texts = random.Random(settings.seed).sample(texts, settings.max_texts)
            space = embedding_space_diagnostics(model, texts, batch_size=settings.batch_size, rtol=settings.rtol)
        entries.append(
            EntryResult(
                name=entry.name,
                kind=kind.name,
                metrics=metrics,
                primary_metric=str(evaluator.primary_metric).removeprefix(prefix),
                num_examples=kind.num_examples(evaluator, rows[entry.name]),
                split=entry.split,
                dataset_id=entry.dataset_id,
                task_name=evaluator.description,
                diagnostics=space,
                metric_patterns=kind.reported_metrics,
            )
        )
    model_name = getattr(model.model_card_data, "model_name", None) or getattr(model.model_card_data, "model_id", None)
    return SuiteResults(entries=entries, suite_name=loaded.name, model_name=model_name or "model")
