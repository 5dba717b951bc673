"""Recipe preflight: everything about a training recipe that can be checked is checked before any data loads.

A GPU hour must not be spent to find a typo, nor the seconds it takes to import the training stack.
:func:`quick_preflight` runs first and imports none of it (torch, transformers, sentence-transformers):
loss names and their keyword names and the ``training_args`` names, all read from the source files;
the sampler's tasks and processes; the local paths, ``base_model`` a model folder; ``hub.repo_id``.
:func:`preflight` runs it, then resolves and checks, in this order, without loading the data or the model:

* every loss name resolves — this package's losses, sentence-transformers' losses, or a user's own
  class named ``package.module:Class`` — its keyword arguments bind to the class's signature and each
  value fits its parameter's annotation (``temperature: "hot"`` is refused, naming the key);
* every ``training_args`` key is a ``SentenceTransformerTrainingArguments`` field (an unknown key is
  reported with the closest valid name), each scalar value has its field's type and lies in the range
  the optimizer, sampler and data loader accept (``learning_rate: fast``, ``per_device_train_batch_size:
  0``), the arguments build, and they fit this run: FSDP needs GPUs and several processes, the run has
  no ``eval_dataset`` (``eval_strategy`` stays ``no``), ``report_to`` names installed integrations, a
  checkpoint to resume from exists;
* the ``accelerate launch`` engine can run here (FSDP and DeepSpeed need GPUs) with the installed packages;
* LoRA/QLoRA (``peft:``) can run with the installed packages: PEFT at least at the release the installed
  transformers accepts (:mod:`hf_unified_embed.utils.stack`);
* ``model.attn_implementation`` and the LoRA ``target_modules`` resolve against the base model built
  from its configuration on the meta device (no weights): transformers and PEFT decide, as they would
  when the weights load; ``model.attention`` fits the base model's family and depth;
* the sampler fits the run: sentence-transformers' stock samplers mix tasks across processes in one
  step (measured: a gloo collective mismatch after a few steps), so with several processes they are
  refused unless ``sampler.allow_multi_device: true``; ``training_args.batch_sampler: no_duplicates``
  needs one of them (the curriculum sampler orders rows itself), and ``group_by_label`` a label column
  that unified rows lack;
* a streaming run (``data.streaming: true``) sets ``max_steps`` and nothing a stream cannot do (the
  in-memory sampler's ordering options, a curriculum, ``max_rows_per_task``, dataloader workers, the
  trainer's replay of the data on resume); ``sampler.weights`` name every task and only with streaming;
* the curriculum plan file loads; the PEFT config builds; the evaluation suite loads and its files exist;
* the data folder and the base model exist when they are local paths, and a local base model is a model
  folder (``modules.json``, ``config.json`` or ``adapter_config.json``); ``hub.repo_id`` is a valid id;
* the output folder may be written: it is not an input, it is empty or ``overwrite`` was given (checked
  on every process of a launched run, so that all of them stop on the same error).

Each problem raises :class:`~hf_unified_embed.errors.RecipeError` (or the located error of the
file concerned) naming the recipe and the key.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import inspect
import os
import types
import typing
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

from pydantic import Field

from hf_unified_embed.errors import (
    HfUnifiedEmbedError,
    InputError,
    InputNotFoundError,
    RecipeError,
    SuiteError,
    UsageError,
    shown,
)
from hf_unified_embed.recipe.train_recipe import TrainRecipe
from hf_unified_embed.utils import stack
from hf_unified_embed.utils.locations import looks_local
from hf_unified_embed.utils.outputs import check_output
from hf_unified_embed.utils.plugins import import_object, is_import_path
from hf_unified_embed.utils.processes import world_size
from hf_unified_embed.utils.redaction import remember_secret
from hf_unified_embed.utils.typecheck import constructor_parameters, field_annotations, mismatched_field, type_problem

if TYPE_CHECKING:
    from torch import nn

#: ``training_args`` keys the recipe sets through its own sections instead.
_RESERVED_TRAINING_ARGS = {
    "multi_dataset_batch_sampler": "sampler",
    "prompts": "instructions",
}


@dataclass
class ResolvedRecipe:
    """A recipe after preflight: resolved loss classes and the checked settings the run is built from.

    Attributes:
        recipe: the recipe.
        losses: ``{task type or task name: (loss class, kwargs)}``.
        training_args: the ``SentenceTransformerTrainingArguments`` of the run (the sampler is set later,
            once the curriculum's task order is known).
        hub_token: a ``training_args.hub_token`` taken out of the arguments (so no checkpoint pickles it)
            and used for the final push.
        suite: the loaded evaluation suite, if any.
        peft_config: the built ``peft.LoraConfig``, if any.
        merge_adapter: fold the trained adapter into the base weights before saving (``peft.merge_adapter``).
        overwrite: replace an existing output folder (checked: see :func:`~hf_unified_embed.utils.outputs.check_output`).
        inputs: the local paths the run reads, which its output may not overlap.
    """

    recipe: TrainRecipe
    losses: dict[str, tuple[type[nn.Module], dict[str, Any]]]
    training_args: Any
    hub_token: str | None
    suite: Any | None
    peft_config: Any | None
    merge_adapter: bool
    overwrite: bool
    inputs: list[str]


def resolve_loss_class(name: str, where: str = "losses") -> type[nn.Module]:
    """A loss class by name: ``package.module:Class``, else this package's losses, else sentence-transformers'."""
    from sentence_transformers.sentence_transformer import losses as st_losses
    from torch import nn

    from hf_unified_embed import losses as unified_losses

    if is_import_path(name):
        candidate = import_object(name, RecipeError, where)
    else:
        candidate = getattr(unified_losses, name, None)
        if candidate is None:
            candidate = getattr(st_losses, name, None)
    if isinstance(candidate, type) and issubclass(candidate, nn.Module):
        return candidate
    raise _unknown_loss(name, [n for module in (unified_losses, st_losses) for n in dir(module)], where)


def _unknown_loss(name: str, known: list[str], where: str) -> RecipeError:
    hint = difflib.get_close_matches(name, [n for n in known if n.endswith("Loss")], n=1)
    suggestion = f"; did you mean {shown(hint[0])}?" if hint else ""
    return RecipeError(
        f"{where}: unknown loss {shown(name)}: not a loss of hf_unified_embed.losses or sentence-transformers, "
        f"nor a 'package.module:Class'{suggestion}"
    )


def _bind_loss_kwargs(cls: type[nn.Module], kwargs: Mapping[str, Any], where: str) -> None:
    """The keywords bind to the loss's signature and each value fits its parameter's annotation."""
    signature = inspect.signature(cls)
    try:
        signature.bind(None, **kwargs)  # the model is the first argument
    except TypeError as error:
        names = [p for p in list(signature.parameters)[1:] if p not in ("args", "kwargs")]
        raise _loss_kwargs_error(where, cls.__name__, str(error), names) from None
    parameters = constructor_parameters(cast(Hashable, cls))
    for key, value in kwargs.items():
        problem = type_problem(parameters[key][0], value) if key in parameters else None
        if problem:
            raise RecipeError(
                f"{where}.{key} (of {cls.__name__}): {problem}, got {shown(value)}{_yaml_number_hint(value)}"
            )


def _loss_kwargs_error(where: str, class_name: str, problem: str, names: list[str]) -> RecipeError:
    return RecipeError(f"{where}: {class_name}: {problem}; its parameters: {names}")


#: Where a loss named by its bare class name is looked up, in this order (:func:`resolve_loss_class`).
_LOSS_MODULES = ("hf_unified_embed.losses", "sentence_transformers.sentence_transformer.losses")


def check_loss_in_source(spec: Mapping[str, Any], where: str) -> None:
    """The loss name and its keyword names, checked in the source files (nothing imported): an unknown
    loss or keyword is refused with the message of :func:`resolve_loss_class` / :func:`_bind_loss_kwargs`.

    Whatever the source does not settle (a user's module, an inherited ``__init__``, ``**kwargs``, the
    values' types) is left to those, after the import.
    """
    from hf_unified_embed.recipe import source_signatures as source

    name = spec["name"]
    if is_import_path(name):
        module, _, attribute = name.partition(":")
        found = source.find_class(module, attribute)
    else:
        found = source.ABSENT
        for module in _LOSS_MODULES:
            found = source.find_class(module, name)
            if found is not source.ABSENT:
                break
        if found is source.ABSENT:
            known = [source.bound_names(module) for module in _LOSS_MODULES]
            if all(names is not None for names in known):
                raise _unknown_loss(name, [n for names in known for n in names or ()], where)
    if not isinstance(found, source.SourceClass):
        return
    parameters = source.init_parameters(found)
    if not parameters:
        return
    by_name = {parameter.name: parameter for parameter in parameters[1:]}  # the model is the first argument
    if parameters[0].name in spec or any(
        p.kind == "positional_only" or (not p.has_default and p.name not in spec) for p in by_name.values()
    ):
        return  # bind reports another problem first
    for key in spec:
        if key != "name" and key not in by_name:
            names = [p.name for p in parameters[1:]]
            raise _loss_kwargs_error(where, found.name, f"got an unexpected keyword argument {shown(key)}", names)


def _yaml_number_hint(value: Any) -> str:
    """Why a number arrived as text: YAML 1.1 reads ``1e-4`` (no dot) as a string."""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return ""
        return "; YAML reads a number like 1e-4 without a dot as text: write 1.0e-4"
    return ""


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
                    f"{origin}: training_args.{key}: {problem}, got {shown(value)}{_yaml_number_hint(value)}"
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


def check_sampler_tasks(recipe: TrainRecipe, tasks: list[str] | None, origin: str) -> None:
    """``sampler.batch_sizes`` and ``sampler.weights`` name only tasks the run trains (a misspelt task would
    otherwise be found by the sampler, once training starts), and ``weights`` every one; ``tasks=None``: not
    known yet."""
    if tasks is None:
        return
    for key, named in (("batch_sizes", recipe.sampler.batch_sizes), ("weights", recipe.sampler.weights)):
        unknown = sorted(set(named) - set(tasks))
        if unknown:
            raise RecipeError(f"{origin}: sampler.{key} names task(s) {unknown} that the run does not train: {tasks}")
    missing = [task for task in tasks if task not in recipe.sampler.weights]
    if recipe.sampler.weights and missing:
        raise RecipeError(f"{origin}: sampler.weights gives no weight to task(s) {missing}; give every task one")


def check_sampler_processes(recipe: TrainRecipe, processes: int) -> None:
    """Refuse sentence-transformers' stock samplers with several processes unless explicitly allowed."""
    sampler = recipe.sampler
    if sampler.kind == "curriculum" or processes <= 1 or sampler.allow_multi_device:
        return
    raise RecipeError(
        f"{recipe.source}: sampler.kind {shown(sampler.kind)} with {processes} processes: sentence-transformers' "
        "stock samplers give each process a batch of a different task in the same step (accelerate hands "
        "batch k to process k % world_size), so gradients mix tasks and losses that gather across devices "
        "hang or crash (measured: a gloo collective size mismatch after a few steps). Use the default "
        "sampler (kind: curriculum, CurriculumBatchSampler), which keeps every process on one task per "
        "step, or set sampler.allow_multi_device: true to accept this"
    )


#: ``training_args.batch_sampler`` values (sentence-transformers' ``BatchSamplers``) that read the rows of
#: each task: they need a stock multi-dataset sampler, which draws every task's batches from them.
_ROW_BATCH_SAMPLERS = ("no_duplicates", "no_duplicates_hashed")


def check_batch_sampler(recipe: TrainRecipe, origin: str) -> None:
    """``training_args.batch_sampler`` (the order of rows within a task) fits the run's sampler.

    ``no_duplicates`` (and ``no_duplicates_hashed``) apply with the stock samplers (``sampler.kind:
    proportional | round_robin``), which take each task's batches from them; the collator keeps the
    columns that are the same in every row of a task out of the comparison
    (:attr:`~hf_unified_embed.training.collator.UnifiedDataCollator.valid_label_columns`), so the batches
    are full. ``CurriculumBatchSampler`` orders the rows itself and would ignore them, and
    ``group_by_label`` needs a label column that unified rows do not have: both are refused.
    """
    value = recipe.training_args.get("batch_sampler")
    if value is None or value == "batch_sampler":
        return
    if value == "group_by_label":
        raise RecipeError(
            f"{origin}: training_args.batch_sampler 'group_by_label' groups rows by a label column, and unified "
            "rows have none (a row's scores are drawn with its texts by the collator); leave batch_sampler out, "
            "or use no_duplicates with sampler.kind: proportional or round_robin"
        )
    if value in _ROW_BATCH_SAMPLERS and recipe.sampler.kind == "curriculum":
        raise RecipeError(
            f"{origin}: training_args.batch_sampler {shown(value)}: the curriculum sampler (sampler.kind: curriculum, "
            "the default) orders the rows of every task itself and would ignore it; set sampler.kind: "
            f"proportional (or round_robin) to train with batch_sampler: {value}, or leave batch_sampler out"
        )


def check_streaming(recipe: TrainRecipe, origin: str) -> None:
    """A ``data.streaming`` run uses only what a stream supports; ``sampler.weights`` needs one.

    :class:`~hf_unified_embed.sampling.MultiTaskStream` draws each step's task by weight and reads every
    task in the training process, resuming from its own state: the in-memory sampler's ordering options,
    a curriculum (it scores every row first), ``max_rows_per_task``, dataloader workers and the trainer's
    replay of the data on resume do not apply, and a stream has no length, so ``max_steps`` says how long
    to train.
    """
    data, sampler, args = recipe.data, recipe.sampler, recipe.training_args
    if not data.streaming:
        if sampler.weights:
            raise RecipeError(
                f"{origin}: sampler.weights apply to streaming runs (data.streaming: true); an in-memory run "
                "weighs its tasks with sampler.balance (none, equal, sqrt)"
            )
        return
    defaults = type(sampler)()
    accelerator = args.get("accelerator_config", {})
    refused = [  # (applies, the key as given, why a stream cannot take it)
        (
            sampler.kind != "curriculum",
            f"sampler.kind {shown(sampler.kind)}",
            "sentence-transformers' samplers read map-style datasets",
        ),
        (
            sampler.interleave != defaults.interleave,
            f"sampler.interleave {shown(sampler.interleave)}",
            "each step's task is drawn by weight (sampler.balance / weights)",
        ),
        (
            sampler.instance_order != defaults.instance_order,
            f"sampler.instance_order {shown(sampler.instance_order)}",
            "rows are shuffled in windows (data.shuffle_window)",
        ),
        (bool(sampler.batch_sizes), "sampler.batch_sizes", "every task trains at per_device_train_batch_size"),
        (recipe.curriculum is not None, "curriculum", "a curriculum scores every row of the data first"),
        (data.max_rows_per_task is not None, "data.max_rows_per_task", "train for training_args.max_steps instead"),
        (
            bool(args.get("dataloader_num_workers")),
            f"training_args.dataloader_num_workers {args.get('dataloader_num_workers')}",
            "the stream is read in the training process, where its resume state lives",
        ),
        (
            args.get("ignore_data_skip") is False,
            "training_args.ignore_data_skip false",
            "a resumed run continues from the stream state in the checkpoint",
        ),
        (
            not isinstance(accelerator, Mapping) or bool(accelerator.get("dispatch_batches")),
            "training_args.accelerator_config",
            "give it as a mapping without dispatch_batches: true (every process reads its own part of the stream)",
        ),
    ]
    for applies, key, reason in refused:
        if applies:
            raise RecipeError(f"{origin}: {key} does not apply with data.streaming: true: {reason}")
    max_steps = args.get("max_steps")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise RecipeError(
            f"{origin}: data.streaming: true needs training_args.max_steps (a positive int; a stream has no "
            f"length to count epochs by), got {shown(max_steps)}"
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
    on the CPU none of these) — then the recipe's ``training_args``, which always win: ``bf16: false``,
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
        **device_training_args(explicit=user),
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
        settings["ignore_data_skip"] = True
        settings["accelerator_config"] = {**user.pop("accelerator_config", {}), "dispatch_batches": False}
    settings.update(user)
    settings.setdefault("output_dir", f"{recipe.output_dir}-checkpoints")
    return settings, hub_token


def _training_arguments(recipe: TrainRecipe, origin: str) -> tuple[Any, str | None]:
    from sentence_transformers import SentenceTransformerTrainingArguments

    settings, hub_token = training_settings(recipe, origin)
    try:
        args = SentenceTransformerTrainingArguments(**settings)
    except (TypeError, ValueError) as error:
        raise RecipeError(f"{origin}: training_args: {error}") from None
    check_training_args_fit_the_run(args, recipe, origin)
    return args, hub_token


def check_model_configuration(recipe: TrainRecipe, peft_config: Any | None, origin: str) -> None:
    """Resolve ``model.attn_implementation`` and the LoRA targets against the base model's configuration.

    The model is built on the meta device (:func:`~hf_unified_embed.training.backbones.meta_transformer`), so
    transformers decides whether the attention implementation can run with the installed packages and
    PEFT matches ``target_modules`` against the real module names, as both do when the weights load
    — but before any data or weight is read.
    """
    from hf_unified_embed.training.backbones import attention_problem, meta_transformer

    problem = attention_problem(recipe.resolved_base_model(), recipe.model)
    if problem is not None:  # model.attention on an encoder, an unsupported family, a layer past the model
        raise RecipeError(f"{origin}: model.attention: {problem}")
    attention = recipe.model.attn_implementation if recipe.model is not None else None
    if peft_config is None and attention is None:
        return
    base = recipe.resolved_base_model()
    try:
        model = meta_transformer(base, recipe.model)
    except (ImportError, ValueError) as error:
        key = f"model.attn_implementation {shown(attention)}" if attention else "base_model"
        raise RecipeError(f"{origin}: {key}: {error}") from None
    if model is None or peft_config is None:
        return
    from peft import inject_adapter_in_model
    from torch import nn

    try:
        inject_adapter_in_model(copy.deepcopy(peft_config), model, low_cpu_mem_usage=True)
    except (TypeError, ValueError) as error:
        linear = sorted(
            {name.rpartition(".")[2] for name, module in model.named_modules() if isinstance(module, nn.Linear)}
        )
        raise RecipeError(
            f"{origin}: peft: {error} ({type(model).__name__} of {base} has linear layers named {linear})"
        ) from None


def _check_path(value: str | None, key: str, origin: str) -> None:
    if value and looks_local(value) and not Path(value).expanduser().exists():
        raise InputNotFoundError(f"{origin}: {key}: {value} does not exist")


def _check_suite(recipe: TrainRecipe, origin: str) -> Any | None:
    if not recipe.evaluation:
        return None
    from hf_unified_embed.evaluation import load_suite, set_reference_model
    from hf_unified_embed.evaluation.inputs import entry_files
    from hf_unified_embed.evaluation.suite import check_suite_models

    try:
        suite = load_suite(recipe.evaluation, data_root=recipe.evaluation_data_root)
    except SuiteError as error:
        raise SuiteError(f"{origin}: evaluation: {error}") from None
    # A 'forgetting' entry that names no reference compares the trained model with this run's base.
    set_reference_model(suite, recipe.resolved_base_model())
    check_suite_models(suite)
    for entry in suite.entries:
        if entry.source is not None and entry.data_files:
            entry_files(entry.data_files, suite.data_root, evaluation=entry.name, field="data_files")
        if entry.unified is not None and looks_local(entry.unified):
            location = Path(entry.unified)
            if suite.data_root is not None and not location.is_absolute():
                location = suite.data_root / location
            if not location.exists() and not Path(entry.unified).exists():
                raise InputNotFoundError(
                    f"{origin}: evaluation entry {shown(entry.name)}: {entry.unified} does not exist"
                )
    return suite


def check_base_model(recipe: TrainRecipe, origin: str) -> None:
    """A local ``base_model`` exists and is a model folder (not, say, a dataset folder); files only."""
    from hf_unified_embed.training.backbones import model_folder_problem

    base = recipe.base_model
    _check_path(base, "base_model", origin)
    problem = model_folder_problem(base) if base and looks_local(base) else None
    if problem:
        raise InputError(f"{origin}: base_model: {base} {problem}")


def quick_preflight(recipe: TrainRecipe) -> None:
    """The checks that need neither the training stack nor the data: run first, in about a second.

    Importing torch, transformers and sentence-transformers takes seconds, so these come before it (the
    ``train`` command runs them before it imports the run): loss names and keyword names, read from the
    losses' source files (:func:`check_loss_in_source`), ``training_args`` names (read from
    ``SentenceTransformerTrainingArguments``' source), the sampler's tasks and processes, the local paths
    (``data.path``, ``base_model``, which must be a model folder, ``curriculum.plan``) and ``hub.repo_id``.
    :func:`preflight` runs them too, then the checks that import.
    """
    origin = recipe.source or "<recipe>"
    for key, spec in recipe.losses.items():
        check_loss_in_source(spec, f"{origin}: losses.{key}")
    check_training_arg_names(
        {k: v for k, v in recipe.training_args.items() if k != "hub_token"}, origin, in_source=True
    )
    check_sampler_processes(recipe, world_size())
    check_sampler_tasks(recipe, recipe.data.tasks, origin)
    check_streaming(recipe, origin)
    _check_path(recipe.data.path, "data.path", origin)
    check_base_model(recipe, origin)
    if recipe.curriculum is not None:
        _check_path(recipe.curriculum.plan, "curriculum.plan", origin)
    if recipe.hub is not None:
        from huggingface_hub.utils import validate_repo_id

        try:
            validate_repo_id(recipe.hub.repo_id)
        except ValueError as error:
            raise RecipeError(f"{origin}: hub.repo_id: {error}") from None


def preflight(recipe: TrainRecipe, *, overwrite: bool = False) -> ResolvedRecipe:
    """Check ``recipe`` as far as possible without loading data or the model; see the module docstring."""
    origin = recipe.source or "<recipe>"
    quick_preflight(recipe)
    losses: dict[str, tuple[type[nn.Module], dict[str, Any]]] = {}
    for key, spec in recipe.losses.items():
        where = f"{origin}: losses.{key}"
        cls = resolve_loss_class(spec["name"], where)
        kwargs = {k: v for k, v in spec.items() if k != "name"}
        _bind_loss_kwargs(cls, kwargs, where)
        losses[key] = (cls, kwargs)
    check_engine()
    args, hub_token = _training_arguments(recipe, origin)

    if recipe.curriculum is not None and recipe.curriculum.plan:
        from hf_unified_embed.curriculum import CurriculumPlan

        try:
            CurriculumPlan.load(recipe.curriculum.plan)
        except HfUnifiedEmbedError:
            raise
        except (OSError, ValueError) as error:
            raise InputError(f"{origin}: curriculum.plan: {error}") from None
    peft_config, merge_adapter = None, False
    if recipe.peft:
        stack.check("peft: (LoRA)", stack.peft_needs(), origin=origin)
        from peft import LoraConfig

        settings = dict(recipe.peft)
        merge_adapter = settings.pop("merge_adapter", False)
        if not isinstance(merge_adapter, bool):
            raise RecipeError(f"{origin}: peft.merge_adapter must be true or false, got {shown(merge_adapter)}")
        mismatch = mismatched_field(LoraConfig, settings)
        if mismatch:
            raise RecipeError(f"{origin}: peft.{mismatch[0]}: {mismatch[1]}")
        try:
            peft_config = LoraConfig(**settings)
        except (TypeError, ValueError) as error:
            raise RecipeError(f"{origin}: peft: {error}") from None
    if recipe.model is not None:
        recipe.model.check_environment(origin)
    check_model_configuration(recipe, peft_config, origin)
    suite = _check_suite(recipe, origin)

    # Every process checks the output (only the main one writes it), so that under a launcher all of
    # them stop on the same error instead of the others loading data for a run that has ended.
    # The output may be none of the inputs: the recipe, the data, the base model, the curriculum's plan and
    # teacher, and every file of the evaluation suite.
    curriculum = recipe.curriculum
    named = [recipe.source, recipe.data.path, recipe.base_model]
    named += [curriculum.plan, curriculum.teacher] if curriculum is not None else []
    inputs = [path for path in named if path and Path(path).exists()]
    if suite is not None:
        from hf_unified_embed.evaluation.suite import suite_inputs

        inputs += [str(path) for path in suite_inputs(suite)]
    check_output(recipe.output_dir, overwrite=overwrite, inputs=inputs)
    return ResolvedRecipe(recipe, losses, args, hub_token, suite, peft_config, merge_adapter, overwrite, inputs)
