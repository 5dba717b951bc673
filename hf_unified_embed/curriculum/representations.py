"""Task representations and the task-similarity matrix (Data-CUBE §4.2.1, Eq. 4–5).

A task is represented by the mean teacher embedding of ``n_samples`` of its queries, sampled at
random and encoded with the task's ``query_instruction`` as the prompt, as in training (Eq. 2, 4).
Task similarity is the cosine of two representations; the task order maximises it between
neighbours (Eq. 6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from datasets import Dataset
from tqdm.auto import tqdm

from hf_unified_embed.errors import shown
from hf_unified_embed.schema import task_instruction
from hf_unified_embed.utils.distributed_encode import ONE_PROCESS, EncodingProcesses, encode_shared

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


def sample_query_rows(tasks: Mapping[str, Dataset], n_samples: int = 200, seed: int = 0) -> dict[str, np.ndarray]:
    """Row indices of up to ``n_samples`` distinct rows per task, sampled without replacement.

    Each task draws from its own stream (``seed``, task position), so adding a task does not change
    the samples of the others.
    """
    if n_samples < 1:
        raise ValueError(f"n_samples must be positive, got {n_samples}")
    samples = {}
    for number, (task, dataset) in enumerate(tasks.items()):
        if len(dataset) == 0:
            raise ValueError(f"task {shown(task)} has no rows; it cannot be represented (Eq. 4) or scheduled")
        rng = np.random.default_rng([seed, number])
        samples[task] = np.sort(rng.choice(len(dataset), size=min(n_samples, len(dataset)), replace=False))
    return samples


def task_representations(
    model: SentenceTransformer,
    tasks: Mapping[str, Dataset],
    n_samples: int = 200,
    seed: int = 0,
    batch_size: int = 64,
    show_progress_bar: bool | None = None,
    processes: EncodingProcesses = ONE_PROCESS,
) -> np.ndarray:
    """Eq. 4: per task, the mean teacher embedding of ``n_samples`` sampled queries.

    Args:
        model: the teacher model.
        tasks: ``{task: Dataset}`` in the unified schema (e.g. a ``DatasetDict``).
        n_samples: queries sampled per task (``n_t`` in the paper; all rows when a task is smaller).
        seed: seeds the sampling.
        batch_size: encoding batch size.
        show_progress_bar: ``False`` hides the per-task progress bar.
        processes: the processes of a launched run, each encoding its slice of every task's sampled queries
            (every one gets every representation).

    Returns:
        float32 ``(len(tasks), dim)`` array, one row per task in the mapping's order.
    """
    samples = sample_query_rows(tasks, n_samples, seed)
    rows = []
    for task, dataset in tqdm(
        tasks.items(),
        total=len(tasks),
        desc="Task representations",
        unit="task",
        disable=processes.show_progress(show_progress_bar) is False,
    ):
        table = dataset.select_columns(["query_instruction", "query"]).with_format("arrow")[:]
        prompt = task_instruction(table, "query_instruction", task)
        queries = table.column("query").take(samples[task]).to_pylist()
        embeddings = encode_shared(
            model.encode,
            queries,
            processes,
            prompt=prompt or None,
            batch_size=batch_size,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        rows.append(embeddings.mean(axis=0))
    return np.stack(rows).astype(np.float32)


def cosine_similarity_matrix(vectors: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarities of the rows of ``vectors`` (float64, symmetric, unit diagonal)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    similarity = unit @ unit.T
    # Exact symmetry: the tour solvers check it, and float round-off must not trip them.
    return (similarity + similarity.T) / 2
