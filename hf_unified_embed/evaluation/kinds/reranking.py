"""``kind: reranking``: each query ranks its own candidates (MAP, MRR@10, nDCG@10)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasets import Dataset

from hf_unified_embed.evaluation.evaluators import AnswerRerankingEvaluator
from hf_unified_embed.evaluation.inputs import reranking_samples
from hf_unified_embed.evaluation.kinds.evaluation_kind import EvaluationKind, register_evaluation_kind

if TYPE_CHECKING:
    from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

    from hf_unified_embed.evaluation.kinds.evaluation_kind import SuiteEntry


@register_evaluation_kind
class RerankingKind(EvaluationKind):
    """One sample per row (query, positives, negatives); :class:`AnswerRerankingEvaluator`, primary metric MAP.

    Rows of a ``retrieval`` task; rows without a positive or a negative cannot be ranked and the
    evaluator leaves them out (``num_examples`` counts the ranked ones).
    """

    name = "reranking"
    task_type = "retrieval"
    evaluator_class = AnswerRerankingEvaluator
    primary_metric = "map"
    reported_metrics = (r"map", r"mrr@\d+", r"ndcg@\d+")

    def build_evaluator(
        self, entry: SuiteEntry, rows: Dataset, options: dict[str, Any], data_root: Path | None
    ) -> BaseEvaluator:
        return self.make(entry, options, samples=reranking_samples(rows, entry.name))

    def texts(self, evaluator: BaseEvaluator, rows: Dataset) -> list[str]:
        assert isinstance(evaluator, AnswerRerankingEvaluator)
        return list(
            dict.fromkeys(text for s in evaluator.samples for text in (s["query"], *s["positive"], *s["negative"]))
        )

    def num_examples(self, evaluator: BaseEvaluator, rows: Dataset) -> int:
        assert isinstance(evaluator, AnswerRerankingEvaluator)
        return len(evaluator.samples)
