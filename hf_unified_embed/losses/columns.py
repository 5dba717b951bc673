"""The columns a loss reads: every loss of this package declares its own :class:`ColumnLayout`.

Unified rows hold variable-length lists of positives and negatives; a sentence-transformers loss
reads a fixed number of columns. ``loss.column_layout(task_type, negatives_per_query)`` says how many
of each the collator draws per row and which value it passes as ``labels``, so a new loss (in this
package or in a user's module) needs no entry anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hf_unified_embed.errors import shown

LabelSource = Literal["score", "difficulty", "teacher_scores"]


@dataclass(frozen=True)
class ColumnLayout:
    """The columns one task's batches carry: ``query``, ``positive_1..positives``, ``negative_1..negatives``.

    Args:
        positives: Positives drawn per row (K+); rows with fewer are sampled with replacement.
        negatives: Hard negatives drawn per row (K−); 0 for losses on scored pairs.
        label: What becomes ``labels``: ``"score"`` (the score of ``positive_1``), ``"difficulty"``
            (the curriculum's column), ``"teacher_scores"`` (per row the scores of ``positive_1..K+``
            then ``negative_1..K−``, from ``positive_scores`` / ``negative_scores`` of the drawn texts:
            a ``(batch, K+ + K−)`` label tensor for distillation losses) or ``None`` (no labels).
    """

    positives: int = 1
    negatives: int = 0
    label: LabelSource | None = None

    def __post_init__(self) -> None:
        if self.positives < 1:
            raise ValueError(f"a layout needs at least one positive column, got positives={self.positives}")
        if self.negatives < 0:
            raise ValueError(f"negatives must be >= 0, got {self.negatives}")
        if self.label not in (None, "score", "difficulty", "teacher_scores"):
            raise ValueError(f"label must be 'score', 'difficulty', 'teacher_scores' or None, got {shown(self.label)}")

    @classmethod
    def scored_pair(cls) -> ColumnLayout:
        """``(query, positive_1)`` with the score of ``positive_1`` as label (STS-style losses)."""
        return cls(positives=1, negatives=0, label="score")

    @classmethod
    def pair(cls) -> ColumnLayout:
        """``(query, positive_1)`` without labels (symmetric in-batch losses on sentence pairs)."""
        return cls(positives=1, negatives=0, label=None)

    @property
    def columns(self) -> tuple[str, ...]:
        """The text column names in the order the loss reads them."""
        return (
            "query",
            *(f"positive_{i}" for i in range(1, self.positives + 1)),
            *(f"negative_{i}" for i in range(1, self.negatives + 1)),
        )

    def describe(self) -> str:
        """``query, positive_1, negative_1..2 (+ label: score)``: the layout in one line, for ``train --check``."""
        parts = ["query", "positive_1" if self.positives == 1 else f"positive_1..{self.positives}"]
        if self.negatives:
            parts.append("negative_1" if self.negatives == 1 else f"negative_1..{self.negatives}")
        label = f" + label: {self.label}" if self.label else ""
        return ", ".join(parts) + label
