"""Sharded safetensors output: tensors are buffered up to ``max_shard_size`` and written shard by shard.

File names follow transformers: ``model.safetensors`` when everything fits in one shard, otherwise
``model-00001-of-00003.safetensors`` … plus ``model.safetensors.index.json``. Every shard carries
``{"format": "pt"}`` (which transformers requires) and the caller's extra metadata, such as the
merge recipe.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import TracebackType

import torch
from safetensors.torch import save_file

from hf_unified_embed.merge.loader import SAFETENSORS_FILE, SAFETENSORS_INDEX

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B)?\s*$", re.IGNORECASE)
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
_UNITS["TIB"] = 2**40


def parse_size(size: int | str) -> int:
    """Bytes of ``"2GB"``, ``"500MiB"`` or an int, as transformers' ``max_shard_size`` accepts."""
    if isinstance(size, int) and not isinstance(size, bool):
        value = size
    else:
        match = _SIZE.match(str(size))
        if not match:
            raise ValueError(f"max_shard_size: expected bytes or a size such as '2GB', got {size!r}")
        value = int(float(match[1]) * _UNITS[(match[2] or "B").upper()])
    if value <= 0:
        raise ValueError(f"max_shard_size must be positive, got {size!r}")
    return value


class ShardedSafetensorsWriter:
    """Write tensors of one weights folder as sharded safetensors, at most one shard in memory.

    Args:
        directory: the folder to write into (created if missing).
        max_shard_size: bytes per shard; a single larger tensor gets a shard of its own.
        metadata: string metadata stored in every shard next to ``{"format": "pt"}``.
    """

    def __init__(self, directory: Path, max_shard_size: int | str, metadata: dict[str, str] | None = None) -> None:
        self.directory = directory
        self.max_shard_size = parse_size(max_shard_size)
        self.metadata = {**(metadata or {}), "format": "pt"}
        self._buffer: dict[str, torch.Tensor] = {}
        self._buffer_bytes = 0
        self._shards: list[tuple[Path, list[str]]] = []
        self.total_size = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        if name in self._buffer or any(name in names for _, names in self._shards):
            raise ValueError(f"tensor {name!r} written twice")
        size = tensor.numel() * tensor.element_size()
        if self._buffer and self._buffer_bytes + size > self.max_shard_size:
            self._flush()
        self._buffer[name] = tensor.contiguous()
        self._buffer_bytes += size
        self.total_size += size

    def _flush(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"model-part{len(self._shards) + 1:05d}.safetensors"
        save_file(self._buffer, str(path), metadata=self.metadata)
        self._shards.append((path, list(self._buffer)))
        self._buffer = {}
        self._buffer_bytes = 0

    def close(self) -> list[Path]:
        """Write the last shard, give the shards their final names and write the index if sharded."""
        if self._buffer or not self._shards:
            self._flush()
        if len(self._shards) == 1:
            final = self.directory / SAFETENSORS_FILE
            self._shards[0][0].rename(final)
            return [final]
        count = len(self._shards)
        weight_map: dict[str, str] = {}
        written = []
        for number, (path, names) in enumerate(self._shards, start=1):
            final = self.directory / f"model-{number:05d}-of-{count:05d}.safetensors"
            path.rename(final)
            written.append(final)
            weight_map.update(dict.fromkeys(names, final.name))
        index = {"metadata": {"total_size": self.total_size}, "weight_map": weight_map}
        index_path = self.directory / SAFETENSORS_INDEX
        index_path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return [*written, index_path]

    def __enter__(self) -> ShardedSafetensorsWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
