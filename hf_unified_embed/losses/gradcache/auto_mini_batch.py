"""``"auto"`` mini-batch sizes: the largest mini-batch whose activations fit a memory budget, sized once.

At the first step of a loss whose ``mini_batch_size`` or ``mini_batch_num_tokens`` is ``"auto"``, the
longest rows of the batch are embedded twice with autograd on, as ``k`` rows and as the same rows twice
(``2k``), and the bytes of the tensors autograd saves for the backward pass are counted
(``torch.autograd.graph.saved_tensors_hooks``; parameters, buffers and storages already counted are
left out). The difference between the two probes is the activation memory of ``k`` rows, free of fixed
costs (weights cast by autocast, workspaces): divided by their padded tokens it gives the bytes per
token, the same on every device and deterministic. The budget is ``mini_batch_memory_budget`` bytes, or by
default a share of the free device memory (CUDA) or of the available RAM (otherwise), less the memory the
first optimiser step will still claim. Under ``torch.distributed`` every process probes its own shard and
the smallest choice is kept by all (one collective, at the first step only). The choice is logged and kept
for the rest of the run.

The probes run in ``no_sync`` under DDP and with the random state forked, so the training run draws the
same dropout masks as with the chosen size given by hand.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import psutil
import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from hf_unified_embed.errors import LossOptionError, shown
from hf_unified_embed.losses.gradcache.minibatches import plan_minibatches, select_rows
from hf_unified_embed.losses.gradcache.protocol import CachedLoss

logger = logging.getLogger(__name__)

AUTO = "auto"
#: Rows of the smaller probe (the larger one has twice as many): the probe itself must fit any budget.
PROBE_ROWS = 1
#: Share of the free memory a default budget takes.
SAFETY = 0.8
#: Peak activation memory of a mini-batch's forward and backward pass over the bytes autograd saves in
#: the forward pass (temporaries of the forward pass and the gradients of the backward pass come on top).
PEAK_OVER_SAVED = 1.25
#: Per trainable parameter byte, what the first optimiser step still allocates: gradients and AdamW's two moments.
OPTIMISER_BYTES_PER_PARAMETER_BYTE = 3


@dataclass(frozen=True)
class AutoMiniBatch:
    """The mini-batch size chosen by ``"auto"`` and the measurements it comes from.

    Args:
        mini_batch_size: Rows per mini-batch (when ``mini_batch_size="auto"``).
        mini_batch_num_tokens: Token budget per mini-batch (when ``mini_batch_num_tokens="auto"``).
        bytes_per_token: Measured activation bytes saved for the backward pass per padded token.
        memory_budget: Bytes the activations of one mini-batch may take.
        budget_source: Where the budget comes from.
    """

    mini_batch_size: int | None
    mini_batch_num_tokens: int | None
    bytes_per_token: float
    memory_budget: int
    budget_source: str

    def describe(self) -> str:
        chosen = (
            f"mini_batch_size='auto' chose {self.mini_batch_size} rows"
            if self.mini_batch_size is not None
            else f"mini_batch_num_tokens='auto' chose {self.mini_batch_num_tokens} tokens"
        )
        return (
            f"{chosen} per mini-batch: {self.bytes_per_token / 1024:.1f} KiB of activations saved per token "
            f"(measured), x{PEAK_OVER_SAVED} for the peak, within a budget of {self.memory_budget / 2**20:.0f} MiB "
            f"({self.budget_source})"
        )


def _saved_activation_bytes(
    loss: CachedLoss, features: list[dict[str, Any]], context: Any, rows: slice | Tensor
) -> int:
    """Bytes autograd saves for the backward pass while ``loss`` embeds ``features`` (not parameters or buffers)."""
    own = {tensor.untyped_storage().data_ptr() for tensor in (*loss.parameters(), *loss.buffers())}
    saved: dict[int, int] = {}

    def pack(tensor: Tensor) -> Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in own:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    model = getattr(loss.model, "_orig_mod", loss.model)
    devices = sorted(
        {t.device.index or 0 for f in features for t in f.values() if isinstance(t, Tensor) and t.is_cuda}
    )
    no_sync = model.no_sync() if isinstance(model, DistributedDataParallel) else nullcontext()
    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)
    with torch.random.fork_rng(devices=devices), torch.enable_grad(), no_sync, hooks:
        loss.embed(features, context, rows)
    return sum(saved.values())


def _default_budget(loss: CachedLoss, device: torch.device) -> tuple[int, str]:
    trainable = sum(p.numel() * p.element_size() for p in loss.parameters() if p.requires_grad)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        source = "free CUDA memory"
    elif device.type in ("cpu", "mps"):  # MPS: the GPU shares the system's memory
        free = psutil.virtual_memory().available
        source = "available RAM"
    else:
        raise LossOptionError(
            f"mini_batch 'auto' cannot read the free memory of a {shown(device.type)} device; give "
            "mini_batch_memory_budget (bytes) or a fixed mini_batch_size / mini_batch_num_tokens."
        )
    budget = int(SAFETY * (free - OPTIMISER_BYTES_PER_PARAMETER_BYTE * trainable))
    if budget <= 0:
        raise LossOptionError(
            f"mini_batch 'auto' found no memory for activations ({free / 2**20:.0f} MiB of {source}, of which "
            f"{OPTIMISER_BYTES_PER_PARAMETER_BYTE}x the {trainable / 2**20:.0f} MiB of trainable parameters go to "
            "gradients and optimiser state); give mini_batch_memory_budget (bytes) or a fixed size."
        )
    return budget, f"{SAFETY:.0%} of the {source} less {OPTIMISER_BYTES_PER_PARAMETER_BYTE}x the trainable parameters"


def _longest_row_tokens(loss: CachedLoss, sentence_features: list[dict[str, Any]]) -> int:
    """Tokens of a row as long as a row can be: every column at the model's ``max_seq_length`` (or, for a model
    without one, at this batch's width)."""
    model = getattr(loss.model, "module", loss.model)
    limit = getattr(getattr(model, "_orig_mod", model), "max_seq_length", None)
    total = 0
    for column in sentence_features:
        mask = column.get("attention_mask")
        width = mask.shape[-1] if isinstance(mask, Tensor) else column["input_ids"].shape[-1]
        total += int(limit) if isinstance(limit, int) else int(width)
    return total


