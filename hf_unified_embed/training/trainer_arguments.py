"""The keyword arguments of a stock ``SentenceTransformerTrainer`` for unified data, in one call.

:func:`~hf_unified_embed.recipe.train_from_recipe` wires this package's parts into the trainer from a
recipe file; :func:`unified_training` does the same wiring for a script that builds the trainer itself::

    losses = {"retrieval": MultiPositiveInfoNCELoss, "sts": CoDiEmbSTSLoss}
    SentenceTransformerTrainer(**unified_training(model, load_unified("my-data"), losses, args)).train()

Each piece stays available on its own (``examples/train_ir_sts.py`` writes them out one by one).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import Any, Literal

from datasets import Dataset, DatasetDict
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainingArguments
from sentence_transformers.base.sampler import MultiDatasetBatchSamplers

from hf_unified_embed.errors import ArgumentError, shown
from hf_unified_embed.training.collator import UnifiedDataCollator
from hf_unified_embed.training.loss_mapping import LossSpec, losses_for_tasks
from hf_unified_embed.training.prompts import exclude_instructions_from_pooling
from hf_unified_embed.training.published_prompts import publish_prompts


def unified_training(
    model: SentenceTransformer,
    dataset: DatasetDict | Mapping[str, Dataset],
    losses: Mapping[str, LossSpec],
    args: SentenceTransformerTrainingArguments,
    *,
    negatives_per_query: int | Mapping[str, int] = 1,
    instructions: bool = True,
    default_prompt_task: str | Literal[False] | None = None,
    sampler: Any = None,
) -> dict[str, Any]:
    """The keyword arguments that train ``model`` on unified ``dataset`` with ``SentenceTransformerTrainer``.

    What :func:`~hf_unified_embed.recipe.train_from_recipe` does with a recipe's parts, for a trainer built
    by hand: one loss per task (:func:`~hf_unified_embed.training.losses_for_tasks`), the
    :class:`~hf_unified_embed.training.UnifiedDataCollator` that draws each task's columns from the
    unified rows anew every epoch (and the callback that tells it the epoch), the tasks' instructions as
    prompts left out of pooling and saved with the model as its named prompts
    (:mod:`~hf_unified_embed.training.published_prompts`), and a sampler that gives every optimizer step
    one task on every device.

    Args:
        model: The ``SentenceTransformer`` to train. With ``instructions`` and a task that has one, its
            ``Pooling`` modules are set to leave the prompt out (saved with the model, so ``encode(...,
            prompt=...)`` pools the same way).
        dataset: The unified tasks keyed by task name (``load_unified`` / ``build_unified``).
        losses: One loss per task type or task name: a loss class, ``(class, kwargs)`` or an instance, as
            :func:`~hf_unified_embed.training.losses_for_tasks` takes them; a ready ``{task: loss}`` works
            too.
        args: The training arguments; the returned ``args`` is a copy whose ``multi_dataset_batch_sampler``
            is ``sampler``.
        negatives_per_query: Hard negatives (K−) drawn per row for contrastive tasks, one number or one per
            task name.
        instructions: Train with the tasks' ``query_instruction`` / ``document_instruction`` as prompts. The
            model then carries them as named prompts (``<task>``, ``<task>_document``, and ``query`` /
            ``document`` of the default task), so ``trainer.save_model`` / ``model.save`` publish them.
        default_prompt_task: The task whose instructions ``encode_query`` / ``encode_document`` use;
            default: the first retrieval task with an instruction, else the first task with one. ``False``:
            none — they encode bare texts, as the base model did; each task's prompts stay named.
        sampler: The ``multi_dataset_batch_sampler``. Default: ``args``'s own when it names one other than
            sentence-transformers' default (proportional), else
            ``CurriculumBatchSampler.configure(interleave="shuffled")``: one task per optimizer step on every
            device, tasks in shuffled order (the configuration that measured best, docs/quality.md). Pass
            ``MultiDatasetBatchSamplers.PROPORTIONAL`` to keep sentence-transformers' sampler.

    Returns:
        ``model``, ``args``, ``train_dataset``, ``loss``, ``data_collator`` and ``callbacks``, for
        ``SentenceTransformerTrainer(**kwargs)``; add ``eval_dataset``, ``evaluator`` or more callbacks
        to the dict as usual.

    Raises:
        hf_unified_embed.errors.ArgumentError: An argument of the wrong type, a sampler that is none, a
            ``negatives_per_query`` for a task the dataset does not have, or an ``args.batch_sampler`` the
            sampler would ignore (the recipe's own rule): one line naming the argument and what is accepted.
        ValueError: A task has no loss, or a loss key names no task or task type.
        hf_unified_embed.errors.InputError: An instruction that cannot be left out of pooling with this
            model's tokenizer; a ``default_prompt_task`` that is not a task; two tasks whose prompts would
            share a name (:func:`~hf_unified_embed.training.published_prompts.published_prompts`).
    """
    from hf_unified_embed.sampling import CurriculumBatchSampler

    tasks = _checked_arguments(model, dataset, losses, args, negatives_per_query, instructions)
    sampler = _checked_sampler(sampler)
    task_losses = losses_for_tasks(model, tasks, losses)
    collator = UnifiedDataCollator.for_losses(
        model,
        tasks,
        task_losses,
        negatives_per_query=negatives_per_query,
        seed=args.seed,
        prompts=None if instructions else {},
    )
    if collator.prompts:
        exclude_instructions_from_pooling(model)
        publish_prompts(model, tasks, collator.prompts, default_prompt_task)
    if sampler is None:
        chosen = args.multi_dataset_batch_sampler
        stock_default = chosen == MultiDatasetBatchSamplers.PROPORTIONAL
        sampler = CurriculumBatchSampler.configure(interleave="shuffled") if stock_default else chosen
    _check_batch_sampler(args, sampler)
    args = copy.copy(args)
    args.multi_dataset_batch_sampler = sampler
    return {
        "model": model,
        "args": args,
        "train_dataset": tasks,
        "loss": task_losses,
        "data_collator": collator,
        "callbacks": [collator.epoch_callback()],
    }


def _checked_arguments(
    model: object, dataset: object, losses: object, args: object, negatives_per_query: object, instructions: object
) -> DatasetDict:
    """The arguments' types, and ``negatives_per_query``'s task names and counts, before anything is built.

    Returns:
        ``dataset`` as a ``DatasetDict``.
    """
    where = "unified_training"
    if not isinstance(model, SentenceTransformer):
        raise ArgumentError(f"{where}: model must be a SentenceTransformer, got {shown(model)}")
    if not isinstance(dataset, Mapping) or not dataset:
        raise ArgumentError(
            f"{where}: dataset must be a DatasetDict (or a mapping) of task name to Dataset, as load_unified "
            f"returns it; got {shown(dataset)}"
        )
    for name, task in dataset.items():
        if not isinstance(name, str) or not isinstance(task, Dataset):
            raise ArgumentError(
                f"{where}: dataset[{shown(name)}] must be a datasets.Dataset under a task name, got {shown(task)}"
                + ("; for a stream use train_from_recipe with data.streaming: true" if hasattr(task, "take") else "")
            )
    if not isinstance(losses, Mapping) or not losses:
        raise ArgumentError(
            f"{where}: losses must be a mapping of task type or task name to a loss (a class, (class, kwargs) or "
            f"an instance), got {shown(losses)}"
        )
    if not isinstance(args, SentenceTransformerTrainingArguments):
        raise ArgumentError(f"{where}: args must be a SentenceTransformerTrainingArguments, got {shown(args)}")
    if not isinstance(instructions, bool):
        raise ArgumentError(f"{where}: instructions must be True or False, got {shown(instructions)}")
    counts = negatives_per_query if isinstance(negatives_per_query, Mapping) else {None: negatives_per_query}
    if unknown := sorted(str(task) for task in counts if task is not None and task not in dataset):
        raise ArgumentError(
            f"{where}: negatives_per_query names task(s) {unknown} that the dataset does not have; its tasks: "
            f"{sorted(dataset)}"
        )
    for task, count in counts.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            key = "negatives_per_query" if task is None else f"negatives_per_query[{shown(task)}]"
            raise ArgumentError(
                f"{where}: {key} must be a whole number of hard negatives per row (0 or more), or a mapping of task "
                f"name to one; got {shown(count)}"
            )
    return dataset if isinstance(dataset, DatasetDict) else DatasetDict(dataset)


def _checked_sampler(sampler: object) -> Any:
    """``sampler`` as the trainer takes it: ``None``, a ``MultiDatasetBatchSamplers`` member (or its value), or a
    sampler class or ``functools.partial`` of one; anything else would train with loss 0.0 or fail later."""
    if sampler is None or isinstance(sampler, MultiDatasetBatchSamplers) or callable(sampler):
        return sampler
    if isinstance(sampler, str):
        try:
            return MultiDatasetBatchSamplers(sampler)
        except ValueError:
            pass
    accepted = ", ".join(repr(member.value) for member in MultiDatasetBatchSamplers)
    raise ArgumentError(
        f"unified_training: sampler {shown(sampler)} is no sampler: give None (CurriculumBatchSampler, one task per "
        f"step), one of {accepted} (MultiDatasetBatchSamplers), or a sampler class or functools.partial such as "
        "CurriculumBatchSampler.configure(...)"
    )


def _check_batch_sampler(args: SentenceTransformerTrainingArguments, sampler: Any) -> None:
    """``args.batch_sampler`` applies with ``sampler``: the recipe's rule
    (:func:`~hf_unified_embed.sampling.batch_sampler_rule.batch_sampler_refusal`)."""
    from hf_unified_embed.sampling import CurriculumBatchSampler
    from hf_unified_embed.sampling.batch_sampler_rule import batch_sampler_refusal

    target = sampler.func if isinstance(sampler, functools.partial) else sampler
    curriculum = isinstance(target, type) and issubclass(target, CurriculumBatchSampler)
    refusal = batch_sampler_refusal(
        args.batch_sampler, "the curriculum sampler (the sampler argument)" if curriculum else None
    )
    if refusal is not None:
        value = getattr(args.batch_sampler, "value", args.batch_sampler)
        raise ArgumentError(
            f"unified_training: args.batch_sampler {shown(value)}: {refusal}; pass "
            "sampler=MultiDatasetBatchSamplers.PROPORTIONAL (or ROUND_ROBIN) to train with it, or leave "
            "args.batch_sampler at its default"
        )
