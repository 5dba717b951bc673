"""The keyword arguments of a stock ``SentenceTransformerTrainer`` for unified data, in one call.

:func:`~hf_unified_embed.recipe.train_from_recipe` wires this package's parts into the trainer from a
recipe file; :func:`unified_training` does the same wiring for a script that builds the trainer itself::

    losses = {"retrieval": MultiPositiveInfoNCELoss, "sts": CoDiEmbSTSLoss}
    SentenceTransformerTrainer(**unified_training(model, load_unified("my-data"), losses, args)).train()

Each piece stays available on its own (``examples/train_ir_sts.py`` writes them out one by one).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from datasets import Dataset, DatasetDict
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainingArguments
from sentence_transformers.base.sampler import MultiDatasetBatchSamplers

from hf_unified_embed.training.collator import UnifiedDataCollator
from hf_unified_embed.training.loss_mapping import LossSpec, losses_for_tasks
from hf_unified_embed.training.prompts import exclude_instructions_from_pooling


def unified_training(
    model: SentenceTransformer,
    dataset: DatasetDict | Mapping[str, Dataset],
    losses: Mapping[str, LossSpec],
    args: SentenceTransformerTrainingArguments,
    *,
    negatives_per_query: int | Mapping[str, int] = 1,
    instructions: bool = True,
    sampler: Any = None,
) -> dict[str, Any]:
    """The keyword arguments that train ``model`` on unified ``dataset`` with ``SentenceTransformerTrainer``.

    What :func:`~hf_unified_embed.recipe.train_from_recipe` does with a recipe's parts, for a trainer built
    by hand: one loss per task (:func:`~hf_unified_embed.training.losses_for_tasks`), the
    :class:`~hf_unified_embed.training.UnifiedDataCollator` that draws each task's columns from the
    unified rows anew every epoch (and the callback that tells it the epoch), the tasks' instructions as
    prompts left out of pooling, and a sampler that gives every optimizer step one task on every device.

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
        instructions: Train with the tasks' ``query_instruction`` / ``document_instruction`` as prompts.
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
        ValueError: A task has no loss, or a loss key names no task or task type.
        hf_unified_embed.errors.InputError: An instruction that cannot be left out of pooling with this
            model's tokenizer.
    """
    from hf_unified_embed.sampling import CurriculumBatchSampler

    tasks = dataset if isinstance(dataset, DatasetDict) else DatasetDict(dataset)
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
    if sampler is None:
        chosen = args.multi_dataset_batch_sampler
        stock_default = chosen == MultiDatasetBatchSamplers.PROPORTIONAL
        sampler = CurriculumBatchSampler.configure(interleave="shuffled") if stock_default else chosen
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
