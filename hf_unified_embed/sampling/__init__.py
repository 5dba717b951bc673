"""Task-pure, curriculum-ordered batches for multi-task training with sentence-transformers.

:class:`CurriculumBatchSampler` plugs into ``SentenceTransformerTrainingArguments(multi_dataset_batch_sampler=...)``;
:func:`build_batch_plan` is the numpy planner behind it, usable on its own.
"""

from hf_unified_embed.sampling.batch_plan import BatchPlan, GroupCounts, build_batch_plan, count_groups
from hf_unified_embed.sampling.curriculum_sampler import CurriculumBatchSampler

__all__ = ["BatchPlan", "CurriculumBatchSampler", "GroupCounts", "build_batch_plan", "count_groups"]
