"""Which texts of a batch are identical, so that a duplicate of a row's positive is not scored as its negative.

Identity is decided on the tokenised inputs (the ``input_ids`` the loss receives in ``forward``) rather than
on embeddings: dropout makes two embeddings of one text differ during training, and the token ids are
exact. Duplicates are common in real data (one answer serving several questions, a paraphrase listed
twice), and with in-batch negatives such a duplicate is a *false negative*: the loss pushes the query
away from a text it should match.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from sentence_transformers.util import all_gather, all_gather_padded, get_rank
from torch import Tensor


def text_ids_of(sentence_features: list[dict[str, Any]], gather: bool = False) -> list[Tensor] | None:
    """One integer id per row and column, equal exactly when the tokenised texts are identical.

    Args:
        sentence_features: The tokenised columns of a batch (each with ``input_ids`` and, usually,
            ``attention_mask``).
        gather: Number the texts consistently across processes (the token ids of every process are
            gathered first), for losses that score against candidates of all processes. Needs the same
            number of rows on every process.

    Returns:
        One ``(rows,)`` tensor per column, or ``None`` when the inputs are not padded token sequences
        (then no identity is known and nothing is masked).
    """
    if not all(
        isinstance(features.get("input_ids"), Tensor) and features["input_ids"].ndim == 2
        for features in sentence_features
    ):
        return None
    masks = [
        features["attention_mask"].bool()
        if isinstance(features.get("attention_mask"), Tensor)
        else torch.ones_like(features["input_ids"], dtype=torch.bool)
        for features in sentence_features
    ]
    # Ids are shifted by one so that padding (0 after masking) never equals a real token id.
    tokens = [(features["input_ids"] + 1) * mask for features, mask in zip(sentence_features, masks)]
    width = max(column.size(1) for column in tokens)
    padded = torch.cat([F.pad(column, (0, width - column.size(1))) for column in tokens])
    sizes = [column.size(0) for column in tokens]
    offset = 0
    if gather:
        mask = torch.cat([F.pad(column, (0, width - column.size(1))) for column in masks])
        gathered, _ = all_gather_padded(padded.unsqueeze(-1), mask)
        offset = get_rank() * padded.size(0)
        padded = gathered.squeeze(-1)
    _, inverse = torch.unique(padded, dim=0, return_inverse=True)
    return list(inverse[offset : offset + sum(sizes)].split(sizes))


def gather_ids(ids: Tensor, gather: bool) -> Tensor:
    """``ids`` of every process, concatenated in rank order (as the embeddings are), when ``gather``."""
    return all_gather(ids) if gather else ids


def same_text(row_ids: Tensor, candidate_ids: Tensor) -> Tensor:
    """``(rows, candidates)``: whether candidate ``j`` is the same text as row ``i``.

    ``row_ids`` may carry a trailing axis of several ids per row (e.g. K+ positives); a candidate then
    matches when it equals any of them.
    """
    if row_ids.ndim == 1:
        row_ids = row_ids.unsqueeze(1)
    return (row_ids.unsqueeze(1) == candidate_ids.reshape(1, -1, 1)).any(dim=-1)


def copies_elsewhere(ids: Tensor) -> Tensor:
    """``(rows, rows)``: whether row ``j ≠ i`` holds the same text as row ``i`` (one column against itself)."""
    duplicates = same_text(ids, ids)
    duplicates.fill_diagonal_(False)
    return duplicates
