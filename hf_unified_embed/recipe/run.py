"""Run a training recipe: preflight → unified data → (curriculum) → losses, collator, sampler → ``SentenceTransformerTrainer``.

Nothing here replaces sentence-transformers' machinery: the trainer is the stock one, the parts
from :mod:`hf_unified_embed` go in as its ordinary arguments (``loss=`` dict per task,
``data_collator=``, ``multi_dataset_batch_sampler=``). Multi-device runs therefore work with
``torchrun``/``accelerate launch`` unchanged.

Order of work, so that nothing is lost and nothing half-written is left:

1. :func:`~hf_unified_embed.recipe.preflight.preflight` checks the recipe before any data loads;
2. the main process opens the staged output folder (a read-only parent fails here, at once);
3. data, curriculum, model, losses, collator, sampler; training;
4. the main process saves the model, the redacted recipe copy and the trainer arguments, and the
   staged folder is renamed into place — the model is now safe;
5. evaluation (``evaluation.json``, card re-rendered with the results) and the Hub push run after
   that: if one fails, the model stays and :class:`~hf_unified_embed.errors.AfterTrainingError`
   says what failed. Other processes write nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from datasets import DatasetDict
from torch import nn

from hf_unified_embed.errors import (
    AfterTrainingError,
    HfUnifiedEmbedError,
    HubError,
    InputError,
    RecipeError,
    one_line,
)
from hf_unified_embed.recipe.model_card import UnifiedModelCardData, attach_evaluation, card_data, describe_training
from hf_unified_embed.recipe.preflight import ResolvedRecipe, check_sampler_tasks, preflight
from hf_unified_embed.recipe.preflight_losses import check_losses_fit_tasks
from hf_unified_embed.recipe.run_data import curriculum_for, load_streams, load_tasks
from hf_unified_embed.recipe.train_recipe import TrainRecipe
from hf_unified_embed.training.backbones import merge_adapter, without_cudnn_attention
from hf_unified_embed.utils.arguments import checked_arguments
from hf_unified_embed.utils.outputs import StagedOutput
from hf_unified_embed.utils.processes import is_main_process
from hf_unified_embed.utils.redaction import redact

logger = logging.getLogger(__name__)

RECIPE_FILENAME = "hf_unified_embed_recipe.yaml"
TRAINER_ARGS_FILENAME = "trainer_args.json"
EVALUATION_FILENAME = "evaluation.json"

T = TypeVar("T")


@dataclass
class TrainingOutcome:
    """What :func:`train_from_recipe` produced."""

    model_dir: Path
    train_loss: float | None
    evaluation: Any | None  # hf_unified_embed.evaluation.SuiteResults
    #: The trained model as saved (adapter merged when asked); ``None`` on processes other than the main one.
    model: Any | None = None  # SentenceTransformer


@dataclass
class PreparedRun:
    """Everything the trainer gets, built from a checked recipe (also what ``train --check`` describes)."""

    resolved: ResolvedRecipe
    tasks: DatasetDict
    curriculum: dict[str, Any] | None
    model: Any  # SentenceTransformer
    losses: dict[str, nn.Module]
    collator: Any  # UnifiedDataCollator
    #: A ``data.streaming`` run's training data (then ``tasks`` holds the first rows of each task, which the
    #: losses, collator and card are set up from).
    stream: Any | None = None  # MultiTaskStream


def prepare_run(resolved: ResolvedRecipe, work_dir: Path | None, *, compute_curriculum: bool = True) -> PreparedRun:
    """Load the data, plan the curriculum, build the model, the losses, the collator and the sampler.

    Args:
        resolved: the recipe after :func:`~hf_unified_embed.recipe.preflight.preflight`.
        work_dir: where the curriculum's plan and plot go (the staged output); ``None`` writes nothing.
        compute_curriculum: ``False`` skips a teacher-computed curriculum (``train --check``).
    """
    from transformers import set_seed

    from hf_unified_embed.training import UnifiedDataCollator, losses_for_tasks

    recipe = resolved.recipe
    origin = recipe.source or "<recipe>"
    # Before anything random is created (LoRA matrices, new heads): a rerun starts from the same weights.
    set_seed(recipe.seed)
    streams = None
    with _named(origin, "data"):
        if recipe.data.streaming:
            streams, tasks = load_streams(recipe)
        else:
            tasks = load_tasks(recipe)
    check_sampler_tasks(recipe, list(tasks), origin)
    check_losses_fit_tasks(recipe, resolved.losses, tasks)  # before any model: the curriculum's teacher, the base
    curriculum = None
    if recipe.curriculum is not None and (compute_curriculum or recipe.curriculum.plan):
        with _named(origin, "curriculum"):
            tasks, curriculum = curriculum_for(recipe, tasks, work_dir)
    stream = None
    if streams is not None:
        try:
            stream = recipe.sampler.training_stream(streams, recipe.data.shuffle_window, recipe.data.on_data_change)
        except ValueError as error:
            raise RecipeError(f"{origin}: sampler: {error}") from None
    with _named(origin):
        model = _model(resolved, card_data(recipe, tasks, rows=stream.rows_per_task if stream else None))
    try:
        losses = losses_for_tasks(
            model, tasks, _losses_in_use(resolved.losses, tasks), negatives_per_query=recipe.negatives_per_query
        )
        if recipe.keep_base is not None:
            losses = recipe.keep_base.wrap(losses)  # after the losses, before the trainer: the base is untrained
    except (TypeError, ValueError) as error:
        raise RecipeError(f"{recipe.source}: losses: {error}") from None
    collator = UnifiedDataCollator.for_losses(
        model,
        tasks,
        losses,
        negatives_per_query=recipe.negatives_per_query,
        seed=recipe.seed,
        prompts=None if recipe.instructions else {},
    )
    if collator.prompts:  # the saved model carries the instructions as its named prompts
        from hf_unified_embed.training.published_prompts import publish_prompts

        with _named(origin):
            publish_prompts(model, tasks, collator.prompts, recipe.default_prompt_task)
    if resolved.suite is not None:  # the suite runs after training: its prompts are checked before it
        from hf_unified_embed.training.instruction_fit import check_suite_prompts

        with _named(origin, "evaluation"):
            check_suite_prompts(resolved.suite, model)
    if stream is None:
        resolved.training_args.multi_dataset_batch_sampler = recipe.sampler.batch_sampler(
            curriculum["task_order"] if curriculum else None
        )
    return PreparedRun(resolved, tasks, curriculum, model, losses, collator, stream)


def _losses_in_use(losses: Mapping[str, T], tasks: DatasetDict) -> dict[str, T]:
    """The recipe's losses less those given for a task type that no task of this run trains with.

    One recipe may serve several data folders, so its loss map may name task types the data lacks (the
    shipped recipe names ``pair_classification`` for when msrp is added): those are left out here
    (:func:`~hf_unified_embed.recipe.preflight_losses.check_losses_fit_tasks` has warned of them). A key
    that names neither a task type nor a task stays, for :func:`~hf_unified_embed.training.losses_for_tasks`
    to refuse.
    """
    from hf_unified_embed.schema import TASK_TYPES
    from hf_unified_embed.training.layout import task_type_of

    used = {name if name in losses else task_type_of(dataset, name) for name, dataset in tasks.items()}
    unused = [key for key in losses if key in TASK_TYPES and key not in used]
    return {key: spec for key, spec in losses.items() if key not in unused}


@contextlib.contextmanager
def _named(origin: str, key: str | None = None) -> Iterator[None]:
    """An input error raised inside names the recipe (and the key) that led to it: ``recipe.yaml: data: ...``."""
    try:
        yield
    except HfUnifiedEmbedError as error:
        if origin not in str(error):
            error.within(f"{origin}: {key}" if key else origin)
        raise


def _model(resolved: ResolvedRecipe, card: UnifiedModelCardData) -> Any:
    """The model to train: backbone per ``model:``, LoRA adapter per ``peft:``, instructions not pooled."""
    from hf_unified_embed.training import exclude_instructions_from_pooling
    from hf_unified_embed.training.backbones import build_model
    from hf_unified_embed.training.partial_updates import apply_partial_updates

    recipe = resolved.recipe
    base = recipe.resolved_base_model()
    try:
        model = build_model(base, recipe.model, max_seq_length=recipe.max_seq_length, model_card_data=card)
    except HfUnifiedEmbedError:
        raise
    except Exception as error:
        if recipe.base_model is None or not Path(base).expanduser().is_dir() or isinstance(error, MemoryError):
            raise
        # A folder preflight took for a model that transformers cannot read ("Unrecognized model in ..."); its
        # files parse and its weights are whole (preflight), so anything else is a value of the wrong kind in
        # one of them (a hand-edited config.json's "dtype": 0): the folder's fault, not a bug.
        kind = "" if isinstance(error, (OSError, ValueError)) else f"{type(error).__name__}: "
        raise InputError(
            f"base_model: {base} is not a model folder transformers can load: {kind}{one_line(error, 300)}"
        ) from None
    # A trained model gets a freshly generated card, not the base model's README.
    model._model_card_text = None
    if resolved.peft_config is not None:
        model.add_adapter(resolved.peft_config)
    apply_partial_updates(model, recipe.model, resolved.training_args)  # model.freeze_layers, layerwise_lr_decay
    if recipe.instructions:
        exclude_instructions_from_pooling(model)
    return model


def _trained_model(trainer: Any, run: PreparedRun) -> Any | None:
    """The trained model in full, for the main process to save (``None`` on the others).

    Under FSDP the parameters are sharded across processes, so every process takes part in gathering
    the full state dict and the main process loads it into a freshly built copy of the model. Plain
    DDP and DeepSpeed ZeRO-1/2 keep full parameters on every process.
    """
    if not trainer.is_fsdp_enabled:
        return run.model if trainer.is_world_process_zero() else None
    state_dict = trainer.accelerator.get_state_dict(trainer.model)
    if not trainer.is_world_process_zero():
        return None
    model = _model(run.resolved, run.model.model_card_data)
    model.load_state_dict(state_dict, strict=True)
    model.prompts, model.default_prompt_name = dict(run.model.prompts), run.model.default_prompt_name
    return model


@checked_arguments
def train_from_recipe(recipe: TrainRecipe, *, overwrite: bool = False) -> TrainingOutcome:
    """Train as ``recipe`` says and write the model, its card and the resolved recipe to ``output_dir``.

    The model folder is assembled in a staged sibling and renamed into place as soon as training ends,
    before evaluation and push (see the module docstring). Trainer checkpoints go to
    ``training_args.output_dir`` (default ``<output_dir>-checkpoints``), where
    ``resume_from_checkpoint`` finds them; each is scrubbed of secrets as it is saved, and the folder
    does not outlive a run (finished, failed or interrupted) that saved no checkpoint into it.
    """
    from sentence_transformers import SentenceTransformerTrainer

    from hf_unified_embed.training.checkpoints import (
        RedactCheckpointsCallback,
        checkpoint_writes,
        default_checkpoint_folder,
        no_empty_folder,
    )
    from hf_unified_embed.training.loss_logging import LossPartsLogging

    resolved = preflight(recipe, overwrite=overwrite)
    # Only the main process writes the model folder; the others train and write nothing.
    output = (
        StagedOutput(recipe.output_dir, overwrite=overwrite, inputs=resolved.inputs) if is_main_process() else None
    )
    model_dir = Path(recipe.output_dir)
    args = resolved.training_args
    # The run's own default checkpoint folder, found empty, was left by a run killed with kill -9.
    own = Path(args.output_dir).absolute() == default_checkpoint_folder(model_dir.absolute())
    with (
        output if output is not None else contextlib.nullcontext(),
        no_empty_folder(args.output_dir, own=own),  # the trainer creates it even when it saves no checkpoint
    ):
        run = prepare_run(resolved, output.path if output is not None else None)
        trainer = SentenceTransformerTrainer(
            model=run.model,
            args=args,
            # sentence-transformers takes a loss dict only with a DatasetDict; a stream joins after (attach).
            train_dataset=run.tasks if run.stream is None else None,
            loss=run.losses,
            data_collator=run.collator,
            callbacks=[run.collator.epoch_callback(), RedactCheckpointsCallback()],
        )
        if run.stream is not None:
            run.stream.attach(trainer)
        LossPartsLogging.attach(trainer)  # each loss part logged over the steps of its task: no 'nan' parts
        resume = recipe.training_args.get("resume_from_checkpoint")
        if run.stream is not None and resume:
            from transformers.trainer_utils import get_last_checkpoint

            from hf_unified_embed.sampling.stream_resume import check_stream_checkpoint

            checkpoint = get_last_checkpoint(args.output_dir) if resume is True else resume
            check_stream_checkpoint(
                checkpoint, run.stream.task_names, trainer.accelerator.num_processes, stream=run.stream
            )
        finished = finished_checkpoint(resume, args)
        if finished is not None:
            # transformers would run one more step past max_steps; the finished checkpoint's model is the result.
            logger.warning(
                "%s is at max_steps %d: the run is already finished; no step is trained", finished, args.max_steps
            )
            trainer._load_from_checkpoint(str(finished))
            train_loss = None
        else:
            # A checkpoint that fills its disk is named as such, and its half-written files removed.
            with without_cudnn_attention(), checkpoint_writes(args.output_dir):
                train_loss = trainer.train(resume_from_checkpoint=resume).training_loss
        # Every process lists the checkpoint folder as train() ends; none may remove it (no_empty_folder) before
        # all have (measured: a process that finished first removed it under the other's listing).
        trainer.accelerator.wait_for_everyone()
        model = _trained_model(trainer, run)
        if output is None or model is None:
            return TrainingOutcome(model_dir, train_loss, None)
        describe_training(
            model.model_card_data, run.tasks, run.losses, recipe.sampler.card_section(args, run.stream), run.curriculum
        )
        if resolved.peft_config is not None:
            if resolved.merge_adapter:
                merge_adapter(model)
            else:
                model.model_card_data.base_model_relation = "adapter"
        output.kept_note = _kept_after_training(args.output_dir)  # said if the disk fills while it is written
        model.save(str(output.path))
        _write_yaml(output.path / RECIPE_FILENAME, portable_paths(recipe.to_dict()))
        _write_text(
            output.path / TRAINER_ARGS_FILENAME,
            json.dumps(redact(portable_paths(json.loads(args.to_json_string()))), indent=2),
        )

    evaluation = None
    if resolved.suite is not None:
        evaluation = _after_training("evaluation", model_dir, lambda: _evaluate(model, resolved.suite, model_dir))
    if recipe.hub:
        hub = recipe.hub
        _after_training(
            "the push to the Hub",
            model_dir,
            lambda: _push(model_dir, hub.repo_id, hub.private, hub.revision, hub.create_pr, resolved.hub_token),
        )
    return TrainingOutcome(model_dir, train_loss, evaluation, model)


def _kept_after_training(checkpoints: str) -> str:
    """What outlives a trained model that could not be written: the last checkpoint, if one was saved."""
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(checkpoints) if Path(checkpoints).is_dir() else None
    if last is None:
        return (
            "the model was trained, but no checkpoint was saved (training_args.save_steps): free space and train again"
        )
    return f"the model was trained; its last checkpoint {last} stays: free space and resume from it (resume_from_checkpoint)"


def finished_checkpoint(resume: str | bool | None, args: Any) -> Path | None:
    """The checkpoint ``resume`` names (``True``: the last in ``args.output_dir``) when it already holds all
    ``args.max_steps`` steps, else ``None``."""
    from transformers.trainer_utils import get_last_checkpoint

    from hf_unified_embed.training.checkpoints import read_trainer_state

    if resume is True and Path(args.output_dir).is_dir():
        resume = get_last_checkpoint(args.output_dir)
    if not isinstance(resume, str) or not Path(resume).is_dir():
        return None  # the trainer reports a checkpoint that is not there
    # Read as the trainer will read it: a damaged or hand-edited state is one located line, not its traceback.
    state = read_trainer_state(resume)
    if args.max_steps is None or args.max_steps <= 0:
        return None
    return Path(resume) if int(state.get("global_step", 0)) >= args.max_steps else None


def check_recipe(recipe: TrainRecipe, *, overwrite: bool = False) -> str:
    """``train --check``: preflight, load the data, build the model and the losses, and describe the run.

    Nothing is trained or written; a teacher-computed curriculum is not computed.
    """
    resolved = preflight(recipe, overwrite=overwrite)
    return describe_run(prepare_run(resolved, None, compute_curriculum=False))


def describe_run(run: PreparedRun) -> str:
    """The resolved plan of a run: tasks, rows, loss and columns, batch size and optimizer steps per task, sampler."""
    from hf_unified_embed.training.layout import task_type_of

    recipe, args = run.resolved.recipe, run.resolved.training_args
    names = list(run.tasks)
    batch_sizes = [recipe.sampler.batch_sizes.get(name, args.per_device_train_batch_size) for name in names]
    sizes: list[int | None]
    if run.stream is None:
        counts = [len(run.tasks[name]) for name in names]
        sizes, steps = list(counts), recipe.sampler.steps_per_task(args, counts, batch_sizes)
    else:  # a stream's steps: max_steps drawn by weight (the expected count per task)
        sizes = [run.stream.rows_per_task.get(name) for name in names]
        steps = [round(args.max_steps * p) for p in run.stream.probabilities.tolist()]
    table = [["task", "type", "rows", "loss", "columns", "batch", "steps/epoch" if run.stream is None else "~steps"]]
    for name, size, batch, count in zip(names, sizes, batch_sizes, steps):
        layout = run.collator.layouts[name]
        table.append(
            [name, task_type_of(run.tasks[name], name), "?" if size is None else str(size), type(run.losses[name]).__name__,
             layout.describe(), str(batch), str(count)]
        )  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = [f"recipe {recipe.source}: checked", f"base model: {recipe.base_model or 'packaged all-MiniLM-L6-v2'}"]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in table]
    sampler = recipe.sampler.card_section(args, run.stream)
    lines.append("sampler: " + ", ".join(f"{key}={value}" for key, value in sampler.items()))
    budget = f"max_steps={args.max_steps}" if args.max_steps > 0 else f"{args.num_train_epochs:g} epoch(s)"
    if run.stream is None:
        lines.append(f"optimizer steps per epoch: {sum(steps)} ({budget})")
    else:
        lines.append(f"streamed: {budget}, each step's task drawn by weight")
    if run.resolved.suite is not None:
        suite = run.resolved.suite
        lines.append(f"evaluation: {suite.name} ({', '.join(entry.name for entry in suite.entries)})")
    lines.append(f"output: {recipe.output_dir} (checkpoints: {args.output_dir})")
    return "\n".join(lines)


def portable_paths(data: dict[str, Any]) -> dict[str, Any]:
    """The recipe (or trainer arguments) mapping as the model folder keeps it: no path of this machine.

    A local path — absolute, or relative to the working folder the run started in — means nothing on
    another machine and shows this one's layout, so it is written as a name
    (:func:`~hf_unified_embed.utils.locations.public_name`): the Hub id of the model it is a copy of (the
    packaged all-MiniLM-L6-v2 is ``sentence-transformers/all-MiniLM-L6-v2``), else its folder name.
    """
    from hf_unified_embed.utils.locations import without_local_paths

    result: dict[str, Any] = without_local_paths(json.loads(json.dumps(data, default=str)))
    return result


def _after_training(step: str, model_dir: Path, action: Callable[[], T]) -> T:
    """Run a step after the model was saved; a failure says that the model is kept."""
    try:
        return action()
    except HfUnifiedEmbedError as error:
        raise AfterTrainingError(str(error), model_dir=model_dir, step=step) from error
    except Exception:
        logger.error("the trained model is saved in %s, but %s failed:", model_dir, step)
        raise


def _push(folder: Path, repo_id: str, private: bool, revision: str | None, create_pr: bool, token: str | None) -> Any:
    from hf_unified_embed.hub.publishing import push_folder

    try:
        return push_folder(
            folder, repo_id, repo_type="model", private=private, revision=revision, create_pr=create_pr, token=token
        )
    except HubError as error:
        raise HubError(f"{error}; push it later with `hf-unified-embed push {folder} {repo_id}`") from error


def _write_yaml(path: Path, data: Any) -> None:
    _write_text(path, yaml.safe_dump(redact(data), sort_keys=False, allow_unicode=True))


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _evaluate(model: Any, suite: Any, model_dir: Path) -> Any:
    """Run the suite on the saved model's weights; write ``evaluation.json`` and the card with the results."""
    from sentence_transformers.base.model_card import generate_model_card

    from hf_unified_embed.evaluation import run_suite

    results = run_suite(model, suite)
    attach_evaluation(model.model_card_data, results)
    results.save_json(model_dir / EVALUATION_FILENAME, overwrite=True)
    model.model_card_data.save_dir = str(model_dir)
    with StagedOutput(model_dir / "README.md", overwrite=True, kind="file") as card:
        card.path.write_text(generate_model_card(model), encoding="utf-8")
    return results
