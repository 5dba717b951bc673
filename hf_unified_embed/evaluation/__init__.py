"""Evaluation suites for embedding models, and CoDiEmb's embedding-space diagnostics.

``run_suite(model, "suite.yaml")`` reads each evaluation set through the unified data adapters,
scores it with the sentence-transformers evaluator of its kind (STS, retrieval, reranking, pair
classification, or a kind of the user's own: :class:`EvaluationKind`, :func:`register_evaluation_kind`)
and returns :class:`SuiteResults` with a flat table, the CoDiEmb §4 diagnostics and ``model-index``
entries for the model card. ``build_sequential_evaluator`` gives the same suite to a trainer;
``format_comparison`` sets a model's results beside its base model's.
"""

from hf_unified_embed.evaluation.comparison import format_comparison, metric_differences
from hf_unified_embed.evaluation.diagnostics import (
    DIAGNOSTIC_METRICS,
    EmbeddingSpaceDiagnostics,
    embedding_space_diagnostics,
    token_matrix_diagnostics,
)
from hf_unified_embed.evaluation.evaluators import (
    AnswerRerankingEvaluator,
    EncodeOnceMixin,
    GradedInformationRetrievalEvaluator,
    PairClassificationEvaluator,
    STSEvaluator,
)
from hf_unified_embed.evaluation.inputs import EvaluationDataError
from hf_unified_embed.evaluation.kinds import (
    EVALUATION_KINDS,
    EvaluationKind,
    ForgettingEvaluator,
    get_evaluation_kind,
    register_evaluation_kind,
)
from hf_unified_embed.evaluation.results import EntryResult, SuiteResults
from hf_unified_embed.evaluation.suite import (
    DiagnosticsConfig,
    EvaluationSuite,
    SuiteEntry,
    SuiteError,
    load_suite,
    set_reference_model,
)
from hf_unified_embed.evaluation.suite_run import build_evaluators, build_sequential_evaluator, run_suite

__all__ = [
    "DIAGNOSTIC_METRICS",
    "EVALUATION_KINDS",
    "AnswerRerankingEvaluator",
    "DiagnosticsConfig",
    "EmbeddingSpaceDiagnostics",
    "EncodeOnceMixin",
    "EntryResult",
    "EvaluationDataError",
    "EvaluationKind",
    "EvaluationSuite",
    "ForgettingEvaluator",
    "GradedInformationRetrievalEvaluator",
    "PairClassificationEvaluator",
    "STSEvaluator",
    "SuiteEntry",
    "SuiteError",
    "SuiteResults",
    "build_evaluators",
    "build_sequential_evaluator",
    "embedding_space_diagnostics",
    "format_comparison",
    "get_evaluation_kind",
    "load_suite",
    "metric_differences",
    "register_evaluation_kind",
    "run_suite",
    "set_reference_model",
    "token_matrix_diagnostics",
]
