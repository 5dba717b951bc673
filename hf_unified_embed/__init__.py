"""hf-unified-embed: one embedding model for retrieval and semantic similarity on the Hugging Face stack.

The public API is re-exported here. Submodules are imported on first use so that light commands
(``hf-unified-embed validate``) do not pay for importing torch and sentence-transformers; the
``TYPE_CHECKING`` block gives type checkers and IDEs the same names (a test keeps the two in step).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# One entry per submodule; each owner keeps its own line up to date.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "errors": (
        "AfterTrainingError",
        "EvaluationDataError",
        "HfUnifiedEmbedError",
        "HubError",
        "IncompatibleStackError",
        "InputError",
        "InputNotFoundError",
        "LossOptionError",
        "MergeError",
        "NameRuleError",
        "OutputError",
        "OutputExistsError",
        "RecipeError",
        "SecretLeakError",
        "SourceFormatError",
        "SuiteError",
        "UnifiedSchemaError",
        "UsageError",
    ),
    "schema": (
        "TASK_TYPES",
        "UNIFIED_FEATURES",
        "unified_features",
        "validate_unified",
    ),
    "naming": (
        "check_split_name",
        "check_task_name",
    ),
    "outputs": ("StagedOutput",),
    "redaction": (
        "redact",
        "scrub_text",
    ),
    "cards": (
        "render_template",
        "template_path",
    ),
    "model_card": ("UnifiedModelCardData",),
    "recipe": (
        "TrainRecipe",
        "load_train_recipe",
        "recipe_from_dict",
    ),
    "train": ("train_from_recipe",),
    "backbones": ("ModelConfig", "build_model", "merge_adapter", "without_cudnn_attention"),
    "losses": (
        "AnglEJointLoss",
        "CoDiEmbSTSLoss",
        "ColumnLayout",
        "CurriculumInfoNCELoss",
        "DistillKLLoss",
        "DistillMarginMSELoss",
        "EmbeddingLoss",
        "GURLoss",
        "InstructorLoss",
        "KeepBaseLoss",
        "LossParts",
        "MidLayerInfoNCELoss",
        "MultiPositiveInfoNCELoss",
        "PROLoss",
        "PearsonLoss",
        "RankKLLoss",
    ),
    "data": (
        "BuildRecipe",
        "SourceSpec",
        "UnifiedEmbedBuilder",
        "build_unified",
        "load_build_recipe",
        "load_unified",
        "register_source_format",
        "save_unified",
        "validate_unified_folder",
    ),
    "publishing": (
        "push_folder",
        "push_unified",
    ),
    "sampling": (
        "BatchPlan",
        "CurriculumBatchSampler",
        "build_batch_plan",
    ),
    "training": (
        "ResampleEachEpochCallback",
        "UnifiedDataCollator",
        "device_training_args",
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
    "negatives": (
        "HardNegativeConfig",
        "mine_hard_negatives",
        "mine_negatives_folder",
    ),
    "curriculum": (
        "CurriculumPlan",
        "plan_curriculum",
        "score_difficulty",
        "solve_task_order",
        "task_representations",
    ),
    "merge": (
        "DeltaReport",
        "MergeConfig",
        "analyze_deltas",
        "available_merge_methods",
        "merge_models",
        "register_merge_method",
    ),
    "merge.search": ("search_merge",),
    "evaluation": (
        "EvaluationKind",
        "EvaluationSuite",
        "SuiteResults",
        "build_evaluators",
        "build_sequential_evaluator",
        "embedding_space_diagnostics",
        "load_suite",
        "register_evaluation_kind",
        "run_suite",
    ),
}

if TYPE_CHECKING:
    from hf_unified_embed.backbones import ModelConfig, build_model, merge_adapter, without_cudnn_attention
    from hf_unified_embed.cards import (
        render_template,
        template_path,
    )
    from hf_unified_embed.curriculum import (
        CurriculumPlan,
        plan_curriculum,
        score_difficulty,
        solve_task_order,
        task_representations,
    )
    from hf_unified_embed.data import (
        BuildRecipe,
        SourceSpec,
        UnifiedEmbedBuilder,
        build_unified,
        load_build_recipe,
        load_unified,
        register_source_format,
        save_unified,
        validate_unified_folder,
    )
    from hf_unified_embed.errors import (
        AfterTrainingError,
        EvaluationDataError,
        HfUnifiedEmbedError,
        HubError,
        IncompatibleStackError,
        InputError,
        InputNotFoundError,
        LossOptionError,
        MergeError,
        NameRuleError,
        OutputError,
        OutputExistsError,
        RecipeError,
        SecretLeakError,
        SourceFormatError,
        SuiteError,
        UnifiedSchemaError,
        UsageError,
    )
    from hf_unified_embed.evaluation import (
        EvaluationKind,
        EvaluationSuite,
        SuiteResults,
        build_evaluators,
        build_sequential_evaluator,
        embedding_space_diagnostics,
        load_suite,
        register_evaluation_kind,
        run_suite,
    )
    from hf_unified_embed.losses import (
        AnglEJointLoss,
        CoDiEmbSTSLoss,
        ColumnLayout,
        CurriculumInfoNCELoss,
        DistillKLLoss,
        DistillMarginMSELoss,
        EmbeddingLoss,
        GURLoss,
        InstructorLoss,
        KeepBaseLoss,
        LossParts,
        MidLayerInfoNCELoss,
        MultiPositiveInfoNCELoss,
        PearsonLoss,
        PROLoss,
        RankKLLoss,
    )
    from hf_unified_embed.merge import (
        DeltaReport,
        MergeConfig,
        analyze_deltas,
        available_merge_methods,
        merge_models,
        register_merge_method,
    )
    from hf_unified_embed.merge.search import search_merge
    from hf_unified_embed.mining import (
        CharWeights,
        Document,
        MinedPair,
        PairMiningConfig,
        mine_dataset,
        mine_document,
        mine_pairs,
        weighted_lcs,
    )
    from hf_unified_embed.model_card import (
        UnifiedModelCardData,
    )
    from hf_unified_embed.naming import (
        check_split_name,
        check_task_name,
    )
    from hf_unified_embed.negatives import (
        HardNegativeConfig,
        mine_hard_negatives,
        mine_negatives_folder,
    )
    from hf_unified_embed.outputs import (
        StagedOutput,
    )
    from hf_unified_embed.publishing import (
        push_folder,
        push_unified,
    )
    from hf_unified_embed.recipe import (
        TrainRecipe,
        load_train_recipe,
        recipe_from_dict,
    )
    from hf_unified_embed.redaction import (
        redact,
        scrub_text,
    )
    from hf_unified_embed.sampling import (
        BatchPlan,
        CurriculumBatchSampler,
        build_batch_plan,
    )
    from hf_unified_embed.schema import (
        TASK_TYPES,
        UNIFIED_FEATURES,
        unified_features,
        validate_unified,
    )
    from hf_unified_embed.train import (
        train_from_recipe,
    )
    from hf_unified_embed.training import (
        ResampleEachEpochCallback,
        UnifiedDataCollator,
        device_training_args,
        exclude_instructions_from_pooling,
        losses_for_tasks,
        prompts_from_unified,
    )

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
