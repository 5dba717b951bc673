"""``kind: pair_classification``: average precision of cosine similarity for paraphrase labels."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from datasets import Dataset

from hf_unified_embed.evaluation.evaluators import PairClassificationEvaluator
from hf_unified_embed.evaluation.inputs import labelled_pairs
from hf_unified_embed.evaluation.kinds.evaluation_kind import SentencePairKind, register_evaluation_kind

if TYPE_CHECKING:
    from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

    from hf_unified_embed.evaluation.kinds.evaluation_kind import SuiteEntry


@register_evaluation_kind
class PairClassificationKind(SentencePairKind):
    """Query/text pairs labelled 1 or 0 (``label_threshold`` on scored texts); :class:`PairClassificationEvaluator`."""

    name = "pair_classification"
    task_type = "pair_classification"
    evaluator_class = PairClassificationEvaluator
    primary_metric = "cosine_ap"
    reported_metrics = (r"cosine_ap", r"cosine_f1", r"cosine_accuracy")
    kind_options: ClassVar[Mapping[str, Any]] = {"label_threshold": float}
    set_by_kind = ("name", "similarity_fn_names")

    def build_evaluator(
        self, entry: SuiteEntry, rows: Dataset, options: dict[str, Any], data_root: Path | None
    ) -> BaseEvaluator:
        threshold = options.pop("label_threshold", 0.5)
        pairs = labelled_pairs(rows, entry.name, label_threshold=threshold)
        return self.make(
            entry,
            options,
            sentences1=pairs.sentences1,
            sentences2=pairs.sentences2,
            labels=[int(label) for label in pairs.scores],
            similarity_fn_names=["cosine"],
        )
