"""``kind: sts``: Spearman correlation of cosine similarity with the gold scores."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasets import Dataset

from hf_unified_embed.evaluation.evaluators import STSEvaluator
from hf_unified_embed.evaluation.inputs import sts_pairs
from hf_unified_embed.evaluation.kinds.evaluation_kind import SentencePairKind, register_evaluation_kind

if TYPE_CHECKING:
    from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

    from hf_unified_embed.evaluation.kinds.evaluation_kind import SuiteEntry


@register_evaluation_kind
class STSKind(SentencePairKind):
    """Every (query, text, score) of the rows as a scored pair; :class:`STSEvaluator` with cosine similarity."""

    name = "sts"
    task_type = "sts"
    evaluator_class = STSEvaluator
    primary_metric = "spearman_cosine"
    reported_metrics = (r"spearman_cosine", r"pearson_cosine")
    set_by_kind = ("name", "main_similarity")

    def build_evaluator(
        self, entry: SuiteEntry, rows: Dataset, options: dict[str, Any], data_root: Path | None
    ) -> BaseEvaluator:
        pairs = sts_pairs(rows, entry.name)
        return self.make(
            entry,
            options,
            sentences1=pairs.sentences1,
            sentences2=pairs.sentences2,
            scores=pairs.scores,
            main_similarity="cosine",
        )
