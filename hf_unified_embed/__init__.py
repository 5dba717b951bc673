"""hf-unified-embed: one embedding model for retrieval and semantic similarity on the Hugging Face stack.

The package face re-exports the headline names: the losses, the sampler and collator, the unified
dataset's build / load / save / validate, training from a recipe, merging, evaluation, curriculum,
mining and publishing. Everything else is reached through its sub-package (docs/architecture.md):
``hf_unified_embed.errors`` (every error class), ``.schema``, ``.data``, ``.training``, ``.recipe``,
``.merge``, ``.evaluation``, ``.utils`` and the others.

Submodules are imported on first use so that light commands (``hf-unified-embed validate``) do not
pay for importing torch and sentence-transformers; the ``TYPE_CHECKING`` block gives type checkers
and IDEs the same names (a test keeps the two in step). Names and module paths of the 0.1 layout
still resolve for one release, with a ``DeprecationWarning`` naming the new path
(:mod:`hf_unified_embed.utils.deprecation`).
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from hf_unified_embed.errors import shown
from hf_unified_embed.utils.deprecation import install_finder

#: The installed release, from the package metadata (:func:`hf_unified_embed.utils.version.package_version`);
#: read on first use by :func:`__getattr__`, so that importing the package does not import importlib.metadata.
__version__: str

#: The headline names, by the sub-package that defines them.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "losses": (
        "AnglEJointLoss",
        "CoDiEmbSTSLoss",
        "CurriculumInfoNCELoss",
        "DistillKLLoss",
        "DistillMarginMSELoss",
        "EmbeddingLoss",
        "GURLoss",
        "InstructorLoss",
        "KeepBaseLoss",
        "MidLayerInfoNCELoss",
        "MultiPositiveInfoNCELoss",
        "PROLoss",
        "PearsonLoss",
        "RankKLLoss",
    ),
    "sampling": ("CurriculumBatchSampler", "MultiTaskStream"),
    "training": (
        "UnifiedDataCollator",
        "device_training_args",
        "exclude_instructions_from_pooling",
        "losses_for_tasks",
        "unified_training",
    ),
    "data": (
        "build_unified",
        "load_unified",
        "sample_recipe",
        "save_unified",
        "stream_unified",
        "validate_unified_folder",
    ),
    "merge": (
        "MergeConfig",
        "merge_models",
    ),
    "merge.search": ("search_merge",),
    "evaluation": (
        "load_suite",
        "run_suite",
    ),
    "recipe": (
        "TrainRecipe",
        "load_train_recipe",
        "train_from_recipe",
    ),
    "hub": (
        "push_folder",
        "push_unified",
    ),
    "curriculum": ("plan_curriculum",),
    "negatives": ("mine_hard_negatives",),
    "gur_pairs": ("mine_pairs",),
    "errors": ("HfUnifiedEmbedError",),
    "utils.model_loading": ("resolve_model",),
}

#: Names the package face re-exported in 0.1, by the module that holds them now.
_DEPRECATED: dict[str, str] = {
    "AfterTrainingError": "errors",
    "BatchPlan": "sampling",
    "BuildRecipe": "data",
    "CharWeights": "gur_pairs",
    "ColumnLayout": "losses",
    "CurriculumPlan": "curriculum",
    "DeltaReport": "merge",
    "Document": "gur_pairs",
    "EvaluationDataError": "errors",
    "EvaluationKind": "evaluation",
    "EvaluationSuite": "evaluation",
    "HardNegativeConfig": "negatives",
    "HubError": "errors",
    "IncompatibleStackError": "errors",
    "InputError": "errors",
    "InputNotFoundError": "errors",
    "LossOptionError": "errors",
    "LossParts": "losses",
    "MergeError": "errors",
    "MinedPair": "gur_pairs",
    "ModelConfig": "training.backbones",
    "NameRuleError": "errors",
    "OutputError": "errors",
    "OutputExistsError": "errors",
    "PairMiningConfig": "gur_pairs",
    "RecipeError": "errors",
    "ResampleEachEpochCallback": "training",
    "SecretLeakError": "errors",
    "SourceFormatError": "errors",
    "SourceSpec": "data",
    "StagedOutput": "utils.outputs",
    "SuiteError": "errors",
    "SuiteResults": "evaluation",
    "TASK_TYPES": "schema",
    "UNIFIED_FEATURES": "schema",
    "UnifiedEmbedBuilder": "data",
    "UnifiedModelCardData": "recipe.model_card",
    "UnifiedSchemaError": "errors",
    "UsageError": "errors",
    "analyze_deltas": "merge",
    "available_merge_methods": "merge",
    "build_batch_plan": "sampling",
    "build_evaluators": "evaluation",
    "build_model": "training.backbones",
    "build_sequential_evaluator": "evaluation",
    "check_split_name": "utils.naming",
    "check_task_name": "utils.naming",
    "embedding_space_diagnostics": "evaluation",
    "load_build_recipe": "data",
    "merge_adapter": "training.backbones",
    "mine_dataset": "gur_pairs",
    "mine_document": "gur_pairs",
    "mine_negatives_folder": "negatives",
    "prompts_from_unified": "training",
    "recipe_from_dict": "recipe.train_recipe",
    "redact": "utils.redaction",
    "register_evaluation_kind": "evaluation",
    "register_merge_method": "merge",
    "register_source_format": "data",
    "render_template": "utils.templates",
    "score_difficulty": "curriculum",
    "scrub_text": "utils.redaction",
    "solve_task_order": "curriculum",
    "task_representations": "curriculum",
    "template_path": "utils.templates",
    "unified_features": "schema",
    "validate_unified": "schema",
    "weighted_lcs": "gur_pairs",
    "without_cudnn_attention": "training.backbones",
}

if TYPE_CHECKING:
    from hf_unified_embed.curriculum import (
        plan_curriculum,
    )
    from hf_unified_embed.data import (
        build_unified,
        load_unified,
        sample_recipe,
        save_unified,
        stream_unified,
        validate_unified_folder,
    )
    from hf_unified_embed.errors import (
        HfUnifiedEmbedError,
    )
    from hf_unified_embed.evaluation import (
        load_suite,
        run_suite,
    )
    from hf_unified_embed.gur_pairs import (
        mine_pairs,
    )
    from hf_unified_embed.hub import (
        push_folder,
        push_unified,
    )
    from hf_unified_embed.losses import (
        AnglEJointLoss,
        CoDiEmbSTSLoss,
        CurriculumInfoNCELoss,
        DistillKLLoss,
        DistillMarginMSELoss,
        EmbeddingLoss,
        GURLoss,
        InstructorLoss,
        KeepBaseLoss,
        MidLayerInfoNCELoss,
        MultiPositiveInfoNCELoss,
        PearsonLoss,
        PROLoss,
        RankKLLoss,
    )
    from hf_unified_embed.merge import (
        MergeConfig,
        merge_models,
    )
    from hf_unified_embed.merge.search import (
        search_merge,
    )
    from hf_unified_embed.negatives import (
        mine_hard_negatives,
    )
    from hf_unified_embed.recipe import (
        TrainRecipe,
        load_train_recipe,
        train_from_recipe,
    )
    from hf_unified_embed.sampling import (
        CurriculumBatchSampler,
        MultiTaskStream,
    )
    from hf_unified_embed.training import (
        UnifiedDataCollator,
        device_training_args,
        exclude_instructions_from_pooling,
        losses_for_tasks,
        unified_training,
    )
    from hf_unified_embed.utils.model_loading import (
        resolve_model,
    )

_NAME_TO_MODULE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_NAME_TO_MODULE)

install_finder()


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from hf_unified_embed.utils.version import package_version

        globals()[name] = version = package_version()
        return version
    module = _NAME_TO_MODULE.get(name)
    if module is None and name in _DEPRECATED:
        module = _DEPRECATED[name]
        warnings.warn(
            f"hf_unified_embed.{name} is no longer re-exported; import it from hf_unified_embed.{module} "
            "(the old name works for one release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    if module is None:
        raise AttributeError(f"module 'hf_unified_embed' has no attribute {shown(name)}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