def _bytes_per_token(loss: CachedLoss, sentence_features: list[dict[str, Any]], context: Any) -> float:
    """Activation bytes per padded token on the batch's longest rows: ``k`` rows against the same rows twice."""
    plan = plan_minibatches(sentence_features, PROBE_ROWS, None)
    index = len(plan) - 1  # a plan embeds its longest rows last
    rows = plan.batch_rows(index)
    single = plan.features(sentence_features, index)
    tokens = plan.tokens[index] if plan.tokens else sum(int(column["input_ids"].numel()) for column in single)
    once = _saved_activation_bytes(loss, single, context, rows)
    if plan.widths is None or not isinstance(rows, Tensor):
        return once / tokens  # flattened inputs cannot repeat rows: fixed costs count too, on the safe side
    twice = torch.cat([rows, rows])
    double = [
        select_rows(column, twice, width, plan.rows) for column, width in zip(sentence_features, plan.widths[index])
    ]
    return max(_saved_activation_bytes(loss, double, context, twice) - once, 1) / tokens


def device_of(sentence_features: list[dict[str, Any]]) -> torch.device:
    return next(t.device for column in sentence_features for t in column.values() if isinstance(t, Tensor))


def _smallest_across_processes(chosen: int, device: torch.device) -> tuple[int, int]:
    """The smallest of every process's choice, and the number of processes: each probed its own shard (and,
    by default, its own free memory), but the run keeps one size, which must fit on every device."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return chosen, 1
    value = torch.tensor([chosen], dtype=torch.int64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return int(value.item()), dist.get_world_size()


def choose_auto(
    loss: CachedLoss, sentence_features: list[dict[str, Any]], context: Any, memory_budget: int | None
) -> AutoMiniBatch:
    """Measure the activation bytes per token on the batch's longest rows and size the mini-batches to the budget."""
    bytes_per_token = _bytes_per_token(loss, sentence_features, context)
    if memory_budget is None:
        memory_budget, source = _default_budget(loss, device_of(sentence_features))
    else:
        source = "mini_batch_memory_budget"
    tokens_in_budget = int(memory_budget / (bytes_per_token * PEAK_OVER_SAVED))
    if loss.mini_batch_size == AUTO:
        chosen = max(1, tokens_in_budget // _longest_row_tokens(loss, sentence_features))
    else:
        chosen = max(1, tokens_in_budget)
    chosen, processes = _smallest_across_processes(chosen, device_of(sentence_features))
    if processes > 1:
        source += f"; the smallest choice of {processes} processes"
    size, num_tokens = (chosen, None) if loss.mini_batch_size == AUTO else (None, chosen)
    choice = AutoMiniBatch(size, num_tokens, bytes_per_token, memory_budget, source)
    logger.info("%s: %s", type(loss).__name__, choice.describe())
    return choice
