"""Recipe preflight, sampling: the sampler fits the run's tasks and processes, and a stream what it can do.

sentence-transformers' stock samplers mix tasks across processes in one step (measured: a gloo collective
mismatch after a few steps), so with several processes they are refused unless
``sampler.allow_multi_device: true``; ``training_args.batch_sampler: no_duplicates`` needs one of them (the
curriculum sampler orders rows itself), and ``group_by_label`` a label column that unified rows lack; a
streaming run (``data.streaming: true``) sets ``max_steps`` and nothing a stream cannot do.
"""

from __future__ import annotations

from collections.abc import Mapping

from hf_unified_embed.errors import RecipeError, shown
from hf_unified_embed.recipe.train_recipe import TrainRecipe
from hf_unified_embed.sampling.batch_sampler_rule import batch_sampler_refusal


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


def check_batch_sampler(recipe: TrainRecipe, origin: str) -> None:
    """``training_args.batch_sampler`` (the order of rows within a task) fits the run's sampler
    (:func:`~hf_unified_embed.sampling.batch_sampler_rule.batch_sampler_refusal`)."""
    value = recipe.training_args.get("batch_sampler")
    curriculum = "the curriculum sampler (sampler.kind: curriculum, the default)"
    refusal = batch_sampler_refusal(value, curriculum if recipe.sampler.kind == "curriculum" else None)
    if refusal is None:
        return
    if value == "group_by_label":
        fix = "leave batch_sampler out, or use no_duplicates with sampler.kind: proportional or round_robin"
    else:
        fix = (
            f"set sampler.kind: proportional (or round_robin) to train with batch_sampler: {value}, or leave "
            "batch_sampler out"
        )
    raise RecipeError(f"{origin}: training_args.batch_sampler {shown(value)}: {refusal}; {fix}")


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
