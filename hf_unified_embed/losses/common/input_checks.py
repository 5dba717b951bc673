"""Input checks and degenerate-batch handling shared by the loss classes."""

from __future__ import annotations

import torch
from torch import Tensor

from hf_unified_embed.losses.common.label_values import checked_before_embedding


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
    checked = checked_before_embedding(labels)
    labels = labels.reshape(-1)
    if labels.numel() != batch_size:
        raise ValueError(
            f"{loss_name} expects one label per row ({meaning}): got {labels.numel()} for {batch_size} rows."
        )
    if not labels.is_floating_point():
        labels = labels.float()
    if not checked and bool(torch.isnan(labels).any()):
        raise ValueError(f"{loss_name} got NaN labels ({meaning}); fill or drop those rows before training.")
    return labels


def zero_loss(reference: Tensor) -> Tensor:
    """A zero that stays connected to the graph.

    Returned when a batch has nothing to learn from (e.g. no positive pair); a constant would leave
    parameters without gradients, which DistributedDataParallel reports as an error.
    """
    return reference.sum() * 0.0


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """The mean of ``values`` where ``mask`` holds, and a graph-connected 0 where it holds nowhere.

    Instead of ``values[mask].mean()`` behind ``if mask.any()``: both read the mask on the host, which on a
    GPU waits for the forward pass queued before them (see ``label_values``). Where the mask is false the
    values get a zero gradient, so what computed them must have a finite gradient there.
    """
    return values.masked_fill(~mask, 0).sum() / mask.sum().clamp_min(1)


def as_float(tensor: Tensor) -> Tensor:
    """Half-precision scores lose the small differences the list-wise losses rank by; compute in float32."""
    return tensor if tensor.dtype in (torch.float32, torch.float64) else tensor.float()
