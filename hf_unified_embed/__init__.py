"""hf-unified-embed: one embedding model for retrieval and semantic similarity on the Hugging Face stack.

The public API is re-exported here. Submodules are imported on first use so that light commands
(``hf-unified-embed validate``) do not pay for importing torch and sentence-transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# One entry per submodule; each owner keeps its own line up to date.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "schema": (
        "TASK_TYPES",
        "UNIFIED_FEATURES",
        "UnifiedSchemaError",
        "unified_features",
        "validate_unified",
    ),
    "cards": ("render_template", "template_path"),
    "model_card": ("UnifiedModelCardData",),
    "recipe": ("TrainRecipe", "load_recipe", "recipe_from_dict"),
    "train": ("train_from_recipe",),
    "losses": (
        "AnglEJointLoss",
        "CoDiEmbSTSLoss",
        "CurriculumInfoNCELoss",
        "EmbeddingLoss",
        "InstructorLoss",
        "MidLayerInfoNCELoss",
        "MultiPositiveInfoNCELoss",
        "PROLoss",
        "PearsonLoss",
        "RankKLLoss",
    ),
    "data": (
        "BuildRecipe",
        "SourceFormatError",
        "SourceSpec",
        "UnifiedEmbedBuilder",
        "build_unified",
        "load_unified",
        "register_source_format",
        "save_unified",
    ),
    "publishing": ("push_folder", "push_unified"),
    "sampling": ("BatchPlan", "CurriculumBatchSampler", "build_batch_plan"),
    "training": (
        "ColumnLayout",
        "ResampleEachEpochCallback",
        "UnifiedDataCollator",
        "exclude_instructions_from_pooling",
        "losses_for_tasks",
        "prompts_from_unified",
    ),
    "mining": (
        "CharWeights",
        "Document",
        "MinedPair",
        "PairMiningConfig",
        "mine_dataset",
        "mine_document",
        "mine_pairs",
        "weighted_lcs",
    ),
    "curriculum": (
        "CurriculumPlan",
        "plan_curriculum",
        "score_difficulty",
        "solve_task_order",
        "task_representations",
    ),
    "merge": ("DeltaReport", "MergeConfig", "MergeError", "analyze_deltas", "merge_models", "register_merge_method"),
    "evaluation": (
        "EvaluationSuite",
        "SuiteResults",
        "build_evaluators",
        "build_sequential_evaluator",
        "embedding_space_diagnostics",
        "load_suite",
        "run_suite",
    ),
}

_NAME_TO_MODULE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_NAME_TO_MODULE)


def __getattr__(name: str) -> Any:
    module = _NAME_TO_MODULE.get(name)
    if module is None:
        raise AttributeError(f"module 'hf_unified_embed' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
