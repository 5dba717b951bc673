"""Merge methods, registered by name in :data:`MERGE_METHODS`."""

from hf_unified_embed.merge.methods.base import (
    MERGE_METHODS,
    LinearMergeMethod,
    MergeMethod,
    get_merge_method,
    register_merge_method,
)
from hf_unified_embed.merge.methods.hierarchical import Hierarchical, fusion_weights
from hf_unified_embed.merge.methods.slerp import Slerp, slerp
from hf_unified_embed.merge.methods.soup import Soup
from hf_unified_embed.merge.methods.task_arithmetic import TaskArithmetic

__all__ = [
    "MERGE_METHODS",
    "Hierarchical",
    "LinearMergeMethod",
    "MergeMethod",
    "Slerp",
    "Soup",
    "TaskArithmetic",
    "fusion_weights",
    "get_merge_method",
    "register_merge_method",
    "slerp",
]
