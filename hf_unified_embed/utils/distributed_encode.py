"""Encoding shared by the processes of a launched run: each encodes a contiguous slice, the slices are exchanged.

Under ``torchrun`` / ``accelerate launch`` / ``python -m hf_unified_embed.cli.launch`` every process runs the
same command. :func:`launched_processes` joins them in a ``torch.distributed`` group and gives an
:class:`EncodingProcesses`: which slice of any list of texts this process encodes (:meth:`~EncodingProcesses.bounds`,
contiguous, sizes differing by at most one) and the collectives that put the slices back together.

The group is always ``gloo``, whatever the model's device: what is exchanged lives on the host (embeddings
written to disk, the top-k of a block of queries, metrics), and gloo reaches every node over TCP. Without a
launcher (``WORLD_SIZE`` unset or 1) :func:`launched_processes` gives :data:`ONE_PROCESS`, whose collectives
return their input: the code that encodes is the same for one process and for many.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from hf_unified_embed.utils.processes import world_size

#: How long a collective waits for the slowest process: a process encoding a large slice of a corpus on a
#: CPU, while another has finished its own, must not time out (torch's default for gloo is 30 minutes).
COLLECTIVE_TIMEOUT = datetime.timedelta(hours=6)


def slice_bounds(count: int, rank: int, processes: int) -> tuple[int, int]:
    """``(start, stop)`` of process ``rank``'s contiguous share of ``count`` rows: the first ``count % processes``
    shares have one row more, so that every row belongs to exactly one process, in order."""
    base, extra = divmod(count, processes)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


@dataclass(frozen=True)
class EncodingProcesses:
    """This process's place among the processes that share an encoding job.

    Attributes:
        rank: this process's global rank (0 writes outputs and draws progress bars).
        world_size: how many processes share the work.
    """

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Whether this process writes the outputs and prints (global rank 0)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def bounds(self, count: int) -> tuple[int, int]:
        """``(start, stop)`` of this process's slice of ``count`` rows (:func:`slice_bounds`)."""
        return slice_bounds(count, self.rank, self.world_size)

    def show_progress(self, show_progress_bar: bool | None) -> bool | None:
        """``show_progress_bar`` on the main process, ``False`` on the others (one set of bars per run)."""
        return show_progress_bar if self.is_main else False

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every process's ``tensor`` (each the same shape and dtype), in rank order; on the host."""
        if not self.distributed:
            return [tensor]
        local = tensor.detach().cpu().contiguous()
        gathered = [torch.empty_like(local) for _ in range(self.world_size)]
        torch.distributed.all_gather(gathered, local)
        return gathered

    def gather_rows(self, rows: np.ndarray | torch.Tensor, count: int) -> torch.Tensor:
        """The whole ``(count, ...)`` array from each process's slice ``rows`` (its :meth:`bounds` of ``count``).

        The slices differ by at most one row; each is padded to the largest before the exchange.
        """
        local = torch.as_tensor(rows).detach().cpu()
        if not self.distributed:
            return local
        largest = slice_bounds(count, 0, self.world_size)
        size = largest[1] - largest[0]
        padded = local.new_zeros((size, *local.shape[1:]))
        padded[: local.size(0)] = local
        parts = self.all_gather(padded)
        pieces = []
        for rank, part in enumerate(parts):
            start, stop = slice_bounds(count, rank, self.world_size)
            pieces.append(part[: stop - start])
        return torch.cat(pieces)

    def all_reduce(self, tensor: torch.Tensor, op: Literal["sum", "max"]) -> torch.Tensor:
        """``tensor`` reduced over the processes with ``op`` (``"sum"`` or ``"max"``), on the host."""
        if not self.distributed:
            return tensor
        local = tensor.detach().cpu().contiguous().clone()
        torch.distributed.all_reduce(
            local, op=torch.distributed.ReduceOp.SUM if op == "sum" else torch.distributed.ReduceOp.MAX
        )
        return local

    def barrier(self) -> None:
        """Wait until every process has reached this point."""
        if self.distributed:
            torch.distributed.barrier()


#: One process alone: every text is its own to encode, and every collective returns its input.
ONE_PROCESS = EncodingProcesses()


@contextlib.contextmanager
def launched_processes() -> Iterator[EncodingProcesses]:
    """The processes of this launched run in a ``gloo`` group, or :data:`ONE_PROCESS` without a launcher.

    The group is joined from the launcher's environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT``, which torchrun and accelerate export) unless one is already open, and closed on the way out
    only if it was opened here.

    Yields:
        :class:`EncodingProcesses` of this process.
    """
    if world_size() <= 1:
        yield ONE_PROCESS
        return
    dist = torch.distributed
    opened = not dist.is_initialized()
    if opened:
        dist.init_process_group("gloo", timeout=COLLECTIVE_TIMEOUT)
    try:
        yield EncodingProcesses(dist.get_rank(), dist.get_world_size())
    finally:
        if opened and dist.is_initialized():
            dist.destroy_process_group()


def encode_shared(
    encode: Callable[..., Any],
    texts: Sequence[Any],
    processes: EncodingProcesses,
    **kwargs: Any,
) -> Any:
    """``encode(texts, **kwargs)`` with each process encoding its slice, the result whole on every process.

    Args:
        encode: ``model.encode`` / ``encode_query`` / ``encode_document`` or another callable of that form.
        texts: the inputs, in the order of the result's rows.
        processes: the processes that share the work (:data:`ONE_PROCESS`: ``encode`` is called as is).
        **kwargs: passed to ``encode``. ``convert_to_tensor=True`` gives a tensor on this process's device,
            ``convert_to_numpy=False`` a list of tensors, otherwise a numpy array, as ``encode`` does.

    Returns:
        The embeddings of every text, in order, in the form ``encode`` returns them.
    """
    if not processes.distributed or not len(texts):  # every process knows the length: nothing to exchange
        return encode(texts, **kwargs)
    # The processes agree on which texts to encode, not always on their order: sentence-transformers' evaluators
    # list a set of texts, whose order follows the process's own string hashing (PYTHONHASHSEED). Slices of
    # the sorted texts are the same texts on every process.
    texts = list(texts)
    order = sorted(range(len(texts)), key=texts.__getitem__) if all(isinstance(t, str) for t in texts) else None
    ordered = texts if order is None else [texts[i] for i in order]
    start, stop = processes.bounds(len(texts))
    part = encode(ordered[start:stop], **kwargs)
    as_list = isinstance(part, list)
    on_device = isinstance(part, torch.Tensor)
    if as_list:
        local = torch.stack(part) if part else None
    else:
        local = torch.as_tensor(part)
    # A process whose slice is empty still takes part in the exchange: its width comes from the others.
    width = processes.all_reduce(torch.tensor([0 if local is None or local.numel() == 0 else local.size(-1)]), "max")
    dtype = torch.float32 if local is None else local.dtype
    if local is None or local.numel() == 0:
        local = torch.zeros((0, int(width.item())))
    # Exchanged as float32 whatever the precision: every process sends the same dtype, an empty slice too.
    whole = processes.gather_rows(local.float(), len(texts)).to(dtype)
    if order is not None:
        whole = whole[torch.argsort(torch.tensor(order, dtype=torch.long))]
    if as_list:
        device = part[0].device if part else torch.device("cpu")
        return list(whole.to(device).unbind(0))
    if on_device:
        return whole.to(part.device)
    return whole.numpy()
