"""sentence-transformers evaluators with two additions the suite needs.

* **Encode once**: within one evaluation call every distinct text is embedded once, however often it
  occurs (both sides of an STS set share many sentences; answer candidates repeat). The cache lives
  only for that call, so evaluating during training never sees stale embeddings.
* **Graded relevance**: :class:`GradedInformationRetrievalEvaluator` computes nDCG with graded gains
  (TREC-DL qrels are 0–3), as BEIR / MTEB / ``trec_eval ndcg_cut`` do, while MRR, recall, precision,
  accuracy and MAP keep binary relevance (grade ≥ ``relevance_threshold``).
* **Shared encoding**: the texts of one call are encoded by the processes of a launched run, each its
  contiguous slice (:class:`SharedEncodingMixin`), or through a sentence-transformers multi-process pool.

Everything else — the metrics, ``primary_metric``, CSV output, storing results in the model card —
is the sentence-transformers code these classes inherit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from sentence_transformers.sentence_transformer.evaluation import (
    BinaryClassificationEvaluator,
    EmbeddingSimilarityEvaluator,
    InformationRetrievalEvaluator,
    RerankingEvaluator,
)

from hf_unified_embed.utils.distributed_encode import ONE_PROCESS, EncodingProcesses, encode_shared
from hf_unified_embed.utils.encoding_progress import encode_with_progress


class SharedEncodingMixin:
    """Share each list of texts an evaluator embeds among the processes of a launched run, or pass a
    sentence-transformers multi-process pool to ``encode``; put before the evaluator class in the bases.

    Every process gets every embedding (each encodes its contiguous slice, the slices are exchanged), so the
    metrics are computed as in one process, on each. :func:`~hf_unified_embed.evaluation.run_suite` calls
    :meth:`share_encoding`; without it the evaluator encodes alone, as sentence-transformers' does.
    """

    processes: EncodingProcesses = ONE_PROCESS
    pool: dict[str, Any] | None = None
    show_encoding_progress: bool = False

    def share_encoding(
        self,
        processes: EncodingProcesses = ONE_PROCESS,
        pool: dict[str, Any] | None = None,
        show_encoding_progress: bool = False,
    ) -> None:
        """Encode through ``processes`` (the processes of a launched run) and/or ``pool`` from now on.

        Args:
            processes: the processes that share each call's texts; all of them run the same evaluation.
            pool: ``model.start_multi_process_pool(devices)``'s pool, passed to every ``encode``.
            show_encoding_progress: a bar counting the texts of each list encoded (on the main process), see
                :func:`~hf_unified_embed.utils.encoding_progress.encode_with_progress`.
        """
        self.processes, self.pool = processes, pool
        self.show_encoding_progress = show_encoding_progress

    def embed_inputs(self, model: Any, sentences: Any, *args: Any, **kwargs: Any) -> Any:
        if self.pool is not None:
            kwargs["pool"] = self.pool
        if args or not isinstance(sentences, (list, tuple)):
            return super().embed_inputs(model, sentences, *args, **kwargs)  # type: ignore[misc]
        encode = super().embed_inputs  # type: ignore[misc]
        # The pool slices the texts among its workers itself; a bar over slices would cost it its batching.
        progress = self.show_encoding_progress and self.processes.is_main and self.pool is None
        batch_size = int(getattr(self, "batch_size", 32))

        def encode_texts(texts: Any, **options: Any) -> Any:
            return encode_with_progress(
                lambda part: encode(model, part, **options),
                texts,
                batch_size=batch_size,
                show_progress_bar=progress,
            )

        if not self.processes.distributed:
            return encode_texts(sentences, **kwargs)
        return encode_shared(encode_texts, sentences, self.processes, **kwargs)


class EncodeOnceMixin:
    """Embed each distinct text once per evaluation call; put before the evaluator class in the bases.

    Texts are grouped by the encoding arguments (query vs. document side, prompt), so a text
    encoded as a query is never reused as a document embedding.
    """

    _embedding_cache: dict[tuple[Any, ...], dict[str, Any]] | None = None

    def __call__(self, model: Any, *args: Any, **kwargs: Any) -> Any:
        self._embedding_cache = {}
        try:
            return super().__call__(model, *args, **kwargs)  # type: ignore[misc]
        finally:
            self._embedding_cache = None

    def embed_inputs(self, model: Any, sentences: Any, *args: Any, **kwargs: Any) -> Any:
        if args or self._embedding_cache is None or not isinstance(sentences, (list, tuple)):
            return super().embed_inputs(model, sentences, *args, **kwargs)  # type: ignore[misc]
        key = tuple(sorted((name, repr(value)) for name, value in kwargs.items() if name != "show_progress_bar"))
        cache = self._embedding_cache.setdefault(key, {})
        missing = list(dict.fromkeys(text for text in sentences if text not in cache))
        if missing:
            embeddings = super().embed_inputs(model, missing, **kwargs)  # type: ignore[misc]
            cache.update(zip(missing, embeddings))
        rows = [cache[text] for text in sentences]
        if not rows:
            return super().embed_inputs(model, [], **kwargs)  # type: ignore[misc]
        return torch.stack(rows) if isinstance(rows[0], torch.Tensor) else np.stack(rows)


class STSEvaluator(EncodeOnceMixin, SharedEncodingMixin, EmbeddingSimilarityEvaluator):
    """:class:`EmbeddingSimilarityEvaluator` (Spearman/Pearson of cosine) encoding each sentence once."""


class PairClassificationEvaluator(EncodeOnceMixin, SharedEncodingMixin, BinaryClassificationEvaluator):
    """:class:`BinaryClassificationEvaluator` (accuracy, F1, average precision …) encoding each sentence once."""

    @property
    def description(self) -> str:
        return "Binary Classification"


class AnswerRerankingEvaluator(EncodeOnceMixin, SharedEncodingMixin, RerankingEvaluator):
    """:class:`RerankingEvaluator` (MAP, MRR@k, nDCG@k over each query's candidates) encoding each text once."""

    @property
    def description(self) -> str:
        return "Reranking"


class GradedInformationRetrievalEvaluator(SharedEncodingMixin, InformationRetrievalEvaluator):
    """:class:`InformationRetrievalEvaluator` whose nDCG@k uses graded relevance.

    Args:
        queries: query id → text.
        corpus: document id → text.
        relevance: query id → {document id → grade}; grades ≥ ``relevance_threshold`` count as
            relevant for the binary metrics, and every grade > 0 is the gain of nDCG
            (``Σ grade_i / log2(i + 1)``, normalised by the ideal ordering of all judged documents).
        relevance_threshold: the smallest grade that is relevant for MRR, recall, precision, accuracy
            and MAP; ``None`` (default) counts every grade > 0, as BEIR and MTEB do. TREC-DL's official
            binary metrics count grade ≥ 2 of 3 (``2/3`` once the ``beir`` format normalised grades).
        **kwargs: passed to :class:`InformationRetrievalEvaluator` (``mrr_at_k``, ``ndcg_at_k``, …).
    """

    def __init__(
        self,
        queries: dict[str, Any],
        corpus: dict[str, Any],
        relevance: Mapping[str, Mapping[str, float]],
        relevance_threshold: float | None = None,
        **kwargs: Any,
    ) -> None:
        relevant_docs = {
            qid: {
                cid
                for cid, grade in grades.items()
                if (grade > 0 if relevance_threshold is None else grade >= relevance_threshold)
            }
            for qid, grades in relevance.items()
        }
        super().__init__(queries=queries, corpus=corpus, relevant_docs=relevant_docs, **kwargs)
        self.relevance = {qid: dict(grades) for qid, grades in relevance.items()}
        self.relevance_threshold = relevance_threshold

    @property
    def description(self) -> str:
        return "Information Retrieval"

    def compute_metrics(self, queries_result_list: list[Any]) -> dict[str, Any]:
        metrics = super().compute_metrics(queries_result_list)
        metrics["ndcg@k"] = {k: float(np.mean(self._graded_ndcg(queries_result_list, k))) for k in self.ndcg_at_k}
        return metrics

    def _graded_ndcg(self, queries_result_list: Sequence[Any], k: int) -> list[float]:
        values = []
        for query_id, hits in zip(self.queries_ids, queries_result_list):
            grades = self.relevance[query_id]
            ranked = sorted(hits, key=lambda hit: (-hit["score"], hit["corpus_id"]))[:k]
            gains = [max(grades.get(hit["corpus_id"], 0.0), 0.0) for hit in ranked]
            ideal = sorted((max(g, 0.0) for g in grades.values()), reverse=True)[:k]
            ideal_dcg = self.compute_dcg_at_k(ideal, k)
            values.append(self.compute_dcg_at_k(gains, k) / ideal_dcg if ideal_dcg > 0 else 0.0)
        return values

    def get_config_dict(self) -> dict[str, Any]:
        config = super().get_config_dict()
        if self.relevance_threshold is not None:
            config["relevance_threshold"] = self.relevance_threshold
        return config
