"""Shared plumbing of the loss classes: the sentence-transformers split between embedding and maths.

``forward`` embeds the input columns and hands them to ``compute_loss_from_embeddings``, so every
loss can be checked on raw embedding tensors against a transcription of its paper's equation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from sentence_transformers.base.losses.merged_forward import embed_columns
from torch import Tensor, nn

from hf_unified_embed.losses.columns import ColumnLayout

LossOutput = Tensor | dict[str, Tensor]


class EmbeddingLoss(nn.Module, ABC):
    """Base of the package's losses.

    Keeps the model in ``self.model`` (the trainer swaps in the DDP-wrapped one there) and returns
    either a scalar tensor or a dict of named scalar tensors; the trainer sums a dict and logs each part.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def embed_columns(self, sentence_features: Iterable[dict[str, Tensor]]) -> list[Tensor]:
        """One ``sentence_embedding`` tensor per input column (merged forward passes where possible)."""
        return embed_columns(self.model, sentence_features)

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None) -> LossOutput:
        return self.compute_loss_from_embeddings(self.embed_columns(sentence_features), labels)

    @abstractmethod
    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None) -> LossOutput:
        """The loss on already computed embeddings, one ``(batch, dim)`` tensor per column."""

    @abstractmethod
    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        """The columns (and label) this loss reads on a task of ``task_type``.

        Args:
            task_type: The unified ``task_type`` of the task the loss trains on.
            negatives_per_query: K−, the hard negatives the recipe asks for per row (losses that read
                hard negatives take it; losses on pairs ignore it).
        """

    def get_config_dict(self) -> dict[str, Any]:
        """Hyper-parameters shown in the model card."""
        return {}

    @property
    def citation(self) -> str:
        """BibTeX of the paper the loss implements (read by the model card)."""
        return ""
