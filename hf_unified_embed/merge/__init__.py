"""Streaming merges of sentence-transformers / transformers checkpoints, with merged-model cards.

Methods are small registered classes (:data:`MERGE_METHODS`: ``soup``, ``slerp``,
``task_arithmetic``, ``hierarchical``) over a lazy tensor loader (:class:`LazyCheckpoint`) and a
sharded safetensors writer (:class:`ShardedSafetensorsWriter`). Peak memory is about
(inputs + 1) × the largest tensor plus one output shard, never the sum of the models.

Example::

    from hf_unified_embed.merge import merge_models

    merge_models(
        ["ir-run", "sts-run", "mixed-run"], "hierarchical", "merged",
        ir_models=[0, 2], sts_models=[1, 2],
        base="all-MiniLM-L6-v2", ir_specialist="ir-only", sts_specialist="sts-only", temperature=0.5,
    )
"""

from hf_unified_embed.errors import MergeError
from hf_unified_embed.merge.analysis import DeltaReport, analyze_deltas
from hf_unified_embed.merge.api import merge_models, run_merge
from hf_unified_embed.merge.config import CardConfig, MergeConfig, ModelSpec
from hf_unified_embed.merge.layers import group_tensor_names, layer_group
from hf_unified_embed.merge.loader import LazyCheckpoint, TensorInfo
from hf_unified_embed.merge.methods import (
    MERGE_METHODS,
    Hierarchical,
    LinearMergeMethod,
    MergeMethod,
    Slerp,
    Soup,
    TaskArithmetic,
    fusion_weights,
    get_merge_method,
    register_merge_method,
)
from hf_unified_embed.merge.writer import ShardedSafetensorsWriter, parse_size

__all__ = [
    "MERGE_METHODS",
    "CardConfig",
    "DeltaReport",
    "Hierarchical",
    "LazyCheckpoint",
    "LinearMergeMethod",
    "MergeConfig",
    "MergeError",
    "MergeMethod",
    "ModelSpec",
    "ShardedSafetensorsWriter",
    "Slerp",
    "Soup",
    "TaskArithmetic",
    "TensorInfo",
    "analyze_deltas",
    "fusion_weights",
    "get_merge_method",
    "group_tensor_names",
    "layer_group",
    "merge_models",
    "parse_size",
    "register_merge_method",
    "run_merge",
]
