"""The evaluation-kind interface and its registry.

A kind says everything the suite needs to know about one way of scoring an evaluation set: which
unified task type its rows have, which sentence-transformers evaluator scores them, the metric that
ranks models, the headline metrics of the results table, and how the evaluator is built from the
rows and the entry's ``evaluator`` options. The suite itself never names a kind.

A new kind is one class, in this package or in the user's own module::

    from hf_unified_embed.evaluation import EvaluationKind, register_evaluation_kind
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    @register_evaluation_kind
    class DotSTS(EvaluationKind):
        name = "sts_dot"
        task_type = "sts"
        evaluator_class = EmbeddingSimilarityEvaluator
        primary_metric = "spearman_dot"
        reported_metrics = (r"spearman_dot", r"pearson_dot")
        set_by_kind = ("name", "main_similarity")

        def build_evaluator(self, entry, rows, options, data_root):
            pairs = sts_pairs(rows, entry.name)
            return self.make(entry, options, sentences1=pairs.sentences1, sentences2=pairs.sentences2,
                             scores=pairs.scores, main_similarity="dot")

A suite names it ``kind: sts_dot`` once its module is imported, or ``kind: my_pkg.kinds:DotSTS``
(imported on use, see :func:`hf_unified_embed.utils.plugins.import_object`).
"""

from __future__ import annotations

import difflib
import inspect
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar, cast

from datasets import Dataset
from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

from hf_unified_embed.errors import SuiteError, shown
from hf_unified_embed.schema import TASK_TYPES
from hf_unified_embed.utils.plugins import import_object, is_import_path
from hf_unified_embed.utils.typecheck import constructor_parameters, type_problem


class SuiteEntry(Protocol):
    """What a kind reads of a suite entry (:class:`hf_unified_embed.evaluation.suite.SuiteEntry`, which
    looks its kind up here: the kinds depend on this protocol, not on the suite module)."""

    name: str
    source: str | None
    data_files: Any
    corpus_files: Any
    evaluator: dict[str, Any]


