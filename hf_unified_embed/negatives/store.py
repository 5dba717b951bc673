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
from tqdm.auto import tqdm

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
        chunk: int = 8_192,
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
