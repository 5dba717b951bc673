"""What the GradCache machinery needs from a loss, and what a loss's embedding pass returns.

:class:`~hf_unified_embed.losses.embedding_loss.EmbeddingLoss` implements :class:`CachedLoss`; the
modules of this folder are written against the protocol, so the loss base class imports them and they
never import it back.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from torch import Tensor, nn

#: The view holding the final sentence embeddings: the first argument of ``compute_loss_from_embeddings``.
FINAL = "embeddings"


@dataclass
class Embedded:
    """What :meth:`EmbeddingLoss.embed` computes for a batch (or a slice of its rows).

    Args:
        views: Per-row embeddings the loss needs, by the keyword of ``compute_loss_from_embeddings`` they
            go to, one ``(rows, dim)`` tensor per input column each. ``"embeddings"`` (the final sentence
            embeddings) is always there; e.g. ``"mid_layer_embeddings"`` adds an intermediate layer.
        means: Loss parts that are a mean over items spread across the rows (GUR's masked-LM loss over
            the masked tokens), as ``(sum over these rows, number of items in these rows)``. They need no
            batch-wide computation, so the gradient-cached mode computes them mini-batch by mini-batch.
    """

    views: dict[str, list[Tensor]]
    means: dict[str, tuple[Tensor, int]] = field(default_factory=dict)


class CachedLoss(Protocol):
    """A loss that the gradient-cached step can run: an embedding pass and a loss on its embeddings."""

    model: nn.Module
    mini_batch_size: Any

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]: ...

    def mini_batch_sizes(self, sentence_features: list[dict[str, Any]], context: Any) -> tuple[int | None, int | None]:
        """The mini-batch size in rows and the token budget for this batch (one of them ``None``)."""
        ...

    def embed(self, sentence_features: list[dict[str, Any]], context: Any, rows: slice | Tensor) -> Embedded:
        """Embed ``rows`` of the batch: every view the loss needs."""
        ...

    def calculate_loss(
        self,
        reps: list[list[Tensor]],
        labels: Tensor | None = None,
        *,
        with_backward: bool = False,
        views: tuple[str, ...] = (FINAL,),
        loss_inputs: Mapping[str, Any] | None = None,
        batch_order: Tensor | None = None,
    ) -> Any:
        """The loss from mini-batch embeddings (see ``EmbeddingLoss.calculate_loss``)."""
        ...
