"""Sharded safetensors output written tensor by tensor straight into the shard files.

Every tensor's shape and dtype is known before the merge starts (the reference's headers), so the
shard layout and each shard's safetensors header are fixed up front and the tensors' bytes are
appended to their shard as they are produced — whole tensors or consecutive blocks of one. Nothing
is buffered beyond what the caller passes in.

File names follow transformers: ``model.safetensors`` when everything fits in one shard, otherwise
``model-00001-of-00003.safetensors`` … plus ``model.safetensors.index.json``. Every shard carries
``{"format": "pt"}`` (which transformers requires) and the caller's extra metadata, such as the
merge recipe. The format is safetensors' own: an 8-byte little-endian header length, the JSON
header (padded with spaces to 8 bytes), then the tensors' bytes in header-offset order; the files
load with ``safetensors.safe_open``.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Sequence
from io import BufferedWriter
from pathlib import Path
from types import TracebackType

import torch

from hf_unified_embed.errors import shown
from hf_unified_embed.merge.loader import SAFETENSORS_FILE, SAFETENSORS_INDEX, TensorInfo

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B)?\s*$", re.IGNORECASE)
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
_UNITS["TIB"] = 2**40
_DTYPE_NAMES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


def parse_size(size: int | str) -> int:
    """Bytes of ``"2GB"``, ``"500MiB"`` or an int, as transformers' ``max_shard_size`` accepts."""
    if isinstance(size, int) and not isinstance(size, bool):
        value = size
    else:
        match = _SIZE.match(str(size))
        if not match:
            raise ValueError(f"max_shard_size: expected bytes or a size such as '2GB', got {shown(size)}")
        value = int(float(match[1]) * _UNITS[(match[2] or "B").upper()])
    if value <= 0:
        raise ValueError(f"max_shard_size must be positive, got {shown(size)}")
    return value


def write_order(tensors: Sequence[tuple[str, TensorInfo]]) -> list[tuple[str, TensorInfo]]:
    """Tensors by decreasing element size, then as given: every tensor starts at an aligned offset.

    safetensors' own writer orders the same way; torch needs no alignment to load, but aligned
    data can be viewed without a copy.
    """
    return sorted(tensors, key=lambda item: -torch.empty((), dtype=item[1].dtype).element_size())


class ShardedSafetensorsWriter:
    """Write the tensors of one weights folder, in :attr:`order`, straight into their shard files.

    Args:
        directory: the folder to write into (created if missing).
        tensors: ``(name, TensorInfo)`` of every tensor the folder will hold.
        max_shard_size: bytes per shard; a single larger tensor gets a shard of its own.
        metadata: string metadata stored in every shard next to ``{"format": "pt"}``.

    Attributes:
        order: the tensors in the order :meth:`write` expects them (see :func:`write_order`).

    Example::

        with ShardedSafetensorsWriter(folder, [("w", TensorInfo((4, 2), torch.float32))], "2GB") as writer:
            writer.write("w", torch.zeros(2, 2))  # the first block …
            writer.write("w", torch.ones(2, 2))  # … and the second
    """

    def __init__(
        self,
        directory: Path,
        tensors: Sequence[tuple[str, TensorInfo]],
        max_shard_size: int | str,
        metadata: dict[str, str] | None = None,
    ) -> None:
        self.directory = directory
        self.order = write_order(tensors)
        if len({name for name, _ in self.order}) != len(self.order):
            raise ValueError("a tensor name is listed twice")
        limit = parse_size(max_shard_size)
        shards: list[list[tuple[str, TensorInfo]]] = [[]]
        size = 0
        for name, info in self.order:
            if shards[-1] and size + info.nbytes > limit:
                shards.append([])
                size = 0
            shards[-1].append((name, info))
            size += info.nbytes
        count = len(shards)
        self.files = [
            directory / (SAFETENSORS_FILE if count == 1 else f"model-{number:05d}-of-{count:05d}.safetensors")
            for number in range(1, count + 1)
        ]
        metadata = {**(metadata or {}), "format": "pt"}
        self._headers = [self._header(shard, metadata) for shard in shards]
        self._shard_of = {name: index for index, shard in enumerate(shards) for name, _ in shard}
        self._sizes = {name: info.nbytes for name, info in self.order}
        self.total_size = sum(self._sizes.values())
        self._position = 0  # index into order of the tensor being written
        self._written = 0  # bytes of it written so far
        self._stream: BufferedWriter | None = None
        self._open_shard = -1

    @staticmethod
    def _header(shard: Sequence[tuple[str, TensorInfo]], metadata: dict[str, str]) -> bytes:
        entries: dict[str, object] = {"__metadata__": metadata}
        offset = 0
        for name, info in shard:
            entries[name] = {
                "dtype": _DTYPE_NAMES[info.dtype],
                "shape": list(info.shape),
                "data_offsets": [offset, offset + info.nbytes],
            }
            offset += info.nbytes
        text = json.dumps(entries, separators=(",", ":"), ensure_ascii=False).encode()
        text += b" " * (-len(text) % 8)
        return struct.pack("<Q", len(text)) + text

    def write(self, name: str, data: torch.Tensor) -> None:
        """Append ``data`` — the whole tensor ``name`` or its next block — to the shard it belongs to."""
        if self._position >= len(self.order) or self.order[self._position][0] != name:
            expected = self.order[self._position][0] if self._position < len(self.order) else "nothing"
            raise ValueError(f"tensor {shown(name)} written out of order; expected {expected}")
        info = self.order[self._position][1]
        if data.dtype != info.dtype:
            raise ValueError(f"tensor {shown(name)}: got {data.dtype}, expected {info.dtype}")
        shard = self._shard_of[name]
        if shard != self._open_shard:
            self._start_shard(shard)
        assert self._stream is not None
        view = data.contiguous().reshape(-1).view(torch.uint8).numpy().data
        if self._written + len(view) > self._sizes[name]:
            raise ValueError(f"tensor {shown(name)}: more bytes than its shape {list(info.shape)} holds")
        self._stream.write(view)
        self._written += len(view)
        if self._written == self._sizes[name]:
            self._position += 1
            self._written = 0

    def _start_shard(self, shard: int) -> None:
        if self._stream is not None:
            self._stream.close()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._stream = self.files[shard].open("wb")
        self._stream.write(self._headers[shard])
        self._open_shard = shard

    def close(self) -> list[Path]:
        """Check that every tensor was written, close the last shard and write the index if sharded."""
        if self._position < len(self.order):
            raise ValueError(f"tensor {shown(self.order[self._position][0])} was not written completely")
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if not self.order:
            return []
        if len(self.files) == 1:
            return list(self.files)
        weight_map = {name: self.files[shard].name for name, shard in self._shard_of.items()}
        index = {"metadata": {"total_size": self.total_size}, "weight_map": dict(sorted(weight_map.items()))}
        index_path = self.directory / SAFETENSORS_INDEX
        index_path.write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
        return [*self.files, index_path]

    def __enter__(self) -> ShardedSafetensorsWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        elif self._stream is not None:
            self._stream.close()