class EvaluationKind(ABC):
    """Base of every evaluation kind; subclasses set the class attributes and :meth:`build_evaluator`.

    Attributes:
        name: what a suite entry writes as ``kind``.
        task_type: the unified task type (:data:`hf_unified_embed.schema.TASK_TYPES`) of its rows; a
            ``source`` entry's rows are read with it.
        evaluator_class: the sentence-transformers evaluator class built; the entry's ``evaluator``
            options are checked against its constructor (names and annotated types) when the suite loads.
        primary_metric: the metric that ranks models (without the entry-name prefix), at the kind's
            default options; see :meth:`primary_metric_for`.
        reported_metrics: regular expressions over the evaluator's metric keys: the headline metrics of
            the results table and the ``model-index``, after the primary one, in this order.
        default_options: evaluator options the kind sets unless the entry overrides them.
        kind_options: options the kind reads itself rather than passing to the evaluator: name → type.
        set_by_kind: constructor arguments with a default that the kind always sets (``name`` and the
            similarity); arguments without a default are the inputs and are set by the kind too.
        takes_corpus_files: whether entries may add ``corpus_files`` (extra documents).
        uses_reference_model: whether the evaluator compares with a reference model (its ``reference``
            option), which :func:`~hf_unified_embed.evaluation.suite.set_reference_model` fills in
            where the entry leaves it out (e.g. with the base model of a training run or merge search).
        scores_pairs: whether each (query, text) of a row is one scored example on its own, so that an
            entry's ``exclude_seen`` can drop the pairs a model was trained on (STS, pair classification).
    """

    name: ClassVar[str]
    task_type: ClassVar[str]
    evaluator_class: ClassVar[type[BaseEvaluator]]
    primary_metric: ClassVar[str]
    reported_metrics: ClassVar[tuple[str, ...]] = ()
    default_options: ClassVar[Mapping[str, Any]] = {}
    kind_options: ClassVar[Mapping[str, Any]] = {}
    set_by_kind: ClassVar[tuple[str, ...]] = ("name",)
    takes_corpus_files: ClassVar[bool] = False
    uses_reference_model: ClassVar[bool] = False
    scores_pairs: ClassVar[bool] = False

    @abstractmethod
    def build_evaluator(
        self, entry: SuiteEntry, rows: Dataset, options: dict[str, Any], data_root: Path | None
    ) -> BaseEvaluator:
        """The evaluator of ``entry`` over its unified ``rows``.

        ``options`` holds the kind's :attr:`default_options`, the suite's ``batch_size`` (when the
        evaluator takes one) and the entry's ``evaluator`` mapping, already checked; ``data_root``
        anchors relative paths of the entry. Build it with :meth:`make`.
        """

    def primary_metric_for(self, options: Mapping[str, Any]) -> str:
        """The primary metric under ``options`` (a kind whose metric depends on an option overrides this)."""
        return self.primary_metric

    def texts(self, evaluator: BaseEvaluator, rows: Dataset) -> list[str]:
        """The distinct texts the evaluator embeds, in a stable order (for the diagnostics' sample)."""
        return list(
            dict.fromkeys(
                text
                for query, positives, negatives in zip(rows["query"], rows["positives"], rows["negatives"])
                for text in (query, *positives, *negatives)
            )
        )

    def num_examples(self, evaluator: BaseEvaluator, rows: Dataset) -> int:
        """How many examples were scored (pairs, queries, ...), for the results table."""
        return len(rows)

    def allowed_options(self) -> dict[str, Any]:
        """Option name → type annotation (``Any`` where none resolves) the entry's ``evaluator`` may set."""
        parameters = constructor_parameters(cast(Hashable, self.evaluator_class))
        allowed = {
            name: annotation
            for name, (annotation, has_default) in parameters.items()
            if has_default and name not in self.set_by_kind
        }
        return {**allowed, **self.kind_options}

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Refuse an option the evaluator does not take, or a value that does not fit its annotation."""
        allowed = self.allowed_options()
        for key, value in options.items():
            if key in constructor_parameters(cast(Hashable, self.evaluator_class)) and key not in allowed:
                raise SuiteError(f"option {shown(key)} is set by kind {shown(self.name)} itself")
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean {shown(close[0])}? " if close else ""
                raise SuiteError(
                    f"{self.evaluator_class.__name__} has no option {shown(key)}; {hint}options of kind {shown(self.name)}: "
                    f"{', '.join(sorted(allowed))}"
                )
            problem = type_problem(allowed[key], value)
            if problem:
                raise SuiteError(f"option {shown(key)}: {problem}, got {shown(value)}")

    def evaluator(self, entry: SuiteEntry, rows: Dataset, *, batch_size: int, data_root: Path | None) -> BaseEvaluator:
        """The evaluator of ``entry``: options assembled, :meth:`build_evaluator`, primary metric set."""
        options = dict(self.default_options)
        if "batch_size" in self.allowed_options():
            options["batch_size"] = batch_size
        options.update(entry.evaluator)
        evaluator = self.build_evaluator(entry, rows, dict(options), data_root)
        evaluator.primary_metric = self.primary_metric_for(options)
        return evaluator

    def make(self, entry: SuiteEntry, options: Mapping[str, Any], **inputs: Any) -> BaseEvaluator:
        """``evaluator_class(name=entry.name, **inputs, **options)``; a value the class refuses is a :class:`SuiteError`."""
        evaluator_class: Any = self.evaluator_class  # BaseEvaluator itself takes no arguments; its subclasses do
        try:
            return evaluator_class(name=entry.name, **inputs, **options)
        except (TypeError, ValueError) as error:
            # The options passed check_options, so what remains is a value the constructor rejects.
            raise SuiteError(
                f"entry {shown(entry.name)}, field 'evaluator': {self.evaluator_class.__name__} refused the options: {error}"
            ) from error


class SentencePairKind(EvaluationKind):
    """A kind whose evaluator scores ``sentences1[i]`` against ``sentences2[i]`` (STS, pair classification)."""

    scores_pairs = True

    def texts(self, evaluator: BaseEvaluator, rows: Dataset) -> list[str]:
        pairs: Any = evaluator
        return list(dict.fromkeys(map(str, [*pairs.sentences1, *pairs.sentences2])))

    def num_examples(self, evaluator: BaseEvaluator, rows: Dataset) -> int:
        pairs: Any = evaluator
        return len(pairs.sentences1)


KindT = TypeVar("KindT", bound=type[EvaluationKind])

#: Registered kinds by name.
EVALUATION_KINDS: dict[str, type[EvaluationKind]] = {}


def check_kind_class(cls: Any, what: str) -> type[EvaluationKind]:
    """``cls`` if it is a complete :class:`EvaluationKind` subclass, else a :class:`SuiteError` naming ``what``."""
    if not (isinstance(cls, type) and issubclass(cls, EvaluationKind)):
        raise SuiteError(f"{what}: {shown(cls)} is not an EvaluationKind subclass")
    if inspect.isabstract(cls):
        raise SuiteError(f"{what}: {cls.__name__} does not implement {sorted(cls.__abstractmethods__)}")
    for attribute in ("name", "task_type", "evaluator_class", "primary_metric"):
        if not hasattr(cls, attribute):
            raise SuiteError(f"{what}: {cls.__name__} does not set {shown(attribute)}")
    if cls.task_type not in TASK_TYPES:
        raise SuiteError(f"{what}: {cls.__name__}.task_type {shown(cls.task_type)} is not one of {list(TASK_TYPES)}")
    return cls


def register_evaluation_kind(cls: KindT) -> KindT:
    """Class decorator adding a kind to :data:`EVALUATION_KINDS` under its ``name``."""
    check_kind_class(cls, f"evaluation kind {shown(getattr(cls, 'name', cls))}")
    registered = EVALUATION_KINDS.get(cls.name)
    if registered is not None and registered is not cls:
        raise SuiteError(
            f"evaluation kind {shown(cls.name)} is already registered by {registered.__module__}.{registered.__qualname__}"
        )
    EVALUATION_KINDS[cls.name] = cls
    return cls


def get_evaluation_kind(name: Any) -> EvaluationKind:
    """The kind a suite entry names: a registered name or ``package.module:Class``."""
    if isinstance(name, str) and is_import_path(name):
        return check_kind_class(import_object(name, SuiteError, "evaluation kind"), f"evaluation kind {shown(name)}")()
    if isinstance(name, str) and name in EVALUATION_KINDS:
        return EVALUATION_KINDS[name]()
    raise SuiteError(
        f"got {shown(name)}; expected one of {sorted(EVALUATION_KINDS)} or 'package.module:Class' (an EvaluationKind)"
    )
