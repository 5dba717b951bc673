"""Input checks and degenerate-batch handling shared by the loss classes."""

from __future__ import annotations

import torch
from torch import Tensor


def require_columns(loss_name: str, embeddings: list[Tensor], minimum: int, layout: str) -> None:
    """Fail with the expected column layout when a batch has too few input columns."""
    if len(embeddings) < minimum:
        raise ValueError(
            f"{loss_name} expects at least {minimum} input column(s) ({layout}), got {len(embeddings)}. "
            "Every dataset column except one named 'label' or 'score' is an input column, in order."
        )


def require_pairs(loss_name: str, embeddings: list[Tensor]) -> None:
    """Fail unless the batch holds exactly the two columns of a sentence pair."""
    if len(embeddings) != 2:
        raise ValueError(
            f"{loss_name} expects exactly 2 input columns (sentence1, sentence2) with a float label, "
            f"got {len(embeddings)}."
        )


def require_labels(loss_name: str, labels: Tensor | None, batch_size: int, meaning: str) -> Tensor:
    """The labels as a flat float tensor of one value per row, or a clear error."""
    if labels is None:
        raise ValueError(f"{loss_name} needs labels ({meaning}), but the batch has none.")
    labels = labels.reshape(-1)
    if labels.numel() != batch_size:
        raise ValueError(
            f"{loss_name} expects one label per row ({meaning}): got {labels.numel()} for {batch_size} rows."
        )
    if not labels.is_floating_point():
        labels = labels.float()
    if bool(torch.isnan(labels).any()):
        raise ValueError(f"{loss_name} got NaN labels ({meaning}); fill or drop those rows before training.")
    return labels


def zero_loss(reference: Tensor) -> Tensor:
    """A zero that stays connected to the graph.

    Returned when a batch has nothing to learn from (e.g. no positive pair); a constant would leave
    parameters without gradients, which DistributedDataParallel reports as an error.
    """
    return reference.sum() * 0.0


def as_float(tensor: Tensor) -> Tensor:
    """Half-precision scores lose the small differences the list-wise losses rank by; compute in float32."""
    return tensor if tensor.dtype in (torch.float32, torch.float64) else tensor.float()
