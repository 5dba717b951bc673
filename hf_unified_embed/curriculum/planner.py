"""The whole Data-CUBE planning pass: task similarity → task order, and φ for every row."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from datasets import Dataset, DatasetDict

from hf_unified_embed.curriculum.difficulty import DIFFICULTY_RULE, add_difficulty, score_difficulty
from hf_unified_embed.curriculum.plan import CurriculumPlan, TaskStatistics
from hf_unified_embed.curriculum.representations import cosine_similarity_matrix, task_representations
from hf_unified_embed.curriculum.task_order import Method, solve_task_order
from hf_unified_embed.errors import ArgumentError
from hf_unified_embed.schema import check_columns
from hf_unified_embed.utils.arguments import checked_arguments
from hf_unified_embed.utils.distributed_encode import ONE_PROCESS, EncodingProcesses
from hf_unified_embed.utils.locations import public_name

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


@dataclass
class CurriculumResult:
    """The plan and the tasks with their ``difficulty`` column (the tasks unchanged when not scored)."""

    plan: CurriculumPlan
    tasks: DatasetDict
    difficulty: dict[str, np.ndarray]


@checked_arguments
def plan_curriculum(
    model: SentenceTransformer,
    tasks: Mapping[str, Dataset],
    *,
    teacher_name: str | None = None,
    n_samples: int = 200,
    method: Method = "annealing",
    iterations: int = 2_000_000,
    initial_temperature: float | None = None,
    cooling_rate: float | None = None,
    polish: bool = True,
    seed: int = 0,
    score_instances: bool = True,
    difficulty: Mapping[str, np.ndarray] | None = None,
    negative_pool: int = 1_024,
    batch_size: int = 64,
    show_progress_bar: bool | None = None,
    processes: EncodingProcesses = ONE_PROCESS,
) -> CurriculumResult:
    """Plan a Data-CUBE curriculum for ``tasks`` with ``model`` as the teacher.

    1. Task representations (Eq. 4) from ``n_samples`` queries per task → cosine similarity (Eq. 5).
    2. Task order maximising Eq. 6 with :func:`~hf_unified_embed.curriculum.solve_task_order`.
    3. Instance difficulty φ (Eq. 8) for every row, added as the float32 ``difficulty`` column —
       computed here, or taken from ``difficulty`` (e.g. merged from sharded runs).

    With ``processes`` (a launched run) every process calls this alike: each encodes its slice of the texts
    of steps 1 and 3, and every one gets the same result.

    Returns:
        a :class:`CurriculumResult` with the :class:`CurriculumPlan`, the scored tasks and the φ arrays.
    """
    if not tasks:
        raise ArgumentError(
            "plan_curriculum: tasks is empty; give the unified tasks to plan, as load_unified returns them"
        )
    for name, dataset in tasks.items():  # the unified columns, before anything is encoded
        check_columns(dataset.column_names, task=name)
    # The plan is written next to data and models: the teacher by Hub id or name, never by a local path.
    teacher_name = public_name(teacher_name) if teacher_name else None
    names = list(tasks)
    representations = task_representations(
        model,
        tasks,
        n_samples=n_samples,
        seed=seed,
        batch_size=batch_size,
        show_progress_bar=show_progress_bar,
        processes=processes,
    )
    similarity = cosine_similarity_matrix(representations)
    solved = solve_task_order(
        similarity,
        method=method,
        iterations=iterations,
        initial_temperature=initial_temperature,
        cooling_rate=cooling_rate,
        seed=seed,
        polish=polish,
    )
    scores: dict[str, np.ndarray] = {}
    difficulty_settings: dict[str, Any] = {}
    if difficulty is not None:
        scores = {task: np.asarray(difficulty[task], dtype=np.float32) for task in names}
    elif score_instances:
        scores = score_difficulty(
            model,
            tasks,
            batch_size=batch_size,
            negative_pool=negative_pool,
            seed=seed,
            show_progress_bar=show_progress_bar,
            processes=processes,
        )
    if scores:
        difficulty_settings = {
            "teacher": teacher_name,
            "rule": DIFFICULTY_RULE,
            "negative_pool": negative_pool,
            "seed": seed,
        }
    plan = CurriculumPlan(
        tasks=names,
        order=[names[index] for index in solved.order],
        similarity=similarity.tolist(),
        score=solved.score,
        solver=solved.parameters,
        representation={"teacher": teacher_name, "n_samples": n_samples, "seed": seed},
        difficulty=difficulty_settings,
        task_statistics={task: TaskStatistics.from_scores(len(tasks[task]), scores.get(task)) for task in names},
    )
    scored = add_difficulty(tasks, scores) if scores else DatasetDict(dict(tasks))
    return CurriculumResult(plan=plan, tasks=scored, difficulty=scores)
