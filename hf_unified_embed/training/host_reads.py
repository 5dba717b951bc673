"""Where a training step reads a tensor's value on the host, found on any device (the CPU included).

On a CUDA device, ``tensor.item()``, ``bool(tensor)``, ``tensor.nonzero()`` or ``torch.unique`` copy a result
to the host, and so wait for every kernel queued before them; the GPU then idles until the host has launched
the next ones. Before the forward pass a read waits for little more than the batch's copy to the device;
after it has begun, for the whole pass (docs/training.md, "Reads on the host"). :class:`HostReads` sees
every operator through a ``TorchDispatchMode`` and records the ones whose result the host reads, each with
the innermost Python frame outside torch that asked for it::

    with HostReads() as reads:
        loss(features, labels).backward()
    print(reads.summary())

Every operator then passes through Python: count a step or two, never time them.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: aten operators whose result the host reads (a value, or a size that depends on the values).
HOST_READS = frozenset(
    {
        "_local_scalar_dense",
        "nonzero",
        "nonzero_static",
        "masked_select",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
    }
)
#: Indexing operators, which read the positions of a boolean index on the host (``x[mask]``, ``x[mask] = v``).
_BOOLEAN_INDEXING = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})
_TORCH = str(Path(torch.__file__).parent) + os.sep
_HERE = __file__


@dataclass(frozen=True)
class HostRead:
    """One read: the aten operator, and the innermost frame outside torch that asked for it."""

    operator: str
    filename: str
    lineno: int
    function: str

    @property
    def where(self) -> str:
        return f"{Path(self.filename).name}:{self.lineno} ({self.function})"


class HostReads(TorchDispatchMode):
    """A context manager that records every :class:`HostRead` inside it, in order, in ``reads``."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[HostRead] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name in HOST_READS or (name in _BOOLEAN_INDEXING and _boolean_index(args)):
            self.reads.append(_asked_by(name, sys._getframe(1)))
        return func(*args, **(kwargs or {}))

    def summary(self, steps: int = 1) -> str:
        """One line per place, most reads first, as reads per step."""
        counts = Counter((read.operator, read.where) for read in self.reads)
        return "\n".join(
            f"{count / steps:6.2f}  {operator:<20} {where}" for (operator, where), count in counts.most_common()
        )


def _boolean_index(args: Any) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in indices)


def _asked_by(operator: str, frame: FrameType | None) -> HostRead:
    """The read, placed at the innermost frame that is neither torch's nor this module's."""
    while frame is not None and (frame.f_code.co_filename.startswith(_TORCH) or frame.f_code.co_filename == _HERE):
        frame = frame.f_back
    if frame is None:
        return HostRead(operator, "?", 0, "?")
    return HostRead(operator, frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
