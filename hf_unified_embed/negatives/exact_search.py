"""Exact top-k search of a block of queries over a disk-backed corpus, in blocks of corpus rows.

Scores are dot products of normalised embeddings (cosine similarity), computed with one torch
matmul per ``(query block, corpus block)``; a running top-k per query is merged with each block's
scores, so memory is ``query_block × (k + corpus_block)`` scores whatever the corpus size. The same
pass picks up the score of every given (query, document) pair — the positives — so a query's
positives never need a second look-up.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from hf_unified_embed.negatives.store import EmbeddingFile


@dataclass(frozen=True)
class Corpus:
    """Embedding files searched as one corpus; document ``i`` of a segment is ``first_ids[segment] + i``.

    Without ``first_ids`` the segments are consecutive: document ``i`` of the second file is
    ``rows(first) + i``. With them a corpus is one process's share of a larger one (its slice of each
    segment), and the ids it finds are the whole corpus's.
    """

    segments: Sequence[EmbeddingFile]
    first_ids: Sequence[int] | None = None

    @property
    def rows(self) -> int:
        return sum(segment.rows for segment in self.segments)

    def blocks(self, block_rows: int) -> Iterator[tuple[int, np.ndarray]]:
        """``(first document id, embeddings)`` of consecutive blocks of at most ``block_rows`` documents."""
        firsts = self.first_ids if self.first_ids is not None else np.cumsum([0, *(s.rows for s in self.segments)])
        for segment, offset in zip(self.segments, firsts):
            for start in range(0, segment.rows, block_rows):
                yield int(offset) + start, segment.read(start, start + block_rows)


@dataclass(frozen=True)
class SearchResult:
    """The ``k`` best documents of each query (best first; ``-inf`` / ``-1`` where the corpus is smaller) and pair scores."""

    scores: Tensor
    ids: Tensor
    pair_scores: Tensor

    @classmethod
    def merged(cls, parts: Sequence[SearchResult], k: int) -> SearchResult:
        """The result over the union of disjoint corpora from each one's result for the same queries and pairs.

        The ``k`` best of the parts' ``k`` best are the ``k`` best of the union; a pair's score comes from the
        part holding its document (the others have ``nan`` for it).
        """
        if len(parts) == 1:
            return parts[0]
        scores, position = torch.topk(torch.cat([part.scores for part in parts], dim=1), k, dim=1)
        ids = torch.cat([part.ids for part in parts], dim=1).gather(1, position)
        pair_scores = parts[0].pair_scores
        for part in parts[1:]:
            pair_scores = torch.where(torch.isnan(pair_scores), part.pair_scores, pair_scores)
        return cls(scores, ids, pair_scores)


def search(
    queries: Tensor,
    corpus: Corpus,
    k: int,
    *,
    pair_query: Tensor | None = None,
    pair_doc: Tensor | None = None,
    corpus_block: int = 32_768,
) -> SearchResult:
    """Exact top-``k`` by cosine of ``queries`` (normalised, on the device to use) over ``corpus``.

    Args:
        queries: ``(q, dim)`` float32 embeddings of a block of queries.
        corpus: the documents, read ``corpus_block`` at a time.
        k: documents kept per query.
        pair_query: ``(p,)`` query rows whose scores with ``pair_doc`` to return in ``pair_scores``
            (in the given order).
        pair_doc: ``(p,)`` document ids, one per entry of ``pair_query``.
        corpus_block: documents scored per matmul.
    """
    device = queries.device
    count = queries.size(0)
    if pair_query is None or pair_doc is None:
        pair_query = pair_doc = torch.zeros(0, dtype=torch.long, device=device)
    pair_scores = torch.full((pair_query.numel(),), float("nan"), device=device)
    order = torch.argsort(pair_doc)
    sorted_doc = pair_doc[order]
    best_scores = torch.empty((count, 0), device=device)
    best_ids = torch.empty((count, 0), dtype=torch.long, device=device)
    for start, block in corpus.blocks(corpus_block):
        scores = queries @ torch.from_numpy(block).to(device).T
        size = scores.size(1)
        lo, hi = (int(i) for i in torch.searchsorted(sorted_doc, torch.tensor([start, start + size], device=device)))
        chosen = order[lo:hi]
        pair_scores[chosen] = scores[pair_query[chosen], pair_doc[chosen] - start]
        # The block's own top-k first, so the merge with the running top-k only sorts 2k columns.
        block_scores, block_ids = torch.topk(scores, min(k, size), dim=1)
        merged_ids = torch.cat([best_ids, block_ids + start], dim=1)
        best_scores, position = torch.topk(
            torch.cat([best_scores, block_scores], dim=1), min(k, merged_ids.size(1)), dim=1
        )
        best_ids = merged_ids.gather(1, position)
    missing = k - best_scores.size(1)
    if missing > 0:  # a corpus smaller than k: pad like an index that has run out of documents
        best_scores = torch.cat([best_scores, best_scores.new_full((count, missing), float("-inf"))], dim=1)
        best_ids = torch.cat([best_ids, best_ids.new_full((count, missing), -1)], dim=1)
    return SearchResult(best_scores, best_ids, pair_scores)
