"""What the hard-negative miner is asked to do (:class:`HardNegativeConfig`) and what it did (:class:`MiningReport`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hf_unified_embed.errors import UsageError, shown
from hf_unified_embed.negatives.store import EmbeddingDtype


@dataclass(frozen=True)
class HardNegativeConfig:
    """Settings of :func:`~hf_unified_embed.negatives.mine_hard_negatives`; names follow sentence-transformers'
    ``mine_hard_negatives`` where the meaning is the same.

    Candidates are the ``range_max + (most positives of a query)`` documents most similar to the query
    (exact search). The query's own positives and, with ``drop_query_text``, a document identical to
    the query are removed; then every filter that is set removes candidates; of the rest, ranks
    ``range_min`` up to ``range_min + num_negatives`` become the query's negatives, hardest first.

    Args:
        num_negatives: K−, negatives kept per query (CoDiEmb trains with 4).
        range_min: skip this many of the most similar remaining candidates.
        range_max: rank up to which candidates are considered; default as sentence-transformers:
            ``range_min + 10 × num_negatives + most positives`` when a filter is set, else
            ``range_min + num_negatives + most positives``.
        absolute_margin: drop a candidate whose score is within this margin of the query's lowest
            positive score (``score + margin > positive``).
        relative_margin: drop a candidate scoring above ``positive − |positive| × margin``; 0.05 is
            NV-Retriever's TopK-PercPos (95 %), the default here.
        max_score: drop candidates scoring above this (likely unlabelled positives).
        min_score: drop candidates scoring below this (too easy).
        drop_query_text: drop a document whose text equals the query.
        batch_size: encoding batch size.
        query_block: queries searched together (memory: ``query_block × corpus_block`` float32 scores,
            256 MiB with the defaults, whatever the corpus size).
        corpus_block: documents scored per matmul.
        dtype: how embeddings are stored on disk (``float16`` halves the disk traffic; scores are
            always computed in float32).
    """

    num_negatives: int = 4
    range_min: int = 0
    range_max: int | None = None
    absolute_margin: float | None = None
    relative_margin: float | None = 0.05
    max_score: float | None = None
    min_score: float | None = None
    drop_query_text: bool = True
    batch_size: int = 64
    query_block: int = 2_048
    corpus_block: int = 32_768
    dtype: EmbeddingDtype = "float32"

    def __post_init__(self) -> None:
        for name in ("num_negatives", "batch_size", "query_block", "corpus_block"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.range_min < 0:
            raise UsageError(f"range_min must be >= 0, got {self.range_min}")
        if self.range_max is not None and self.range_max - self.range_min < self.num_negatives:
            raise UsageError(
                f"range_max={self.range_max} leaves {self.range_max - self.range_min} candidates after "
                f"range_min={self.range_min}, fewer than num_negatives={self.num_negatives}"
            )
        for name in ("absolute_margin", "relative_margin"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise UsageError(f"{name} must be >= 0, got {value}")
        if self.dtype not in ("float32", "float16"):
            raise UsageError(f"dtype must be 'float32' or 'float16', got {shown(self.dtype)}")

    @property
    def filters_set(self) -> bool:
        return any(
            value is not None for value in (self.absolute_margin, self.relative_margin, self.max_score, self.min_score)
        )

    def candidate_range(self, most_positives: int) -> int:
        """``range_max``: the rank up to which candidates are considered."""
        if self.range_max is not None:
            return self.range_max
        return self.range_min + self.num_negatives * (10 if self.filters_set else 1) + most_positives

    def settings(self) -> dict[str, Any]:
        """The mining settings (without the performance knobs), for the dataset card."""
        skip = {"batch_size", "query_block", "corpus_block", "dtype"}
        return {key: value for key, value in asdict(self).items() if key not in skip}


@dataclass
class MiningReport:
    """What mining one task did: its teacher, how many candidates each filter removed, what was written.

    ``dropped`` counts removed candidates by reason: ``identical_text`` (a positive of the query or the
    query itself), ``margin`` (absolute or relative margin to the positive) and ``score_bounds``
    (``max_score`` / ``min_score``).
    """

    teacher: str
    cross_encoder: str | None
    num_negatives: int
    rows: int
    queries: int
    corpus: int
    candidates: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: {"identical_text": 0, "margin": 0, "score_bounds": 0})
    negatives: int = 0
    short_queries: int = 0
    settings: dict[str, Any] = field(default_factory=dict)

    def to_notes(self) -> dict[str, Any]:
        """The ``hard_negatives`` entry of the task's ``source_notes`` in the dataset card."""
        return asdict(self)
