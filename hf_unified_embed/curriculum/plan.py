"""`CurriculumPlan`: what the planner decided and why, saved as JSON beside the dataset.

The plan holds the task order (the input of ``CurriculumBatchSampler``), the task-similarity matrix
it was solved on, every parameter needed to reproduce it, and per-task size and difficulty
statistics. It is plain JSON so that it can be read without this package.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Hashable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from hf_unified_embed.curriculum.task_order import tour_score
from hf_unified_embed.errors import InputError, InputNotFoundError, shown
from hf_unified_embed.utils.outputs import StagedOutput

#: The plan's file name inside the output dataset folder.
PLAN_FILENAME = "curriculum_plan.json"
PLAN_FORMAT_VERSION = 1
#: Quantiles of φ kept per task.
QUANTILES: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 0.9)


@dataclass(frozen=True)
class TaskStatistics:
    """Size and difficulty (φ, Eq. 8) summary of one task; difficulty fields are ``None`` when not scored."""

    rows: int
    difficulty_mean: float | None = None
    difficulty_std: float | None = None
    difficulty_min: float | None = None
    difficulty_max: float | None = None
    difficulty_quantiles: dict[str, float] | None = None

    @classmethod
    def from_scores(cls, rows: int, scores: np.ndarray | None) -> TaskStatistics:
        if scores is None or len(scores) == 0:
            return cls(rows=rows)
        values = np.asarray(scores, dtype=np.float64)
        return cls(
            rows=rows,
            difficulty_mean=float(values.mean()),
            difficulty_std=float(values.std()),
            difficulty_min=float(values.min()),
            difficulty_max=float(values.max()),
            difficulty_quantiles={f"p{round(q * 100)}": float(np.quantile(values, q)) for q in QUANTILES},
        )


@dataclass
class CurriculumPlan:
    """A Data-CUBE curriculum: task order (§4.2) and the instance-difficulty summary (§4.3).

    Attributes:
        tasks: task names; row/column ``i`` of ``similarity`` is ``tasks[i]``.
        order: task names in training order (a cyclic tour; Algorithm 1 walks it from the first).
        similarity: cosine similarity of the task representations (Eq. 4–5), as nested lists.
        score: Eq. 6 of ``order`` — the sum of neighbouring similarities, last→first included.
        solver: the tour solver's settings (method, iterations, temperatures, seed, ...).
        representation: how tasks were represented (teacher, ``n_samples``, seed).
        difficulty: how φ was computed (teacher, rule, ``negative_pool``, seed); ``{}`` when not scored.
        task_statistics: per task name, :class:`TaskStatistics`.
        version: the JSON layout version.
    """

    tasks: list[str]
    order: list[str]
    similarity: list[list[float]]
    score: float
    solver: dict[str, Any] = field(default_factory=dict)
    representation: dict[str, Any] = field(default_factory=dict)
    difficulty: dict[str, Any] = field(default_factory=dict)
    task_statistics: dict[str, TaskStatistics] = field(default_factory=dict)
    version: int = PLAN_FORMAT_VERSION

    def __post_init__(self) -> None:
        if sorted(self.order) != sorted(self.tasks) or len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"order {self.order} must list each of the tasks {self.tasks} exactly once")
        shape = np.shape(self.similarity)
        if shape != (len(self.tasks), len(self.tasks)):
            raise ValueError(f"similarity has shape {shape}, expected ({len(self.tasks)}, {len(self.tasks)})")

    @property
    def order_indices(self) -> list[int]:
        """``order`` as row indices of ``similarity``."""
        position = {task: index for index, task in enumerate(self.tasks)}
        return [position[task] for task in self.order]

    def similarity_matrix(self, in_order: bool = False) -> np.ndarray:
        """The similarity matrix; with ``in_order=True`` rows and columns follow the tour."""
        matrix = np.asarray(self.similarity, dtype=np.float64)
        if in_order:
            indices = self.order_indices
            matrix = matrix[np.ix_(indices, indices)]
        return matrix

    def neighbour_similarities(self) -> list[float]:
        """sim(order[i], order[i+1]) around the tour (the last pair closes the cycle)."""
        ordered = self.similarity_matrix(in_order=True)
        return [float(ordered[i, (i + 1) % len(self.order)]) for i in range(len(self.order))]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["task_statistics"] = {task: asdict(stats) for task, stats in self.task_statistics.items()}
        return data

    @classmethod
    def from_dict(cls, data: Any, source: str = "plan") -> CurriculumPlan:
        """The plan ``data`` holds (as :meth:`to_dict` wrote it), every field checked against its type first.

        Raises:
            InputError: naming ``source`` and the field: not an object, another format version, a field
                missing, unknown or of the wrong type, an order that is not a tour of the tasks, a
                ``score`` that is not Eq. 6 of the order (a hand-edited plan).
        """
        from hf_unified_embed.utils.typecheck import field_annotations, type_problem

        if not isinstance(data, dict):
            raise InputError(f"{source}: expected a JSON object, got {type(data).__name__}")
        version = data.get("version")
        if version != PLAN_FORMAT_VERSION:
            raise InputError(
                f"{source}: plan format version {shown(version)}; this release reads {PLAN_FORMAT_VERSION}"
            )
        missing = [name for name in ("tasks", "order", "similarity", "score") if name not in data]
        if missing:
            raise InputError(f"{source}: missing fields {missing}")
        annotations = field_annotations(cast(Hashable, cls))  # a class hashes; its instances do not
        statistics = data.get("task_statistics", {})
        for name, value in data.items():
            if name not in annotations:
                raise InputError(f"{source}: unknown field {shown(name)}; the fields are {sorted(annotations)}")
            problem = None if name == "task_statistics" else type_problem(annotations[name], value)
            if problem is None and name == "task_statistics" and not isinstance(value, dict):
                problem = f"expected an object of task names, got {type(value).__name__}"
            if problem:
                raise InputError(f"{source}, field {shown(name)}: {problem}, got {shown(value)}")
        stat_fields = field_annotations(TaskStatistics)
        for task, stats in statistics.items():
            where = f"{source}, field 'task_statistics.{task}'"
            if not isinstance(stats, dict):
                raise InputError(f"{where}: expected an object, got {type(stats).__name__}")
            for name, value in stats.items():
                problem = "unknown field" if name not in stat_fields else type_problem(stat_fields[name], value)
                if problem:
                    raise InputError(f"{where}.{name}: {problem}, got {shown(value)}")
            if "rows" not in stats:
                raise InputError(f"{where}: missing field 'rows'")
        fields = dict(data)
        fields["task_statistics"] = {task: TaskStatistics(**stats) for task, stats in statistics.items()}
        try:
            plan = cls(**fields)
            plan.check_score()
        except (TypeError, ValueError) as error:
            raise InputError(f"{source}: {error}") from error
        return plan

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the plan as JSON (a directory gets :data:`PLAN_FILENAME`), atomically (:class:`StagedOutput`)."""
        target = Path(path)
        if target.is_dir():
            target = target / PLAN_FILENAME
        with StagedOutput(target, overwrite=True, kind="file") as stage:
            stage.path.write_text(json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n", encoding="utf-8")
        return stage.target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CurriculumPlan:
        """Read a plan from a JSON file or from a dataset folder holding :data:`PLAN_FILENAME`."""
        source = Path(path)
        if source.is_dir():
            source = source / PLAN_FILENAME
        if not source.is_file():
            raise InputNotFoundError(f"curriculum plan {source} does not exist")
        try:
            data = json.loads(source.read_text(encoding="utf-8"))
        except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, a number too long to convert
            raise InputError(f"{source}: not valid JSON ({error})") from error
        return cls.from_dict(data, source=str(source))

    def check_score(self) -> None:
        """Raise if ``score`` does not match Eq. 6 of ``order`` (a hand-edited plan)."""
        expected = tour_score(self.similarity_matrix(), self.order_indices)
        if not math.isclose(expected, self.score, rel_tol=1e-9, abs_tol=1e-9):
            raise ValueError(f"plan score {self.score} differs from Eq. 6 of its order ({expected})")
