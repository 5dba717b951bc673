"""Which ``batch_sampler`` (the order of rows within a task) applies with which multi-dataset sampler."""

from __future__ import annotations

#: ``training_args.batch_sampler`` values (sentence-transformers' ``BatchSamplers``) that read the rows of
#: each task: they need a stock multi-dataset sampler, which draws every task's batches from them.
_ROW_BATCH_SAMPLERS = ("no_duplicates", "no_duplicates_hashed")


def batch_sampler_refusal(value: object, curriculum: str | None) -> str | None:
    """Why ``batch_sampler`` ``value`` (the order of rows within a task) cannot apply with the run's sampler.

    The one rule for a recipe's ``training_args.batch_sampler`` and a script's ``args.batch_sampler``
    (:func:`~hf_unified_embed.training.unified_training`): ``no_duplicates`` (and ``no_duplicates_hashed``)
    apply with the stock samplers, which take each task's batches from them; the collator keeps the columns
    that are the same in every row of a task out of the comparison
    (:attr:`~hf_unified_embed.training.collator.UnifiedDataCollator.valid_label_columns`), so the batches
    are full. ``CurriculumBatchSampler`` orders the rows itself and would ignore them, and
    ``group_by_label`` needs a label column that unified rows do not have.

    Args:
        value: The ``batch_sampler`` (a ``BatchSamplers`` member, its value, or a callable).
        curriculum: How the caller names the run's ``CurriculumBatchSampler`` (``"the curriculum sampler
            (sampler.kind: curriculum, the default)"``), or ``None`` when the run uses another sampler.

    Returns:
        The reason (the caller names the key and the fix), or ``None`` when it applies.
    """
    name = getattr(value, "value", value)
    if name == "group_by_label":
        return (
            "it groups rows by a label column, and unified rows have none (a row's scores are drawn with its "
            "texts by the collator)"
        )
    if name in _ROW_BATCH_SAMPLERS and curriculum:
        return f"{curriculum} orders the rows of every task itself and would ignore it"
    return None
