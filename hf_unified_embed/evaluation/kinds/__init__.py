"""Evaluation kinds: ``sts``, ``retrieval``, ``reranking``, ``pair_classification``, ``forgetting``, and the registry a new one joins.

Each kind is one class in one module here (or in the user's own module); see
:class:`~hf_unified_embed.evaluation.kinds.evaluation_kind.EvaluationKind`.
"""

from hf_unified_embed.evaluation.kinds.evaluation_kind import (
    EVALUATION_KINDS,
    EvaluationKind,
    SentencePairKind,
    get_evaluation_kind,
    register_evaluation_kind,
)
from hf_unified_embed.evaluation.kinds.forgetting import ForgettingEvaluator, ForgettingKind
from hf_unified_embed.evaluation.kinds.pair_classification import PairClassificationKind
from hf_unified_embed.evaluation.kinds.reranking import RerankingKind
from hf_unified_embed.evaluation.kinds.retrieval import RetrievalKind
from hf_unified_embed.evaluation.kinds.sts import STSKind

__all__ = [
    "EVALUATION_KINDS",
    "EvaluationKind",
    "ForgettingEvaluator",
    "ForgettingKind",
    "PairClassificationKind",
    "RerankingKind",
    "RetrievalKind",
    "STSKind",
    "SentencePairKind",
    "get_evaluation_kind",
    "register_evaluation_kind",
]
