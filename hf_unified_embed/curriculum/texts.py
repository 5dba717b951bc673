"""Every distinct teacher input of a unified dataset, encoded once (and optionally in shards).

A teacher input is an ``(instruction, text)`` pair: queries take their task's ``query_instruction``,
positives and negatives its ``document_instruction`` — the per-task prompts the training bridge
gives sentence-transformers. The same answer sentence appearing in many rows (WikiQA, TrecQA) or the
same sentence as query and document under the same instruction is encoded once. Deduplication runs
in Arrow (``dictionary_encode``), not per row in Python.

Large inputs are split into ``n`` strided shards of the distinct inputs; each shard is encoded by
its own process into a safetensors file that records a fingerprint of the inputs and the teacher,
so a merge refuses shards made from other data or another model.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from datasets import Dataset
from safetensors import safe_open
from safetensors.numpy import load_file, save_file
from tqdm.auto import tqdm

from hf_unified_embed.errors import InputError, InputNotFoundError
from hf_unified_embed.schema import task_instruction
from hf_unified_embed.utils.distributed_encode import ONE_PROCESS, EncodingProcesses, encode_shared
from hf_unified_embed.utils.outputs import StagedOutput

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

#: Texts handed to ``model.encode`` per call: large enough for its length sorting to pay off.
ENCODE_CHUNK_BATCHES = 128


@dataclass(frozen=True)
class TaskTextIds:
    """The distinct-input ids of one task's rows; list columns as CSR ``(offsets, ids)`` arrays."""

    query_ids: np.ndarray
    positive_offsets: np.ndarray
    positive_ids: np.ndarray
    negative_offsets: np.ndarray
    negative_ids: np.ndarray

    @property
    def num_rows(self) -> int:
        return int(self.query_ids.shape[0])


