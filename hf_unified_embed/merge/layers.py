"""Group tensor names into the "layers" that per-layer merge weights and delta analysis talk about.

A layer is one transformer block (``encoder.layer.3.``, ``layers.3.``, ``encoder.block.3.``,
``h.3.`` …); the embeddings, the final norm, the pooler and every sentence-transformers head
module (``2_Dense/…``) are groups of their own. Whatever matches nothing lands in ``other``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

EMBEDDINGS = "embeddings"
FINAL_NORM = "final_norm"
POOLER = "pooler"
OTHER = "other"

# The block prefix is kept whole ("encoder.layer.3", "decoder.block.3") so that encoder-decoder
# stacks stay apart and the group names are the names a user sees in the checkpoint.
_BLOCK = re.compile(r"^(?:.*/)?(?P<prefix>(?:[\w]+\.)*?(?:layer|layers|block|blocks|h))\.(?P<index>\d+)\.")
_EMBEDDINGS = re.compile(r"(?:^|[./])(?:embeddings|embed_tokens|embed_positions|word_embeddings|wte|wpe|shared)[./]")
_POOLER = re.compile(r"(?:^|[./])pooler[./]")
_FINAL_NORM = re.compile(r"(?:^|[./])(?:norm|ln_f|final_layer_norm|final_layernorm|layernorm|layer_norm)\.\w+$")
_MODULE_FOLDER = re.compile(r"^(?P<folder>[^/]+)/")


def layer_group(name: str) -> str:
    """The group of one tensor name (names of head modules carry their folder: ``2_Dense/linear.weight``)."""
    if match := _BLOCK.match(name):
        return f"{match['prefix']}.{match['index']}"
    if _EMBEDDINGS.search(name):
        return EMBEDDINGS
    if _POOLER.search(name):
        return POOLER
    if _FINAL_NORM.search(name):
        return FINAL_NORM
    if match := _MODULE_FOLDER.match(name):
        return match["folder"]
    return OTHER


def _sort_key(group: str) -> tuple[int, str, int]:
    if group == EMBEDDINGS:
        return (0, "", 0)
    prefix, _, index = group.rpartition(".")
    if prefix and index.isdigit():
        return (1, prefix, int(index))
    order = {FINAL_NORM: 2, POOLER: 3, OTHER: 5}
    return (order.get(group, 4), group, 0)


def group_tensor_names(names: Iterable[str]) -> dict[str, list[str]]:
    """Ordered ``{group: [tensor names]}``: embeddings, blocks in depth order, final norm, pooler, heads, other."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(layer_group(name), []).append(name)
    return {group: groups[group] for group in sorted(groups, key=_sort_key)}


def layer_positions(groups: Iterable[str]) -> dict[str, float]:
    """Where each group sits on mergekit's gradient schedule: block i of a stack of N → i / (N − 1).

    A stack of one block sits at 1, as in mergekit's planner; every group outside the blocks
    (embeddings, final norm, pooler, heads) sits at 0, as mergekit's pre- and post-weights do.
    Each block prefix (``encoder.block``, ``decoder.block``) is a stack of its own.
    """
    stacks: dict[str, list[tuple[int, str]]] = {}
    positions: dict[str, float] = {}
    for group in groups:
        prefix, _, index = group.rpartition(".")
        if prefix and index.isdigit():
            stacks.setdefault(prefix, []).append((int(index), group))
        else:
            positions[group] = 0.0
    for blocks in stacks.values():
        blocks.sort()
        last = len(blocks) - 1
        for rank, (_, group) in enumerate(blocks):
            positions[group] = rank / last if last else 1.0
    return positions
