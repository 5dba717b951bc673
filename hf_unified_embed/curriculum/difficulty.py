"""Instance-level curriculum: the difficulty margin φ of every row (Data-CUBE §4.3.1, Eq. 8).

    φ(q, d+, d−) = cos(q, d+) − cos(q, d−)

measured with a teacher model. Large φ means the teacher separates the positive from the negative
easily; the sampler orders rows by descending φ (easy → hard). Choices where the paper is silent:

* several positives: the **first** positive (adapters put the best-graded one first);
  several negatives: the **hardest**, i.e. the highest cos(q, d−) — the margin the model must beat.
* a row without negatives: the hardest of up to ``negative_pool`` *other rows' first positives of the
  same task* (the in-batch negatives that row meets in training). Pool texts identical to the row's
  query or to any of its positives are skipped. With ``negative_pool=0``, or when nothing is left
  in the pool, the cos(q, d−) term is 0.
* a row without positives (classification/clustering tasks may have none): the cos(q, d+) term is 0.

Every row thus gets a finite float32 φ; φ is comparable *within* a task, which is all the sampler uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from datasets import Dataset, DatasetDict

from hf_unified_embed.curriculum.texts import DistinctTexts, TaskTextIds
from hf_unified_embed.errors import shown
from hf_unified_embed.schema import DIFFICULTY_COLUMN, DIFFICULTY_FEATURE
from hf_unified_embed.utils.distributed_encode import ONE_PROCESS, EncodingProcesses

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

#: Recorded in the plan: how φ was computed.
DIFFICULTY_RULE = (
    "cos(q, first positive) - max cos(q, negative); rows without negatives: hardest of negative_pool "
    "other rows' first positives of the task (none left: 0); rows without positives: cos(q, d+) = 0"
)
#: Rows scored per block; bounds the temporary (rows × negatives × dim) memory.
ROW_BLOCK = 8_192


def normalize_rows(embeddings: np.ndarray) -> np.ndarray:
    """Unit-length rows (zero rows stay zero), so that dot products are cosines."""
    norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
    return (embeddings / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


def _csr_positions(offsets: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in the flat list column of the items of ``rows``, and how many each row has."""
    starts = offsets[rows]
    counts = offsets[rows + 1] - starts
    first_output = np.cumsum(counts) - counts
    return np.repeat(starts - first_output, counts) + np.arange(counts.sum()), counts


def _hardest_listed_negative(unit: np.ndarray, ids: TaskTextIds, rows: np.ndarray) -> np.ndarray:
    """max cos(q, d−) over each row's listed negatives (every row must have at least one)."""
    if not len(rows):
        return np.zeros(0, dtype=np.float32)
    positions, counts = _csr_positions(ids.negative_offsets, rows)
    owners = np.repeat(ids.query_ids[rows], counts)
    cosines = np.einsum("ij,ij->i", unit[owners], unit[ids.negative_ids[positions]])
    return np.maximum.reduceat(cosines, np.cumsum(counts) - counts)


