"""How the gradient-cached mode cuts a batch into mini-batches: by rows or by a token budget, over length-sorted rows.

A mini-batch holds the same rows of every input column (they are embedded in one call of the loss's
``embed``). Padded rows are sorted by length, longest first, before they are cut, so a mini-batch pads its
rows only up to the longest of similar lengths, and every column of a mini-batch is trimmed to its own
longest row. With a token budget (``mini_batch_num_tokens``, the option of sentence-transformers' cached
losses since sentence-transformers PR 3862) a mini-batch takes rows while its *padded* token count, summed over the
columns (rows × longest row of each column), stays within the budget, so every mini-batch costs about the
same memory whatever the text lengths; a row longer than the budget on its own forms its own mini-batch.

The plan is computed once per batch, from the token counts read to the host in one transfer per column,
and both passes of the gradient cache embed exactly its mini-batches: the replay cannot cut differently.
The mini-batches are embedded in reverse order of the cut, shortest rows first, so that the one embedded
last, which the engine keeps for the backward pass instead of recomputing it, is the largest.

Differences from sentence-transformers' ``_minibatch_ranges``: it cuts each column on its own, in batch
order (no sorting), and counts real (non-padding) tokens, so a mini-batch of mixed lengths is padded well
beyond the budget; here the budget bounds what is computed. Flattened inputs (``cu_seq_lens_q``, no padding)
cannot be reordered cheaply and are cut in batch order by their real token counts, as sentence-transformers
does.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import torch
from torch import Tensor

from hf_unified_embed.errors import LossOptionError


@dataclass(frozen=True)
class MiniBatchPlan:
    """The mini-batches of one batch, in the order they are embedded.

    Args:
        rows: Number of rows of the batch.
        ranges: ``(begin, end)`` positions of each mini-batch in ``order``.
        order: The batch row at each position (a tensor on the batch's device), or ``None`` for batch order.
        widths: Per mini-batch, the token width each column is cut to (its longest row in the mini-batch),
            or ``None`` to slice the rows as they are (:func:`slice_rows`: flattened inputs, inputs
            without an attention mask).
        tokens: Per mini-batch, the tokens it computes: padded tokens summed over the columns (real tokens
            for flattened inputs).
    """

    rows: int
    ranges: tuple[tuple[int, int], ...]
    order: Tensor | None = None
    widths: tuple[tuple[int, ...], ...] | None = None
    tokens: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.ranges)

    def batch_rows(self, index: int) -> slice | Tensor:
        """The rows of the batch in mini-batch ``index``: a slice, or an index tensor when the rows were sorted."""
        begin, end = self.ranges[index]
        return slice(begin, end) if self.order is None else self.order[begin:end]

    def features(self, sentence_features: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
        """Every column's features of mini-batch ``index``, trimmed to its longest row."""
        begin, end = self.ranges[index]
        if self.widths is None:
            return [slice_rows(column, begin, end) for column in sentence_features]
        rows = self.batch_rows(index)
        return [
            select_rows(column, rows, width, self.rows) for column, width in zip(sentence_features, self.widths[index])
        ]

    def batch_order(self) -> Tensor | None:
        """The index that puts the concatenated mini-batch rows (in embedding order) back into batch order."""
        positions = [position for begin, end in self.ranges for position in range(begin, end)]
        if self.order is None and positions == sorted(positions):
            return None
        concatenated = torch.tensor(positions, device=None if self.order is None else self.order.device)
        if self.order is not None:
            concatenated = self.order[concatenated]
        return torch.argsort(concatenated)


def select_rows(column: dict[str, Any], rows: slice | Tensor, width: int, batch: int) -> dict[str, Any]:
    """The features of ``rows`` (of a ``batch``-row column); token-axis tensors cut to ``width``, batch metadata (``prompt_length``) kept."""
    mask = column["attention_mask"]
    full_width = mask.shape[1]
    selected: dict[str, Any] = {}
    for key, value in column.items():
        if not isinstance(value, Tensor) or value.ndim == 0 or value.shape[0] != batch or key == "prompt_length":
            selected[key] = value
        elif value.ndim >= 2 and value.shape[1] == full_width and width < full_width:
            selected[key] = value[rows, :width]
        else:
            selected[key] = value[rows]
    return selected


def batch_size_of(column: dict[str, Any]) -> int:
    """The rows of one input column: sequences of a flattened column (``cu_seq_lens_q`` holds rows + 1
    offsets), else the first dimension of its ``input_ids`` / ``attention_mask`` or of any tensor."""
    if "cu_seq_lens_q" in column:
        return len(column["cu_seq_lens_q"]) - 1
    for key in ("input_ids", "attention_mask"):
        if isinstance(column.get(key), Tensor):
            return int(column[key].shape[0])
    return next(int(value.shape[0]) for value in column.values() if isinstance(value, Tensor) and value.ndim > 0)


def slice_rows(column: dict[str, Any], begin: int, end: int) -> dict[str, Any]:
    """Rows ``begin:end`` of a column, for the cases :func:`select_rows` does not cover.

    A flattened column (``DataCollatorWithFlattening``: every sequence's tokens concatenated on the last
    axis, ``cu_seq_lens_*`` the offsets) keeps the tokens of those sequences with offsets, ``max_length_*``
    and ``seq_idx`` rebuilt; a padded column without an attention mask slices every tensor whose first
    axis is the rows. Written here rather than taken from sentence-transformers' private ``gradcache``
    helpers, which any release may rename.
    """
    if "cu_seq_lens_q" not in column:
        rows = batch_size_of(column)
        return {
            key: value[begin:end] if isinstance(value, Tensor) and value.ndim > 0 and value.shape[0] == rows else value
            for key, value in column.items()
        }
    offsets = column["cu_seq_lens_q"]
    end = min(end, len(offsets) - 1)
    token_begin, token_end, total = int(offsets[begin]), int(offsets[end]), int(offsets[-1])
    new_offsets = offsets[begin : end + 1] - offsets[begin]
    sliced: dict[str, Any] = {}
    for key, value in column.items():
        if key in ("cu_seq_lens_q", "cu_seq_lens_k"):
            sliced[key] = new_offsets
        elif key in ("max_length_q", "max_length_k"):
            sliced[key] = int((new_offsets[1:] - new_offsets[:-1]).max())
        elif key == "seq_idx":
            sliced[key] = value[..., token_begin:token_end] - begin
        elif isinstance(value, Tensor) and value.ndim >= 1 and value.shape[-1] == total:
            sliced[key] = value[..., token_begin:token_end]  # token-level: input_ids, position_ids, ...
        else:
            sliced[key] = value
    return sliced


def _token_ends(column: dict[str, Any]) -> list[int] | None:
    """Per row, the position after its last attended token (its length under right padding, at least 1);
    ``None`` when the column has no ``(rows, tokens)`` attention mask. One device-to-host transfer."""
    mask = column.get("attention_mask")
    if not isinstance(mask, Tensor) or mask.ndim != 2:
        return None
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    return (mask.bool() * positions).amax(dim=1).clamp(min=1).tolist()


def _real_lengths(column: dict[str, Any]) -> list[int]:
    """Per row, its real (non-padding) tokens: from ``cu_seq_lens_q`` (flattened) or the attention mask."""
    if "cu_seq_lens_q" in column:
        starts = column["cu_seq_lens_q"].tolist()
        return [end - begin for begin, end in pairwise(starts)]
    mask = column.get("attention_mask")
    if not isinstance(mask, Tensor) or mask.ndim != 2:
        raise LossOptionError(
            "mini_batch_num_tokens needs every input column's token counts, but a column has neither an "
            "attention_mask nor cu_seq_lens_q; use mini_batch_size instead."
        )
    return mask.sum(dim=1).tolist()


def plan_minibatches(
    sentence_features: list[dict[str, Any]], mini_batch_size: int | None, mini_batch_num_tokens: int | None
) -> MiniBatchPlan:
    """Cut a batch into mini-batches of ``mini_batch_size`` rows or of at most ``mini_batch_num_tokens``
    tokens (exactly one of them is set), over rows sorted by length where the inputs are padded."""
    rows = batch_size_of(sentence_features[0])
    if any("cu_seq_lens_q" in column for column in sentence_features):
        return _plan_in_batch_order(rows, mini_batch_size, mini_batch_num_tokens, sentence_features)
    ends = [_token_ends(column) for column in sentence_features]
    if any(column is None for column in ends):
        return _plan_in_batch_order(rows, mini_batch_size, mini_batch_num_tokens, sentence_features)
    columns: list[list[int]] = ends  # type: ignore[assignment]

    length = [sum(column[row] for column in columns) for row in range(rows)]
    order = sorted(range(rows), key=lambda row: -length[row])  # stable: equal lengths keep batch order
    cuts: list[tuple[int, int]] = []
    begin = 0
    longest = [0] * len(columns)
    for position, row in enumerate(order):
        grown = [max(old, column[row]) for old, column in zip(longest, columns)]
        if mini_batch_num_tokens is not None:
            full = position > begin and (position - begin + 1) * sum(grown) > mini_batch_num_tokens
        else:
            full = position - begin == mini_batch_size
        if full:
            cuts.append((begin, position))
            begin, grown = position, [column[row] for column in columns]
        longest = grown
    cuts.append((begin, rows))
    cuts.reverse()  # embed the shortest rows first: the last mini-batch embedded (kept, not recomputed) is the largest
    widths = tuple(tuple(max(column[row] for row in order[b:e]) for column in columns) for b, e in cuts)
    device = sentence_features[0]["attention_mask"].device
    return MiniBatchPlan(
        rows=rows,
        ranges=tuple(cuts),
        order=torch.tensor(order, device=device),
        widths=widths,
        tokens=tuple((end - begin) * sum(width) for (begin, end), width in zip(cuts, widths)),
    )


def _plan_in_batch_order(
    rows: int, mini_batch_size: int | None, mini_batch_num_tokens: int | None, sentence_features: list[dict[str, Any]]
) -> MiniBatchPlan:
    """Consecutive rows, for inputs that cannot be sorted: flattened (by real tokens) or without a mask (by rows)."""
    if mini_batch_num_tokens is None:
        assert mini_batch_size is not None
        ranges = [(begin, min(begin + mini_batch_size, rows)) for begin in range(0, rows, mini_batch_size)]
        return MiniBatchPlan(rows=rows, ranges=tuple(ranges))
    lengths = [_real_lengths(column) for column in sentence_features]
    row_tokens = [sum(column[row] for column in lengths) for row in range(rows)]
    ranges = []
    begin, total = 0, 0
    for row, tokens in enumerate(row_tokens):
        if row > begin and total + tokens > mini_batch_num_tokens:
            ranges.append((begin, row))
            begin, total = row, 0
        total += tokens
    ranges.append((begin, rows))
    return MiniBatchPlan(
        rows=rows, ranges=tuple(ranges), tokens=tuple(sum(row_tokens[begin:end]) for begin, end in ranges)
    )
