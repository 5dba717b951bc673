"""Recipe preflight, training arguments: the ``training_args`` keys, values and engine fit this run.

Every key is a ``SentenceTransformerTrainingArguments`` field (an unknown key is reported with the closest
valid name), each scalar value has its field's type and lies in the range the optimizer, sampler and data
loader accept, the arguments build, and they fit this run: FSDP needs GPUs and several processes, the run
has no ``eval_dataset``, ``report_to`` names installed integrations, a checkpoint to resume from exists; the
``accelerate launch`` engine can run here. :func:`training_settings` gives the run's defaults under the
recipe's own values.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from hf_unified_embed.errors import InputNotFoundError, RecipeError, UsageError, shown
from hf_unified_embed.recipe.preflight_losses import yaml_number_hint
from hf_unified_embed.recipe.preflight_sampler import check_batch_sampler
from hf_unified_embed.recipe.train_recipe import TrainRecipe
from hf_unified_embed.utils import stack
from hf_unified_embed.utils.processes import world_size
from hf_unified_embed.utils.redaction import remember_secret
from hf_unified_embed.utils.typecheck import field_annotations, type_problem

#: ``training_args`` keys the recipe sets through its own sections instead.
_RESERVED_TRAINING_ARGS = {
    "multi_dataset_batch_sampler": "sampler",
    "prompts": "instructions",
}


def check_training_arg_names(settings: Mapping[str, Any], origin: str, *, in_source: bool = False) -> None:
    """Every key must be a ``SentenceTransformerTrainingArguments`` field; suggest the closest one otherwise.

    ``in_source``: read the fields from the source files (nothing imported) and check nothing when they
    cannot be read there.
    """
    if in_source:
        from hf_unified_embed.recipe import source_signatures as source

        found = source.find_class("sentence_transformers", "SentenceTransformerTrainingArguments")
        names = source.dataclass_field_names(found) if isinstance(found, source.SourceClass) else None
        if names is None:
            return
        fields = names
    else:
        from sentence_transformers import SentenceTransformerTrainingArguments

        fields = {field.name for field in dataclasses.fields(SentenceTransformerTrainingArguments)}
    for key in settings:
        if key in _RESERVED_TRAINING_ARGS:
            raise RecipeError(
                f"{origin}: training_args.{key}: set it with the recipe's '{_RESERVED_TRAINING_ARGS[key]}' key"
            )
        if key not in fields:
            hint = difflib.get_close_matches(key, fields, n=1)
            suggestion = f"; did you mean {shown(hint[0])}?" if hint else ""
            raise RecipeError(
                f"{origin}: training_args.{key} is not a SentenceTransformerTrainingArguments field{suggestion}"
            )


#: ``SentenceTransformerTrainingArguments`` values that build but fail once training starts (the
#: optimizer, the sampler, the data loader or numpy refuse them) or make no sense.
_TRAINING_ARG_BOUNDS: dict[str, Any] = {
    "per_device_train_batch_size": Field(ge=1),
    "per_device_eval_batch_size": Field(ge=1),
    "gradient_accumulation_steps": Field(ge=1),
    "eval_accumulation_steps": Field(ge=1),
    "learning_rate": Field(ge=0),
    "weight_decay": Field(ge=0),
    "adam_beta1": Field(ge=0, lt=1),
    "adam_beta2": Field(ge=0, lt=1),
    "adam_epsilon": Field(ge=0),
    "max_grad_norm": Field(ge=0),
    "num_train_epochs": Field(ge=0),
    "max_steps": Field(ge=-1),
    "warmup_steps": Field(ge=0),
    "warmup_ratio": Field(ge=0, le=1),
    "logging_steps": Field(gt=0),
    "save_steps": Field(gt=0),
    "eval_steps": Field(gt=0),
    "dataloader_num_workers": Field(ge=0),
    "dataloader_prefetch_factor": Field(ge=1),
    "seed": Field(ge=0, lt=2**32),
    "data_seed": Field(ge=0, lt=2**32),
}
#: Annotations whose values are checked by type: scalars. Compound fields (``report_to``,
#: ``lr_scheduler_type``, ...) accept more than their annotations say and are checked by the class itself.
_SCALARS = (int, float, bool, str, type(None))
#: Scalar-annotated fields that take more: ``fsdp: true`` or a list of options; ``train()`` resumes
#: from the last checkpoint with ``resume_from_checkpoint: true`` (checked in :func:`check_training_args_fit_the_run`).
_WIDER_THAN_ANNOTATED = ("fsdp", "resume_from_checkpoint")


def check_training_arg_values(settings: Mapping[str, Any], origin: str) -> None:
    """Each value fits its field: the annotated type (``learning_rate: fast`` is refused) and the bounds above."""
    from sentence_transformers import SentenceTransformerTrainingArguments

    annotations = field_annotations(SentenceTransformerTrainingArguments)
    for key, value in settings.items():
        annotation = annotations.get(key)
        union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
        members = typing.get_args(annotation) if union else (annotation,)
        if key not in _WIDER_THAN_ANNOTATED and all(member in _SCALARS for member in members):
            problem = type_problem(annotation, value)
            if problem:
                raise RecipeError(
                    f"{origin}: training_args.{key}: {problem}, got {shown(value)}{yaml_number_hint(value)}"
                )
        if key in _TRAINING_ARG_BOUNDS and value is not None:
            problem = type_problem(Annotated[float, _TRAINING_ARG_BOUNDS[key]], value)
            if problem:
                raise RecipeError(f"{origin}: training_args.{key}: {problem}, got {shown(value)}")


def check_training_args_fit_the_run(args: Any, recipe: TrainRecipe, origin: str) -> None:
    """What ``SentenceTransformerTrainer`` and ``train()`` would refuse only after the data and model load."""
    import torch
    from transformers.trainer_utils import IntervalStrategy, get_last_checkpoint
    from transformers.training_args import ParallelMode

    if args.fsdp:
        if not torch.cuda.is_available():
            raise RecipeError(
                f"{origin}: training_args.fsdp: FSDP shards the model across GPUs and this machine has none; "
                "remove fsdp (several CPU processes train with DDP under torchrun)"
            )
        if args.parallel_mode != ParallelMode.DISTRIBUTED:
            raise RecipeError(
                f"{origin}: training_args.fsdp: FSDP needs several processes; launch with "
                "`python -m hf_unified_embed.cli.launch --nproc_per_node=N train ...` or `accelerate launch`"
            )
    from huggingface_hub.constants import HF_HUB_OFFLINE

    if args.push_to_hub and HF_HUB_OFFLINE:
        # The trainer creates the Hub repository in its constructor, after the data and model load.
        raise RecipeError(
            f"{origin}: training_args.push_to_hub: true, but the Hub is offline (HF_HUB_OFFLINE=1); remove it, "
            "or unset HF_HUB_OFFLINE (the recipe's 'hub' key pushes the final model and card after training)"
        )
    if args.eval_strategy != IntervalStrategy.NO:
        raise RecipeError(
            f"{origin}: training_args.eval_strategy {shown(args.eval_strategy.value)}: the run has no eval_dataset; "
            "evaluate with the recipe's 'evaluation' suite (after training) and leave eval_strategy at 'no'"
        )
    from transformers.integrations import get_reporting_integration_callbacks

    try:
        # What the trainer builds from report_to: an unknown name or a missing package fails here.
        for callback in get_reporting_integration_callbacks(args.report_to):
            callback()
    except (ValueError, RuntimeError, ImportError) as error:
        raise RecipeError(f"{origin}: training_args.report_to {shown(args.report_to)}: {error}") from None
    resume = recipe.training_args.get("resume_from_checkpoint")
    if isinstance(resume, str) and not Path(resume).expanduser().is_dir():
        raise InputNotFoundError(f"{origin}: training_args.resume_from_checkpoint: {resume} does not exist")
    if resume is True and (not Path(args.output_dir).is_dir() or get_last_checkpoint(args.output_dir) is None):
        raise InputNotFoundError(
            f"{origin}: training_args.resume_from_checkpoint: true, but {args.output_dir} holds no checkpoint-* folder"
        )


def check_engine() -> None:
    """Refuse an ``accelerate launch`` engine that cannot run here, instead of a silent fallback.

    accelerate turns FSDP on only for GPUs (on CPU it trains with plain DDP and says nothing), and
    DeepSpeed needs its package and GPUs.
    """
    import torch

    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        fsdp_version = int(os.environ.get("FSDP_VERSION", "1"))
        stack.check(f"the accelerate config's FSDP (fsdp_version {fsdp_version})", stack.fsdp_needs(fsdp_version))
        if not torch.cuda.is_available():
            raise UsageError(
                "the accelerate config asks for FSDP, which accelerate runs on GPUs only; on this machine it would "
                "train with plain DDP. Use a MULTI_CPU config on CPU (examples/accelerate/multi_cpu.yaml)"
            )
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        stack.check("the accelerate config's DeepSpeed", stack.deepspeed_needs())
        if not torch.cuda.is_available():
            raise UsageError("the accelerate config asks for DeepSpeed, which needs GPUs")


#: ``training_args`` keys that mean something only when checkpoints are saved.
CHECKPOINT_KEYS = ("save_steps", "save_total_limit", "save_only_model")


def default_save_strategy(settings: Mapping[str, Any]) -> str:
    """The run's ``save_strategy`` when the recipe sets none: ``no`` (a run saves its model, not checkpoints),
    but ``steps`` — transformers' default — when it sets a checkpoint option (:data:`CHECKPOINT_KEYS`):
    ``save_steps: 500`` alone saves a checkpoint every 500 steps, as it does in transformers."""
    if any(settings.get(key) not in (None, False) for key in CHECKPOINT_KEYS):
        return "steps"
    return "no"


def training_settings(recipe: TrainRecipe, origin: str) -> tuple[dict[str, Any], str | None]:
    """The keyword arguments of the run's ``SentenceTransformerTrainingArguments``, checked, and the hub token.

    The run's defaults come first — no tracker, no checkpoints unless a checkpoint option asks for them
    (:func:`default_save_strategy`), the recipe's seed, and the device's fastest correct step
    (:func:`~hf_unified_embed.training.devices.device_training_args`: on CUDA bf16
    autocast where the GPU computes bfloat16 natively, TF32 matmuls, pinned memory and dataloader workers;
    on the CPU none of these; persistent workers wherever there are workers) — then the recipe's
    ``training_args``, which always win: ``bf16: false``,
    ``fp16: true`` (no bf16 default beside it), ``tf32: false``, ``dataloader_num_workers: 0`` or
    ``use_cpu: true`` (no GPU defaults) are kept as written. A launcher's precision
    (``ACCELERATE_MIXED_PRECISION``) and weights loaded in float16 (``model.torch_dtype: float16``) are
    explicit choices too: no bf16 default with either.
    """
    import torch

    from hf_unified_embed.training.devices import device_training_args

    user = dict(recipe.training_args)
    hub_token = user.pop("hub_token", None)
    remember_secret(hub_token)
    check_training_arg_names(user, origin)
    check_training_arg_values(user, origin)
    check_batch_sampler(recipe, origin)
    settings: dict[str, Any] = {
        "report_to": "none",
        "save_strategy": default_save_strategy(user),
        "seed": recipe.seed,
        **device_training_args(explicit=user, parameters=_base_parameters(recipe, user)),
    }
    if recipe.model is not None and recipe.model.torch_dtype == "float16":
        settings.pop("bf16", None)
    if world_size() > 1 and not torch.cuda.is_available():
        # transformers only sets up DDP on CPU when told to; otherwise every process trains alone.
        settings.update(use_cpu=True, ddp_backend="gloo")
    mixed_precision = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    if mixed_precision in ("bf16", "fp16"):
        # The launcher's precision; DeepSpeed refuses a TrainingArguments that disagrees with it.
        settings[mixed_precision] = True
    if user.get("deepspeed"):
        stack.check("training_args.deepspeed", stack.deepspeed_needs(), origin=origin)
        if not torch.cuda.is_available():
            raise RecipeError(f"{origin}: training_args.deepspeed: DeepSpeed needs GPUs and this machine has none")
    if recipe.data.streaming:
        # MultiTaskStream: read in the training process, split by accelerate with dispatch_batches off, resumed
        # from its own saved state (check_streaming refused settings that contradict these).
        settings.pop("dataloader_num_workers", None)
        settings.pop("dataloader_persistent_workers", None)
        settings["ignore_data_skip"] = True
        settings["accelerator_config"] = {**user.pop("accelerator_config", {}), "dispatch_batches": False}
    settings.update(user)
    settings.setdefault("output_dir", f"{recipe.output_dir}-checkpoints")
    return settings, hub_token


def _base_parameters(recipe: TrainRecipe, user: dict[str, Any]) -> int | None:
    """The base model's number of parameters, from its configuration on the meta device, where the device
    defaults would choose a precision with it (CUDA, no precision in the recipe); ``None`` otherwise or
    where the configuration cannot be read here (loading the model reports that)."""
    import torch

    from hf_unified_embed.training.backbones import meta_transformer

    if not torch.cuda.is_available() or user.get("use_cpu") or {"bf16", "fp16"} & user.keys():
        return None
    try:
        model = meta_transformer(recipe.resolved_base_model(), recipe.model)
    except (ImportError, ValueError):  # check_model_configuration names the problem
        return None
    return None if model is None else sum(parameter.numel() for parameter in model.parameters())


def training_arguments(recipe: TrainRecipe, origin: str) -> tuple[Any, str | None]:
    from sentence_transformers import SentenceTransformerTrainingArguments

    settings, hub_token = training_settings(recipe, origin)
    try:
        args = SentenceTransformerTrainingArguments(**settings)
    except (TypeError, ValueError) as error:
        raise RecipeError(f"{origin}: training_args: {error}") from None
    check_training_args_fit_the_run(args, recipe, origin)
    return args, hub_token
