"""``kind: retrieval``: every query searches the whole corpus (graded nDCG@10, MRR@10, recall@10/100)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from datasets import Dataset
from sentence_transformers.util import cos_sim

from hf_unified_embed.evaluation.evaluators import GradedInformationRetrievalEvaluator
from hf_unified_embed.evaluation.inputs import read_corpus_files, retrieval_inputs
from hf_unified_embed.evaluation.kinds.evaluation_kind import EvaluationKind, register_evaluation_kind

if TYPE_CHECKING:
    from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

    from hf_unified_embed.evaluation.kinds.evaluation_kind import SuiteEntry


@register_evaluation_kind
class RetrievalKind(EvaluationKind):
    """Queries against the corpus of all rows' texts plus ``corpus_files`` (a ``beir`` source adds its
    ``corpus.jsonl``, each document under its ``_id``); :class:`GradedInformationRetrievalEvaluator` with
    cosine similarity."""

    name = "retrieval"
    task_type = "retrieval"
    evaluator_class = GradedInformationRetrievalEvaluator
    primary_metric = "cosine_ndcg@10"
    reported_metrics = (r"cosine_ndcg@\d+", r"cosine_mrr@\d+", r"cosine_recall@\d+")
    default_options: ClassVar[Mapping[str, Any]] = {
        "mrr_at_k": [10],
        "ndcg_at_k": [10],
        "accuracy_at_k": [1, 10],
        "precision_recall_at_k": [10, 100],
        "map_at_k": [100],
    }
    set_by_kind = ("name", "score_functions", "main_score_function")
    takes_corpus_files = True

    def primary_metric_for(self, options: Mapping[str, Any]) -> str:
        # As InformationRetrievalEvaluator names it: nDCG at the largest k asked for.
        return f"cosine_ndcg@{max(options['ndcg_at_k'])}"

    def build_evaluator(
        self, entry: SuiteEntry, rows: Dataset, options: dict[str, Any], data_root: Path | None
    ) -> BaseEvaluator:
        corpus_files = entry.corpus_files
        if corpus_files is None and entry.source == "beir":
            data_files = [entry.data_files] if isinstance(entry.data_files, str) else list(entry.data_files or [])
            corpus_files = [str(Path(folder) / "corpus.jsonl") for folder in data_files]
        extra = read_corpus_files(corpus_files, data_root, evaluation=entry.name) if corpus_files else {}
        inputs = retrieval_inputs(rows, entry.name, extra_corpus=extra)
        return self.make(
            entry,
            options,
            queries=inputs.queries,
            corpus=inputs.corpus,
            relevance=inputs.relevance,
            score_functions={"cosine": cos_sim},
            main_score_function="cosine",
        )

    def texts(self, evaluator: BaseEvaluator, rows: Dataset) -> list[str]:
        assert isinstance(evaluator, GradedInformationRetrievalEvaluator)
        return list(dict.fromkeys(map(str, [*evaluator.queries, *evaluator.corpus])))

    def num_examples(self, evaluator: BaseEvaluator, rows: Dataset) -> int:
        assert isinstance(evaluator, GradedInformationRetrievalEvaluator)
        return len(evaluator.queries)
