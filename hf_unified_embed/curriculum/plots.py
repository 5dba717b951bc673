"""PNG figures of a curriculum: the task-similarity heatmap in tour order and per-task φ histograms."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from hf_unified_embed.curriculum.plan import CurriculumPlan
from hf_unified_embed.utils.figures import pyplot
from hf_unified_embed.utils.outputs import StagedOutput

#: Above this many tasks, axis labels are dropped and histograms become one heatmap row per task.
MAX_LABELLED_TASKS = 40
MAX_HISTOGRAM_PANELS = 24


def _pyplot() -> Any:
    # The curriculum extra installs matplotlib with the solver's numba: a plan comes with its figures.
    return pyplot("the curriculum figures", extra="curriculum")


def _save(figure: Any, path: str | os.PathLike[str]) -> Path:
    plt = _pyplot()
    try:
        with StagedOutput(Path(path), overwrite=True, kind="file") as stage:
            figure.savefig(stage.path, dpi=120, bbox_inches="tight", format="png")
    finally:
        plt.close(figure)
    return stage.target


def plot_task_similarity(plan: CurriculumPlan, path: str | os.PathLike[str]) -> Path:
    """Heatmap of task similarity with rows and columns in tour order.

    A good order shows a bright band next to the diagonal: each task is similar to the next.
    """
    matrix = plan.similarity_matrix(in_order=True)
    m = len(plan.order)
    side = min(4 + 0.3 * m, 16)
    figure, axis = _pyplot().subplots(figsize=(side + 1.5, side))
    off_diagonal = matrix[~np.eye(m, dtype=bool)] if m > 1 else matrix.ravel()
    image = axis.imshow(matrix, cmap="viridis", vmin=off_diagonal.min(), vmax=off_diagonal.max())
    figure.colorbar(image, ax=axis, label="cosine similarity of task representations")
    if m <= MAX_LABELLED_TASKS:
        axis.set_xticks(range(m), plan.order, rotation=90)
        axis.set_yticks(range(m), plan.order)
    else:
        axis.set_xlabel("task (tour order)")
        axis.set_ylabel("task (tour order)")
    axis.set_title(f"Task similarity in curriculum order (Eq. 6 score {plan.score:.3f})")
    return _save(figure, path)


def plot_difficulty_histograms(
    difficulty: Mapping[str, np.ndarray], path: str | os.PathLike[str], order: list[str] | None = None, bins: int = 40
) -> Path:
    """Histograms of φ per task (one panel each; for many tasks one heatmap row each), in ``order``."""
    tasks = list(order) if order is not None else list(difficulty)
    scored = [np.asarray(difficulty[task], dtype=np.float64) for task in tasks]
    everything = np.concatenate(scored) if scored else np.zeros(1)
    edges = np.linspace(everything.min(), everything.max() + 1e-9, bins + 1)
    plt = _pyplot()
    if len(tasks) <= MAX_HISTOGRAM_PANELS:
        columns = min(4, max(1, len(tasks)))
        rows = math.ceil(len(tasks) / columns)
        figure, axes = plt.subplots(
            rows, columns, figsize=(3.2 * columns, 2.4 * rows), sharex=True, squeeze=False, layout="constrained"
        )
        for axis, task, values in zip(axes.ravel(), tasks, scored):
            axis.hist(values, bins=edges, color="tab:blue")
            axis.axvline(float(np.median(values)) if len(values) else 0.0, color="tab:red", linewidth=1)
            axis.set_title(f"{task} (n={len(values)})", fontsize=9)
        for axis in axes.ravel()[len(tasks) :]:
            axis.set_visible(False)
        for axis in axes[-1]:
            axis.set_xlabel("φ = cos(q, d+) − cos(q, d−)")
        figure.suptitle("Instance difficulty per task (right = easy; red line = median)")
    else:
        density = np.stack([np.histogram(values, bins=edges)[0] / max(len(values), 1) for values in scored])
        figure, axis = plt.subplots(figsize=(8, min(3 + 0.05 * len(tasks), 20)))
        image = axis.imshow(density, aspect="auto", cmap="magma", extent=(edges[0], edges[-1], len(tasks) - 0.5, -0.5))
        figure.colorbar(image, ax=axis, label="fraction of the task's rows")
        axis.set_xlabel("φ = cos(q, d+) − cos(q, d−)")
        axis.set_ylabel("task (curriculum order)")
        axis.set_title("Instance difficulty per task (right = easy)")
    return _save(figure, path)
