"""Merge methods: the native streamed ones registered in :data:`MERGE_METHODS`, and mergekit's (:class:`MergekitMethod`)."""

from hf_unified_embed.merge.methods.hierarchical import Hierarchical, fusion_weights
from hf_unified_embed.merge.methods.merge_method import LinearMergeMethod, MergeMethod, TensorMergeMethod
from hf_unified_embed.merge.methods.mergekit_methods import MergekitMethod, mergekit_method
from hf_unified_embed.merge.methods.registry import (
    MERGE_METHODS,
    available_merge_methods,
    get_merge_method,
    register_merge_method,
)
from hf_unified_embed.merge.methods.soup import Soup
from hf_unified_embed.merge.methods.task_arithmetic import TaskArithmetic

__all__ = [
    "MERGE_METHODS",
    "Hierarchical",
    "LinearMergeMethod",
    "MergeMethod",
    "MergekitMethod",
    "Soup",
    "TaskArithmetic",
    "TensorMergeMethod",
    "available_merge_methods",
    "fusion_weights",
    "get_merge_method",
    "mergekit_method",
    "register_merge_method",
]
