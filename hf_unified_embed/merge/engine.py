"""The streaming merge engine: one pass over the reference's tensors, each result handed to a sink at once.

Two paths, chosen by the method's kind:

* a :class:`~hf_unified_embed.merge.methods.LinearMergeMethod` is merged **block by block**: for
  each block of ``BLOCK`` elements, every input's slice is read straight into one reusable buffer
  (``preadv``, no memory map), scaled and added into a float32 accumulator (float64 with
  ``precise``), cast to the tensor's dtype, checked for NaN/inf while still in cache and written.
  Memory is a few blocks, whatever the size of the tensors or the number of inputs. An input with
  coefficient 0 is read and checked but not added;
* any other method (:class:`~hf_unified_embed.merge.methods.TensorMergeMethod`: mergekit's and
  users' methods) gets whole tensors: every input's tensor is read, checked and handed over, the
  result is cast, checked and written.

Integer and boolean tensors are copied from the reference. A sink takes the results in its own
order: :class:`FolderSink` appends them to sharded safetensors files, :class:`MemorySink` keeps
them (for evaluating candidates of a merge search without writing them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import torch
from tqdm.auto import tqdm

from hf_unified_embed.errors import MergeError, shown
from hf_unified_embed.merge.checks import all_finite, check_finite, is_mergeable
from hf_unified_embed.merge.loader import LazyCheckpoint, TensorInfo
from hf_unified_embed.merge.methods import LinearMergeMethod, MergeMethod, TensorMergeMethod
from hf_unified_embed.merge.writer import ShardedSafetensorsWriter

#: Elements per block of the linear path: 1 MiB of float32, so that a block, the accumulator and
#: the read buffer stay in the CPU's cache between the passes over them.
BLOCK = 1 << 18


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run torch ops on one thread: the block loop is memory-bound, and an OpenMP fork/join per 1 MiB
    block costs more than it gains (measured on 2 busy cores: 3.8 ms per add with 2 threads, 0.09 ms with 1)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class TensorSink(Protocol):
    """Where merged tensors go: whole, or block after block, in :attr:`order`."""

    order: list[str]

    def write(self, name: str, data: torch.Tensor) -> None: ...


class FolderSink:
    """Sharded safetensors files in a model folder; module sub-folders (``2_Dense/``) get files of their own."""

    def __init__(
        self, root: Path, reference: LazyCheckpoint, max_shard_size: int | str, metadata: dict[str, str]
    ) -> None:
        by_folder: dict[str, list[tuple[str, TensorInfo]]] = {}
        for name in reference.names:
            folder, _, key = name.rpartition("/")
            by_folder.setdefault(folder, []).append((key, reference.info(name)))
        self.writers = {
            folder: ShardedSafetensorsWriter(root / folder, items, max_shard_size, metadata)
            for folder, items in by_folder.items()
        }
        self.order = [
            f"{folder}/{key}" if folder else key for folder, writer in self.writers.items() for key, _ in writer.order
        ]

    def write(self, name: str, data: torch.Tensor) -> None:
        folder, _, key = name.rpartition("/")
        self.writers[folder].write(key, data)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


class MemorySink:
    """The merged tensors in memory, by name (``"2_Dense/linear.weight"`` for head modules)."""

    def __init__(self, reference: LazyCheckpoint) -> None:
        self.order = list(reference.names)
        self._infos = {name: reference.info(name) for name in reference.names}
        self.tensors: dict[str, torch.Tensor] = {}
        self._filled: dict[str, int] = {}

    def write(self, name: str, data: torch.Tensor) -> None:
        if name not in self.tensors:
            info = self._infos[name]
            self.tensors[name] = torch.empty(info.shape, dtype=info.dtype)
            self._filled[name] = 0
        flat, start = self.tensors[name].view(-1), self._filled[name]
        flat[start : start + data.numel()].copy_(data.reshape(-1))
        self._filled[name] = start + data.numel()


class _LinearStream:
    """The block-wise path of linear methods, with its buffers reused from tensor to tensor."""

    def __init__(self, checkpoints: Mapping[Path, LazyCheckpoint], sink: TensorSink, dtype: torch.dtype) -> None:
        self.checkpoints, self.sink, self.dtype = checkpoints, sink, dtype
        self._accumulators: dict[torch.dtype, torch.Tensor] = {}
        self._buffers: dict[torch.dtype, torch.Tensor] = {}
        self._cast: dict[torch.dtype, torch.Tensor] = {}

    def _buffer(self, dtype: torch.dtype, pool: dict[torch.dtype, torch.Tensor]) -> torch.Tensor:
        if dtype not in pool:
            pool[dtype] = torch.empty(BLOCK, dtype=dtype)
        return pool[dtype]

    def merge(self, name: str, info: TensorInfo, coefficients: Mapping[Path, float]) -> None:
        terms = list(coefficients.items())
        read_buffer = self._buffer(info.dtype, self._buffers)
        # float64 tensors are summed in float64 whatever ``precise`` says: float32 would lose their digits.
        accumulator = self._buffer(torch.float64 if info.dtype == torch.float64 else self.dtype, self._accumulators)
        for start in range(0, info.numel, BLOCK):
            count = min(BLOCK, info.numel - start)
            total = accumulator[:count]
            added = False
            for path, coefficient in terms:
                block = self.checkpoints[path].read_block(name, read_buffer[:count], start)
                if coefficient == 0.0:
                    if not all_finite(block):  # not added, but every input is checked
                        self._raise_for_input(name, path)
                    continue
                if block.dtype != total.dtype:
                    block = self._buffer(total.dtype, self._cast)[:count].copy_(block)
                if added:
                    total.add_(block, alpha=coefficient)
                else:
                    torch.mul(block, coefficient, out=total)
                    added = True
            if not added:
                total.zero_()
            result = total if info.dtype == total.dtype else read_buffer[:count].copy_(total)
            if not all_finite(result):
                # NaN/inf in an added input reaches the sum, so inputs are looked at only now.
                for path, _ in terms:
                    if not all_finite(self.checkpoints[path].read_block(name, read_buffer[:count], start)):
                        self._raise_for_input(name, path)
                raise MergeError(f"the merged tensor {shown(name)} holds NaN/inf values in {info.dtype} (overflow)")
            self.sink.write(name, result)

    def _raise_for_input(self, name: str, path: Path) -> None:
        checkpoint = self.checkpoints[path]
        check_finite(checkpoint.get_tensor(name), name, checkpoint.file_of(name))
        raise AssertionError("a block with NaN/inf was found but the whole tensor is finite")


def stream_merge(
    method: MergeMethod,
    checkpoints: Mapping[Path, LazyCheckpoint],
    reference: LazyCheckpoint,
    groups: Mapping[str, Sequence[str]],
    sink: TensorSink,
    *,
    precise: bool = False,
    show_progress: bool = True,
) -> None:
    """Merge every tensor of ``reference`` with ``method`` into ``sink`` (inputs already checked for compatibility).

    Args:
        precise: accumulate / compute in float64 instead of float32.
    """
    group_of = {name: group for group, names in groups.items() for name in names}
    dtype = torch.float64 if precise else torch.float32
    linear = _LinearStream(checkpoints, sink, dtype) if isinstance(method, LinearMergeMethod) else None
    with (
        _one_thread() if linear is not None else contextlib.nullcontext(),
        tqdm(total=len(sink.order), desc=f"Merging ({method.name})", unit="tensor", disable=not show_progress) as bar,
    ):
        for name in sink.order:
            info = reference.info(name)
            if not is_mergeable(info.dtype):
                sink.write(name, reference.get_tensor(name))
            elif linear is not None:
                assert isinstance(method, LinearMergeMethod)
                linear.merge(name, info, method.coefficients(group_of[name]))
            else:
                assert isinstance(method, TensorMergeMethod)
                sink.write(name, _merge_whole(method, name, group_of[name], info, checkpoints, dtype))
            bar.update()


def _merge_whole(
    method: TensorMergeMethod,
    name: str,
    group: str,
    info: TensorInfo,
    checkpoints: Mapping[Path, LazyCheckpoint],
    dtype: torch.dtype,
) -> torch.Tensor:
    read: dict[Path, torch.Tensor] = {}

    def reader(path: Path) -> torch.Tensor:
        if path not in read:
            checkpoint = checkpoints[path]
            read[path] = check_finite(checkpoint.get_tensor(name), name, checkpoint.file_of(name))
        return read[path]

    merged = method.merge_tensor(name, group, reader, dtype)
    for path in method.input_paths():
        reader(path)  # an input the method did not need for this tensor is still checked
    result = merged.to(info.dtype)
    if not all_finite(result):
        raise MergeError(f"the {method.name} result for tensor {shown(name)} holds NaN/inf values in {info.dtype}")
    return result
