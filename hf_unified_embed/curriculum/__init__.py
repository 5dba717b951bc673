"""Data-CUBE curriculum planning: task order by task similarity (§4.2) and instance difficulty (§4.3).

``plan_curriculum`` runs the whole pass; the parts are usable on their own:
``task_representations`` + ``cosine_similarity_matrix`` (Eq. 4–5), ``solve_task_order`` (Eq. 6–7),
``score_difficulty`` + ``add_difficulty`` (Eq. 8), ``CurriculumPlan`` (JSON beside the dataset) and
the PNG plots. The order and the ``difficulty`` column feed ``hf_unified_embed.sampling.CurriculumBatchSampler``.
"""

from hf_unified_embed.curriculum.difficulty import add_difficulty, difficulty_from_embeddings, score_difficulty
from hf_unified_embed.curriculum.plan import PLAN_FILENAME, CurriculumPlan, TaskStatistics
from hf_unified_embed.curriculum.planner import CurriculumResult, plan_curriculum
from hf_unified_embed.curriculum.plots import plot_difficulty_histograms, plot_task_similarity
from hf_unified_embed.curriculum.representations import cosine_similarity_matrix, task_representations
from hf_unified_embed.curriculum.task_order import MAX_EXACT_TASKS, TaskOrder, solve_task_order, tour_score
from hf_unified_embed.curriculum.texts import DistinctTexts

__all__ = [
    "MAX_EXACT_TASKS",
    "PLAN_FILENAME",
    "CurriculumPlan",
    "CurriculumResult",
    "DistinctTexts",
    "TaskOrder",
    "TaskStatistics",
    "add_difficulty",
    "cosine_similarity_matrix",
    "difficulty_from_embeddings",
    "plan_curriculum",
    "plot_difficulty_histograms",
    "plot_task_similarity",
    "score_difficulty",
    "solve_task_order",
    "task_representations",
    "tour_score",
]
