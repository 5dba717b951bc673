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

This module holds the entry points and the checks of the model, paths, suite and output; the others live by
concern in :mod:`~hf_unified_embed.recipe.preflight_losses`, :mod:`~hf_unified_embed.recipe.preflight_sampler`
and :mod:`~hf_unified_embed.recipe.preflight_training_args`, and stay importable from here.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_unified_embed.errors import HfUnifiedEmbedError, InputError, InputNotFoundError, RecipeError, SuiteError, shown
from hf_unified_embed.recipe.preflight_losses import bind_loss_kwargs, check_loss_in_source, resolve_loss_class
from hf_unified_embed.recipe.preflight_sampler import (
    check_batch_sampler,
    check_sampler_processes,
    check_sampler_tasks,
    check_streaming,
)
from hf_unified_embed.recipe.preflight_training_args import (
    CHECKPOINT_KEYS,
    check_engine,
    check_training_arg_names,
    check_training_arg_values,
    check_training_args_fit_the_run,
    default_save_strategy,
    training_arguments,
    training_settings,
)
from hf_unified_embed.recipe.train_recipe import TrainRecipe
from hf_unified_embed.utils import stack
from hf_unified_embed.utils.locations import looks_local
from hf_unified_embed.utils.outputs import check_output
from hf_unified_embed.utils.path_limits import check_name_lengths
from hf_unified_embed.utils.processes import world_size
from hf_unified_embed.utils.typecheck import mismatched_field

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "CHECKPOINT_KEYS",
    "ResolvedRecipe",
    "check_base_model",
    "check_batch_sampler",
    "check_engine",
    "check_loss_in_source",
    "check_model_configuration",
    "check_sampler_processes",
    "check_sampler_tasks",
    "check_streaming",
    "check_training_arg_names",
    "check_training_arg_values",
    "check_training_args_fit_the_run",
    "default_save_strategy",
    "preflight",
    "quick_preflight",
    "resolve_loss_class",
    "training_settings",
]


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


def check_model_configuration(recipe: TrainRecipe, peft_config: Any | None, origin: str) -> None:
    """Resolve ``model.attn_implementation`` and the LoRA targets against the base model's configuration.

    The model is built on the meta device (:func:`~hf_unified_embed.training.backbones.meta_transformer`), so
    transformers decides whether the attention implementation can run with the installed packages and
    PEFT matches ``target_modules`` against the real module names, as both do when the weights load
    — but before any data or weight is read.
    """
    from hf_unified_embed.training.backbones import attention_problem, meta_transformer
    from hf_unified_embed.training.partial_updates import check_partial_updates

    check_partial_updates(recipe, peft_config, origin)
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
    tasks, chosen = recipe.data.tasks, recipe.default_prompt_task
    if isinstance(chosen, str) and tasks is not None and chosen not in tasks:
        raise RecipeError(f"{origin}: default_prompt_task {shown(chosen)} is not one of data.tasks: {tasks}")
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
        bind_loss_kwargs(cls, kwargs, where)
        losses[key] = (cls, kwargs)
    check_engine()
    args, hub_token = training_arguments(recipe, origin)

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
    # <output_dir>-checkpoints: 12 bytes longer than the output
    check_name_lengths(Path(args.output_dir).absolute(), what="checkpoint folder (training_args.output_dir)")
    return ResolvedRecipe(recipe, losses, args, hub_token, suite, peft_config, merge_adapter, overwrite, inputs)