def _hardest_pool_negative(unit: np.ndarray, ids: TaskTextIds, rows: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """max cos(q, p) over the pool, skipping the row's own query and positives (0 when nothing is left)."""
    cosines = unit[ids.query_ids[rows]] @ unit[pool].T
    # Pool positions of each text id that is in the pool (-1 elsewhere), to mask the row's own texts.
    order = np.argsort(pool)
    sorted_pool = pool[order]

    def pool_position(text_ids: np.ndarray) -> np.ndarray:
        where = np.clip(np.searchsorted(sorted_pool, text_ids), 0, len(pool) - 1)
        return np.where(sorted_pool[where] == text_ids, order[where], -1)

    local = np.arange(len(rows))
    own, counts = _csr_positions(ids.positive_offsets, rows)
    owners = np.repeat(local, counts)
    for owner, position in (
        (owners, pool_position(ids.positive_ids[own])),
        (local, pool_position(ids.query_ids[rows])),
    ):
        hit = position >= 0
        cosines[owner[hit], position[hit]] = -np.inf
    hardest = cosines.max(axis=1, initial=-np.inf)
    return np.where(np.isfinite(hardest), hardest, 0.0)


def task_difficulty(
    unit: np.ndarray, ids: TaskTextIds, negative_pool: int = 1_024, rng: np.random.Generator | None = None
) -> np.ndarray:
    """φ (Eq. 8) for every row of one task from unit-length embeddings of its distinct inputs."""
    rng = rng if rng is not None else np.random.default_rng(0)
    n = ids.num_rows
    positive_counts = np.diff(ids.positive_offsets)
    negative_counts = np.diff(ids.negative_offsets)
    has_positive = positive_counts > 0
    first_positive = np.zeros(n, dtype=np.int64)
    first_positive[has_positive] = ids.positive_ids[ids.positive_offsets[:-1][has_positive]]
    pool = np.zeros(0, dtype=np.int64)
    if negative_pool > 0 and (negative_counts == 0).any() and has_positive.any():
        candidates = np.unique(first_positive[has_positive])
        pool = rng.choice(candidates, size=min(negative_pool, len(candidates)), replace=False)
    phi = np.zeros(n, dtype=np.float32)
    for start in range(0, n, ROW_BLOCK):
        block = np.arange(start, min(start + ROW_BLOCK, n))
        positive = np.zeros(len(block), dtype=np.float32)
        with_positive = block[has_positive[block]]
        positive[has_positive[block]] = np.einsum(
            "ij,ij->i", unit[ids.query_ids[with_positive]], unit[first_positive[with_positive]]
        )
        negative = np.zeros(len(block), dtype=np.float32)
        listed = negative_counts[block] > 0
        negative[listed] = _hardest_listed_negative(unit, ids, block[listed])
        if len(pool) and (~listed).any():
            negative[~listed] = _hardest_pool_negative(unit, ids, block[~listed], pool)
        phi[block] = positive - negative
    return phi


def difficulty_from_embeddings(
    distinct: DistinctTexts, embeddings: np.ndarray, negative_pool: int = 1_024, seed: int = 0
) -> dict[str, np.ndarray]:
    """φ per task (float32 arrays in row order) from the embeddings of ``distinct``'s inputs."""
    if embeddings.shape[0] != len(distinct):
        raise ValueError(f"got {embeddings.shape[0]} embeddings for {len(distinct)} distinct inputs")
    unit = normalize_rows(embeddings)
    return {
        task: task_difficulty(unit, ids, negative_pool, np.random.default_rng([seed, number]))
        for number, (task, ids) in enumerate(distinct.tasks.items())
    }


def score_difficulty(
    model: SentenceTransformer,
    tasks: Mapping[str, Dataset],
    batch_size: int = 64,
    negative_pool: int = 1_024,
    seed: int = 0,
    show_progress_bar: bool | None = None,
    processes: EncodingProcesses = ONE_PROCESS,
) -> dict[str, np.ndarray]:
    """Data-CUBE's instance difficulty φ = cos(q, d+) − cos(q, d−) (Eq. 8) for every row of every task.

    Each distinct ``(instruction, text)`` input is encoded once, queries with their task's
    ``query_instruction`` and documents with its ``document_instruction``.

    Args:
        model: the teacher (the paper uses INSTRUCTOR; any sentence-transformers model works).
        tasks: ``{task: Dataset}`` in the unified schema, e.g. a ``DatasetDict``.
        batch_size: encoding batch size.
        negative_pool: for rows without negatives, how many other rows' positives of the task to
            take the hardest from (0: no negative term).
        seed: seeds the choice of the pool.
        show_progress_bar: ``False`` hides the progress bar.
        processes: the processes of a launched run, each encoding its slice of the inputs (every one gets
            every φ).

    Returns:
        ``{task: float32 array of φ, one per row in row order}``.

    Example::

        from sentence_transformers import SentenceTransformer
        from hf_unified_embed.curriculum import add_difficulty, score_difficulty

        teacher = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
        scores = score_difficulty(teacher, tasks)
        tasks = add_difficulty(tasks, scores)
    """
    distinct = DistinctTexts.from_tasks(tasks)
    embeddings = distinct.encode(
        model, batch_size=batch_size, show_progress_bar=show_progress_bar, processes=processes
    )
    return difficulty_from_embeddings(distinct, embeddings, negative_pool, seed)


def add_difficulty(tasks: Mapping[str, Dataset], scores: Mapping[str, np.ndarray]) -> DatasetDict:
    """Return the tasks with a float32 ``difficulty`` column (an existing one is replaced)."""
    result = DatasetDict()
    for task, dataset in tasks.items():
        if task not in scores:
            raise ValueError(f"no difficulty scores for task {shown(task)}")
        values = np.asarray(scores[task], dtype=np.float32)
        if values.shape != (len(dataset),):
            raise ValueError(f"task {shown(task)}: {values.shape[0]} difficulty scores for {len(dataset)} rows")
        if DIFFICULTY_COLUMN in dataset.column_names:
            dataset = dataset.remove_columns(DIFFICULTY_COLUMN)
        result[task] = dataset.add_column(DIFFICULTY_COLUMN, values, feature=DIFFICULTY_FEATURE)
    return result
