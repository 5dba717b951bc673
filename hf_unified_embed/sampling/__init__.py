"""Task-pure, curriculum-ordered batches for multi-task training with sentence-transformers.

:class:`CurriculumBatchSampler` plugs into ``SentenceTransformerTrainingArguments(multi_dataset_batch_sampler=...)``;
:func:`build_batch_plan` is the numpy planner behind it, usable on its own. :class:`MultiTaskStream`
does the same for task streams (``IterableDataset``s): one task per optimizer step, exact resume.

Names load on first use: reading a recipe checks its sampler options against
:mod:`~hf_unified_embed.sampling.batch_plan` (numpy only) without importing sentence-transformers,
which :mod:`~hf_unified_embed.sampling.curriculum_sampler` needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hf_unified_embed.utils.lazy_exports import lazy_attribute

_EXPORTS = {
    "BatchPlan": "hf_unified_embed.sampling.batch_plan",
    "GroupCounts": "hf_unified_embed.sampling.batch_plan",
    "build_batch_plan": "hf_unified_embed.sampling.batch_plan",
    "count_groups": "hf_unified_embed.sampling.batch_plan",
    "CurriculumBatchSampler": "hf_unified_embed.sampling.curriculum_sampler",
    "MultiTaskStream": "hf_unified_embed.sampling.multi_task_stream",
    "StreamResumeCallback": "hf_unified_embed.sampling.stream_resume",
    "TaskStream": "hf_unified_embed.sampling.task_stream",
    "task_weights": "hf_unified_embed.sampling.multi_task_stream",
}

if TYPE_CHECKING:
    from hf_unified_embed.sampling.batch_plan import BatchPlan, GroupCounts, build_batch_plan, count_groups
    from hf_unified_embed.sampling.curriculum_sampler import CurriculumBatchSampler
    from hf_unified_embed.sampling.multi_task_stream import MultiTaskStream, task_weights
    from hf_unified_embed.sampling.stream_resume import StreamResumeCallback
    from hf_unified_embed.sampling.task_stream import TaskStream

__all__ = [
    "BatchPlan",
    "CurriculumBatchSampler",
    "GroupCounts",
    "MultiTaskStream",
    "StreamResumeCallback",
    "TaskStream",
    "build_batch_plan",
    "count_groups",
    "task_weights",
]


def __getattr__(name: str) -> Any:
    return lazy_attribute(globals(), _EXPORTS, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
