"""Streaming merges of sentence-transformers / transformers checkpoints, with merged-model cards.

Methods are small self-describing classes: the native, block-streamed ``soup``,
``task_arithmetic`` and CoDiEmb ``hierarchical`` (:data:`MERGE_METHODS`), and every method of
mergekit (``ties``, ``dare_ties``, ``della``, ``slerp``, ``model_stock``, …, :class:`MergekitMethod`)
computed by mergekit's own per-tensor code. They run over a loader that opens each input file once
(:class:`LazyCheckpoint`) and a writer that appends every result straight to its shard file
(:class:`ShardedSafetensorsWriter`). Linear methods need a few MB whatever the model size; the
others hold the inputs' copies of one tensor at a time.

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
from hf_unified_embed.merge.api import merge_models, open_inputs, run_merge
from hf_unified_embed.merge.engine import FolderSink, MemorySink, stream_merge
from hf_unified_embed.merge.layers import group_tensor_names, layer_group, layer_positions
from hf_unified_embed.merge.loader import LazyCheckpoint, TensorInfo
from hf_unified_embed.merge.merge_config import CardConfig, MergeConfig, ModelSpec
from hf_unified_embed.merge.methods import (
    MERGE_METHODS,
    Hierarchical,
    LinearMergeMethod,
    MergekitMethod,
    MergeMethod,
    Soup,
    TaskArithmetic,
    TensorMergeMethod,
    available_merge_methods,
    fusion_weights,
    get_merge_method,
    register_merge_method,
)
from hf_unified_embed.merge.writer import ShardedSafetensorsWriter, parse_size

__all__ = [
    "MERGE_METHODS",
    "CardConfig",
    "DeltaReport",
    "FolderSink",
    "Hierarchical",
    "LazyCheckpoint",
    "LinearMergeMethod",
    "MemorySink",
    "MergeConfig",
    "MergeError",
    "MergeMethod",
    "MergekitMethod",
    "ModelSpec",
    "ShardedSafetensorsWriter",
    "Soup",
    "TaskArithmetic",
    "TensorInfo",
    "TensorMergeMethod",
    "analyze_deltas",
    "available_merge_methods",
    "fusion_weights",
    "get_merge_method",
    "group_tensor_names",
    "layer_group",
    "layer_positions",
    "merge_models",
    "open_inputs",
    "parse_size",
    "register_merge_method",
    "run_merge",
    "stream_merge",
]
