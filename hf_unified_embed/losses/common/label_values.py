"""Label values checked before a batch is embedded, where reading them does not stall a GPU.

Refusing NaN labels means reading a value on the host (``bool(tensor)``), and on a CUDA device that waits
for every kernel queued before it. Read after the forward pass, it waits for the whole pass, and the GPU
then idles while the host launches the loss and the backward pass. :meth:`EmbeddingLoss.forward
<hf_unified_embed.losses.embedding_loss.EmbeddingLoss.forward>` checks the labels once, before it embeds the
batch, when little more than the batch's copy to the device is queued; the checks inside
``compute_loss_from_embeddings`` (which users may call on embeddings of their own) skip the labels already
checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor

_CHECKED: ContextVar[Tensor | None] = ContextVar("labels checked before embedding", default=None)


@contextmanager
def labels_checked(loss_name: str, labels: Tensor | None) -> Iterator[None]:
    """Refuse non-finite ``labels`` now; inside the block, :func:`checked_before_embedding` is true for them.

    Every loss of the package reads its labels as finite numbers (similarity scores, teacher scores,
    difficulties, 0/1 classes): a NaN or an infinity would only turn the loss and every gradient into NaN.
    """
    if isinstance(labels, Tensor) and labels.is_floating_point() and not bool(torch.isfinite(labels).all()):
        raise ValueError(
            f"{loss_name} got non-finite labels (NaN or infinite); fill or drop those rows before training."
        )
    token = _CHECKED.set(labels)
    try:
        yield
    finally:
        _CHECKED.reset(token)


def checked_before_embedding(labels: Tensor) -> bool:
    """Whether ``labels`` (the very tensor) were checked by the loss's ``forward`` before it embedded the batch."""
    return labels is _CHECKED.get()
