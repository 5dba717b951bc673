"""Encoding with a progress bar that counts texts, and the time a long encoding will take.

``SentenceTransformer.encode`` draws a bar of batches for one call. An evaluation encodes several lists
(queries, then the corpus; the sentences of an STS set) and a user wants to know how many texts are left:
:func:`encode_with_progress` encodes a list in slices of whole batches under one ``tqdm`` bar
("encoding 5,043 texts"). The texts are ordered longest first before they are sliced, as ``encode`` orders
them itself, so every batch holds the texts it would hold in one ``encode`` call: the same padding, the
same speed, the same embeddings.

:func:`seconds_per_text` times a small sample, so that a command can say before a long run on a CPU how
long it will take (:func:`describe_duration`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

#: Batches encoded per ``encode`` call between two updates of the bar: few enough calls that their fixed
#: cost stays far below the batches' own, often enough that the bar moves every few seconds on a CPU.
BATCHES_PER_UPDATE = 4


def encode_with_progress(
    encode: Callable[[Sequence[Any]], Any],
    texts: Sequence[Any],
    *,
    batch_size: int,
    show_progress_bar: bool = True,
    desc: str | None = None,
) -> Any:
    """``encode(texts)`` in slices of :data:`BATCHES_PER_UPDATE` batches, under a bar counting the texts.

    Args:
        encode: encodes a list of inputs the way ``SentenceTransformer.encode`` does (batching them by
            ``batch_size``, longest first), returning a tensor, an array or a list with a row per input.
        texts: the inputs; strings are ordered by length (longest first) before slicing, as ``encode``
            orders them, other inputs are sliced in their order.
        batch_size: the batch size ``encode`` uses, so that each slice is whole batches.
        show_progress_bar: draw the bar (off: one ``encode`` call, exactly as without this function).
        desc: the bar's text (default: ``encoding N texts``).

    Returns:
        What ``encode`` returns for all of ``texts`` at once, in their order.
    """
    if not show_progress_bar or len(texts) <= batch_size:
        return encode(texts)
    if all(isinstance(text, str) for text in texts):
        # The order encode itself sorts by: a slice of this order is already sorted, so its batches are
        # the batches one call would make.
        order = np.argsort([-len(text) for text in texts], kind="stable")
    else:
        order = np.arange(len(texts))
    step = batch_size * BATCHES_PER_UPDATE
    parts = []
    with tqdm(total=len(texts), desc=desc or f"encoding {len(texts):,} texts", unit="text", leave=False) as bar:
        for start in range(0, len(texts), step):
            chunk = [texts[i] for i in order[start : start + step]]
            parts.append(encode(chunk))
            bar.update(len(chunk))
    return _in_order(_concatenate(parts), np.argsort(order, kind="stable"))


def _concatenate(parts: list[Any]) -> Any:
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(parts)
    if isinstance(first, np.ndarray):
        return np.concatenate(parts)
    return [row for part in parts for row in part]


def _in_order(rows: Any, inverse: np.ndarray) -> Any:
    if isinstance(rows, torch.Tensor):
        return rows[torch.as_tensor(inverse, device=rows.device)]
    if isinstance(rows, np.ndarray):
        return rows[inverse]
    return [rows[i] for i in inverse]


def seconds_per_text(encode: Callable[[Sequence[Any]], Any], sample: Sequence[Any]) -> float:
    """Wall-clock seconds ``encode`` takes per input, timed on ``sample`` (one batch of typical inputs)."""
    if not sample:
        return 0.0
    start = time.perf_counter()
    encode(sample)
    return (time.perf_counter() - start) / len(sample)


def describe_duration(seconds: float) -> str:
    """``seconds`` as a person says it: ``40 s``, ``7 min``, ``2 h 15 min``."""
    if seconds < 90:
        return f"{max(round(seconds), 1)} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"
