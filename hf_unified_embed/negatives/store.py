"""Embeddings kept on disk and read back in blocks, so memory does not grow with the corpus.

An :class:`EmbeddingFile` is a raw row-major file of L2-normalised float32 or float16 vectors.
Blocks are read with ordinary file reads rather than a memory map: the pages read stay in the
operating system's page cache and never count in the process's resident memory, however many
passes over the corpus a search makes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import torch
from tqdm.auto import tqdm

from hf_unified_embed.utils.distributed_encode import EncodingProcesses, slice_bounds

EmbeddingDtype = Literal["float32", "float16"]
#: ``texts -> (len(texts), dim)`` normalised embeddings, e.g. ``partial(model.encode_document, prompt=...)``.
Encoder = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class EmbeddingFile:
    """``rows`` embeddings of width ``dim`` stored as ``dtype`` in ``path``."""

    path: Path
    rows: int
    dim: int
    dtype: EmbeddingDtype = "float32"

    @property
    def row_bytes(self) -> int:
        return self.dim * np.dtype(self.dtype).itemsize

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as float32 ``(stop − start, dim)``."""
        stop = min(stop, self.rows)
        count = max(stop - start, 0)
        block = np.fromfile(self.path, dtype=self.dtype, count=count * self.dim, offset=start * self.row_bytes)
        return block.reshape(count, self.dim).astype(np.float32, copy=False)

    @classmethod
    def encode(
        cls,
        path: Path,
        texts: pa.Array,
        encoder: Encoder,
        *,
        dtype: EmbeddingDtype = "float32",
        chunk: int = 32_768,
        description: str = "Encoding",
        show_progress_bar: bool | None = None,
    ) -> EmbeddingFile:
        """Encode the strings of an Arrow array in chunks, appending each chunk's vectors to ``path``."""
        dim = 0
        with (
            path.open("wb") as handle,
            tqdm(total=len(texts), unit="text", desc=description, disable=show_progress_bar is False) as progress,
        ):
            for start in range(0, len(texts), chunk):
                batch = texts.slice(start, chunk).to_pylist()
                vectors = np.asarray(encoder(batch))
                dim = vectors.shape[1]
                handle.write(np.ascontiguousarray(vectors, dtype=dtype).tobytes())
                progress.update(len(batch))
        return cls(path, len(texts), dim, dtype)

    def gather(self, path: Path, total: int, processes: EncodingProcesses, *, chunk: int = 32_768) -> EmbeddingFile:
        """The whole file on every process, from each process's slice (this file: rows :meth:`EncodingProcesses.bounds`
        of ``total``), exchanged ``chunk`` rows of every slice at a time so that memory stays bounded.

        Args:
            path: where the whole file is written (on this process's disk).
            total: rows of the whole file.
            processes: the processes whose slices make up the whole, in rank order.
            chunk: rows of each slice exchanged per collective.

        Returns:
            The whole file (this file itself for one process).
        """
        if not processes.distributed:
            return self
        # A process whose slice is empty knows no width: it takes the others'.
        dim = int(processes.all_reduce(torch.tensor([self.dim]), "max").item())
        slices = [slice_bounds(total, rank, processes.world_size) for rank in range(processes.world_size)]
        largest = max(stop - start for start, stop in slices)
        with path.open("wb") as handle:
            handle.truncate(total * dim * np.dtype(self.dtype).itemsize)
            for offset in range(0, largest, chunk):
                block = np.zeros((min(chunk, largest - offset), dim), dtype=self.dtype)
                mine = self.read(offset, offset + len(block)) if self.rows else np.zeros((0, dim), np.float32)
                block[: len(mine)] = mine
                for (start, stop), part in zip(slices, processes.all_gather(torch.from_numpy(block))):
                    rows = max(0, min(len(block), stop - start - offset))
                    handle.seek((start + offset) * dim * np.dtype(self.dtype).itemsize)
                    handle.write(part.numpy()[:rows].tobytes())
        return EmbeddingFile(path, total, dim, self.dtype)