@dataclass(frozen=True)
class DistinctTexts:
    """The distinct ``(instruction, text)`` inputs of a set of tasks and, per task, which rows use which.

    Attributes:
        prompts: distinct instructions; input ``k`` is encoded with ``prompts[prompt_index[k]]``.
        texts: the distinct inputs' texts, grouped by prompt.
        prompt_index: ``(n,)`` prompt of each input.
        tasks: per task name, the row-to-input ids.
        total_references: texts referenced by all rows together (before deduplication).
    """

    prompts: list[str]
    texts: list[str]
    prompt_index: np.ndarray
    tasks: dict[str, TaskTextIds]
    total_references: int

    def __len__(self) -> int:
        return len(self.texts)

    @classmethod
    def from_tasks(cls, tasks: Mapping[str, Dataset]) -> DistinctTexts:
        """Collect and deduplicate the teacher inputs of a ``{task: Dataset}`` mapping (e.g. a ``DatasetDict``)."""
        # Per prompt, the Arrow string arrays that use it and where each one's ids go back to.
        pieces: dict[str, list[pa.Array]] = {}
        slots: list[tuple[str, str, str, int, int]] = []  # (task, role, prompt, prompt-local start, length)
        layouts: dict[str, dict[str, np.ndarray]] = {}
        for task, dataset in tasks.items():
            table = dataset.select_columns(
                ["query_instruction", "document_instruction", "query", "positives", "negatives"]
            ).with_format("arrow")[:]
            query_prompt = task_instruction(table, "query_instruction", task)
            document_prompt = task_instruction(table, "document_instruction", task)
            layout: dict[str, np.ndarray] = {}
            for role, prompt, column in (
                ("query", query_prompt, "query"),
                ("positive", document_prompt, "positives"),
                ("negative", document_prompt, "negatives"),
            ):
                array = table.column(column).combine_chunks()
                if role != "query":
                    offsets = np.asarray(array.offsets, dtype=np.int64)
                    layout[role] = offsets - offsets[0]
                    array = array.flatten()
                group = pieces.setdefault(prompt, [])
                slots.append((task, role, prompt, sum(len(a) for a in group), len(array)))
                group.append(array)
            layouts[task] = layout

        prompts = list(pieces)
        texts: list[str] = []
        prompt_index: list[np.ndarray] = []
        local_to_global: dict[str, np.ndarray] = {}
        for number, prompt in enumerate(prompts):
            encoded = pa.chunked_array(pieces[prompt], type=pa.string()).combine_chunks().dictionary_encode()
            local_to_global[prompt] = np.asarray(encoded.indices, dtype=np.int64) + len(texts)
            texts.extend(encoded.dictionary.to_pylist())
            prompt_index.append(np.full(len(encoded.dictionary), number, dtype=np.int32))

        ids: dict[tuple[str, str], np.ndarray] = {}
        for task, role, prompt, start, length in slots:
            ids[task, role] = local_to_global[prompt][start : start + length]
        return cls(
            prompts=prompts,
            texts=texts,
            prompt_index=np.concatenate(prompt_index) if prompt_index else np.zeros(0, dtype=np.int32),
            tasks={
                task: TaskTextIds(
                    query_ids=ids[task, "query"],
                    positive_offsets=layouts[task]["positive"],
                    positive_ids=ids[task, "positive"],
                    negative_offsets=layouts[task]["negative"],
                    negative_ids=ids[task, "negative"],
                )
                for task in tasks
            },
            total_references=sum(len(v) for v in ids.values()),
        )

    def fingerprint(self, teacher: str) -> str:
        """A hash of the inputs in id order and the teacher's name; shards must agree on it."""
        digest = hashlib.sha256(teacher.encode())
        for number, prompt in enumerate(self.prompts):
            digest.update(f"\x00prompt{number}\x00{prompt}\x00".encode())
        for text in self.texts:
            digest.update(text.encode())
            digest.update(b"\x00")
        digest.update(self.prompt_index.tobytes())
        return digest.hexdigest()

    def shard_ids(self, shard: int, num_shards: int) -> np.ndarray:
        """The input ids of shard ``shard`` (0-based): a stride, so shards get similar text lengths."""
        if not 0 <= shard < num_shards:
            raise ValueError(f"shard {shard} is outside 0..{num_shards - 1}")
        return np.arange(shard, len(self.texts), num_shards, dtype=np.int64)

    def encode(
        self,
        model: SentenceTransformer,
        ids: np.ndarray | None = None,
        batch_size: int = 64,
        show_progress_bar: bool | None = None,
        processes: EncodingProcesses = ONE_PROCESS,
    ) -> np.ndarray:
        """Encode inputs ``ids`` (default all) with their prompts; returns float32 ``(len(ids), dim)`` embeddings.

        With ``processes`` (a launched run) each process encodes a contiguous slice of ``ids`` and every one
        gets all the embeddings.
        """
        selected = np.arange(len(self.texts), dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
        if processes.distributed:
            progress = processes.show_progress(show_progress_bar)
            whole = encode_shared(
                lambda part: self.encode(model, np.asarray(part, dtype=np.int64), batch_size, progress),
                selected.tolist(),
                processes,
            )
            return np.asarray(whole, dtype=np.float32)
        dimension = model.get_embedding_dimension()
        embeddings = np.zeros((len(selected), dimension or 0), dtype=np.float32)
        chunk = batch_size * ENCODE_CHUNK_BATCHES
        progress = tqdm(
            total=len(selected), unit="text", desc="Encoding distinct texts", disable=show_progress_bar is False
        )
        with progress:
            prompts = self.prompt_index[selected]
            for number, prompt in enumerate(self.prompts):
                positions = np.flatnonzero(prompts == number)
                for start in range(0, len(positions), chunk):
                    where = positions[start : start + chunk]
                    batch = [self.texts[i] for i in selected[where]]
                    vectors = model.encode(
                        batch,
                        prompt=prompt or None,
                        batch_size=batch_size,
                        convert_to_numpy=True,
                        show_progress_bar=False,
                    )
                    if embeddings.shape[1] == 0:  # models that cannot tell their dimension in advance
                        embeddings = np.zeros((len(selected), vectors.shape[1]), dtype=np.float32)
                    embeddings[where] = vectors
                    progress.update(len(where))
        return embeddings


def shard_path(directory: str | os.PathLike[str], shard: int, num_shards: int) -> Path:
    return Path(directory) / f"embeddings-{shard:05d}-of-{num_shards:05d}.safetensors"


def save_shard(
    directory: str | os.PathLike[str], shard: int, num_shards: int, embeddings: np.ndarray, fingerprint: str
) -> Path:
    """Write one shard's embeddings, atomically (:class:`StagedOutput`); a rerun replaces the shard."""
    metadata = {"fingerprint": fingerprint, "shard": str(shard), "num_shards": str(num_shards)}
    with StagedOutput(shard_path(directory, shard, num_shards), overwrite=True, kind="file") as stage:
        save_file(
            {"embeddings": np.ascontiguousarray(embeddings, dtype=np.float32)}, str(stage.path), metadata=metadata
        )
    return stage.target


def load_shards(directory: str | os.PathLike[str], distinct: DistinctTexts, fingerprint: str) -> np.ndarray:
    """Reassemble the embeddings of all inputs from the shard files in ``directory``.

    Raises :class:`InputNotFoundError` naming the missing shards, or :class:`InputError` when a shard was made
    from other data or another teacher (its fingerprint differs) or has the wrong number of rows.
    """
    found = sorted(Path(directory).glob("embeddings-*-of-*.safetensors"))
    if not found:
        raise InputNotFoundError(f"no embedding shards (embeddings-*-of-*.safetensors) in {directory}")
    counts = {int(path.stem.rsplit("-of-", 1)[1]) for path in found}
    if len(counts) != 1:
        raise InputError(f"{directory} mixes shard sets of sizes {sorted(counts)}; keep one run's shards only")
    num_shards = counts.pop()
    missing = [shard for shard in range(num_shards) if not shard_path(directory, shard, num_shards).exists()]
    if missing:
        raise InputNotFoundError(
            f"{directory} lacks shards {missing} of {num_shards}; run them with --shard i/{num_shards} first"
        )
    embeddings: np.ndarray | None = None
    for shard in range(num_shards):
        path = shard_path(directory, shard, num_shards)
        with safe_open(str(path), framework="numpy") as handle:
            metadata = handle.metadata() or {}
        if metadata.get("fingerprint") != fingerprint:
            raise InputError(
                f"{path}: made from other data or another teacher (fingerprint differs); re-run the shard"
            )
        part = load_file(str(path))["embeddings"]
        ids = distinct.shard_ids(shard, num_shards)
        if part.shape[0] != len(ids):
            raise InputError(f"{path}: holds {part.shape[0]} embeddings, expected {len(ids)}")
        if embeddings is None:
            embeddings = np.zeros((len(distinct), part.shape[1]), dtype=np.float32)
        embeddings[ids] = part
    assert embeddings is not None
    return embeddings
