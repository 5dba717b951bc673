"""Task-pure, curriculum-ordered batches for multi-task training with sentence-transformers.

:class:`CurriculumBatchSampler` plugs into ``SentenceTransformerTrainingArguments(multi_dataset_batch_sampler=...)``;
:func:`build_batch_plan` is the numpy planner behind it, usable on its own.

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
}

if TYPE_CHECKING:
    from hf_unified_embed.sampling.batch_plan import BatchPlan, GroupCounts, build_batch_plan, count_groups
    from hf_unified_embed.sampling.curriculum_sampler import CurriculumBatchSampler

__all__ = ["BatchPlan", "CurriculumBatchSampler", "GroupCounts", "build_batch_plan", "count_groups"]


def __getattr__(name: str) -> Any:
    return lazy_attribute(globals(), _EXPORTS, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
