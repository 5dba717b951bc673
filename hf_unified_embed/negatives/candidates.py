"""A mined task's candidate documents: the shared corpus (:class:`ExternalCorpus`) and the task's own texts.

Documents are numbered once per task: the shared corpus first (``0..len(shared) - 1``), then the task's own
distinct positives and negatives that are not in it (:class:`TaskDocuments`). Every process of a launched
run numbers them alike, and embeds only its slice of each part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hf_unified_embed.negatives.store import EmbeddingDtype, EmbeddingFile, Encoder
from hf_unified_embed.utils.distributed_encode import ONE_PROCESS, EncodingProcesses

if TYPE_CHECKING:
    from collections.abc import Sequence


@dataclass
class ExternalCorpus:
    """Extra candidate documents shared by every mined task (e.g. a BEIR ``corpus.jsonl``), embedded once per prompt."""

    texts: pa.Array
    source: str = "corpus"
    _embedded: dict[str, tuple[int, EmbeddingFile]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_texts(cls, texts: Sequence[str] | pa.Array, source: str = "corpus") -> ExternalCorpus:
        array = texts if isinstance(texts, pa.Array) else pa.array(list(texts), type=pa.string())
        return cls(pc.unique(array.cast(pa.string())), source)

    def embedded(
        self,
        prompt: str,
        encoder: Encoder,
        scratch: Path,
        dtype: EmbeddingDtype,
        show_progress_bar: bool | None,
        processes: EncodingProcesses = ONE_PROCESS,
    ) -> tuple[int, EmbeddingFile]:
        """This process's slice of the corpus embedded with ``prompt``, and the id of its first document
        (encoded on first use, then reused by every task with that prompt)."""
        if prompt not in self._embedded:
            start, stop = processes.bounds(len(self.texts))
            self._embedded[prompt] = (
                start,
                EmbeddingFile.encode(
                    scratch / f"corpus-{len(self._embedded)}.embeddings",
                    self.texts.slice(start, stop - start),
                    encoder,
                    dtype=dtype,
                    description="Encoding corpus",
                    show_progress_bar=processes.show_progress(show_progress_bar),
                ),
            )
        return self._embedded[prompt]


def positions(values: pa.Array, haystack: pa.Array) -> np.ndarray:
    """Index in ``haystack`` (distinct texts) of each of ``values``, -1 where absent.

    The hash table is built over ``values`` (one task's texts) and ``haystack`` is only scanned, so a
    large shared corpus is never hashed or copied again.
    """
    positions = np.full(len(values), -1, dtype=np.int64)
    hits = np.asarray(pc.index_in(haystack, value_set=values).fill_null(-1), dtype=np.int64)
    present = np.flatnonzero(hits >= 0)
    positions[hits[present]] = present
    return positions


@dataclass
class TaskDocuments:
    """One task's candidate documents: the shared corpus (ids ``0..len(shared)-1``), then the task's own
    distinct documents that are not in it (``own``), in order of first appearance.

    The shared corpus is referenced, not concatenated with the task's texts: at a million passages
    each copy of the texts is about as large as everything else the miner holds.
    """

    shared: pa.Array
    own: pa.Array
    #: Document id of every text of the task's ``positives + negatives``, in that order.
    task_codes: np.ndarray

    @classmethod
    def of_task(cls, shared: pa.Array, task_texts: pa.Array) -> TaskDocuments:
        encoded = task_texts.dictionary_encode()
        distinct = encoded.dictionary
        in_shared = positions(distinct, shared)
        new = in_shared < 0
        ids = np.where(new, len(shared) + np.cumsum(new) - 1, in_shared)
        codes = ids[np.asarray(encoded.indices, dtype=np.int64)]
        return cls(shared, distinct.filter(pa.array(new)), codes)

    def __len__(self) -> int:
        return len(self.shared) + len(self.own)

    def ids_of(self, texts: pa.Array) -> np.ndarray:
        """Document id of each of ``texts``, -1 where it is no document."""
        in_own = np.asarray(pc.index_in(texts, value_set=self.own).fill_null(-1), dtype=np.int64)
        in_shared = positions(texts, self.shared)
        return np.where(in_shared >= 0, in_shared, np.where(in_own >= 0, in_own + len(self.shared), -1))

    def texts(self, ids: np.ndarray) -> list[str]:
        ids = np.asarray(ids, dtype=np.int64)
        result = np.empty(len(ids), dtype=object)
        from_shared = ids < len(self.shared)
        result[from_shared] = self.shared.take(pa.array(ids[from_shared])).to_pylist()
        result[~from_shared] = self.own.take(pa.array(ids[~from_shared] - len(self.shared))).to_pylist()
        return result.tolist()
