"""The ``loss={task: loss}`` argument of ``SentenceTransformerTrainer`` from one loss per task type.

With a ``DatasetDict`` of tasks the trainer calls ``loss[dataset_name]`` for each batch, so every
task needs an entry. Users think in task types ("retrieval", "sts"); :func:`losses_for_tasks` expands
that to task names and builds each loss on the model being trained, after checking that each loss
can read its task's rows (:mod:`hf_unified_embed.losses.task_fit`): a loss on scored pairs for rows
without scores is refused here, naming the task, the loss, what is missing and the losses that fit,
not at the first batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from datasets import Dataset, DatasetDict
from torch import nn

from hf_unified_embed.errors import shown
from hf_unified_embed.losses.columns import TaskColumns
from hf_unified_embed.losses.task_fit import check_loss_fits, described
from hf_unified_embed.schema import TASK_TYPES
from hf_unified_embed.utils.arguments import checked_arguments

logger = logging.getLogger(__name__)

LossFactory: TypeAlias = Callable[..., nn.Module]
#: A loss instance, a class or factory called as ``factory(model)``, or ``(factory, kwargs)``.
LossSpec: TypeAlias = nn.Module | LossFactory | tuple[LossFactory, Mapping[str, Any]]


def _build(spec: LossSpec, model: nn.Module, key: str) -> nn.Module:
    if isinstance(spec, nn.Module):
        if getattr(spec, "model", model) is not model:
            raise ValueError(
                f"the loss given for {shown(key)} was built on a different model than the one being trained"
            )
        return spec
    if isinstance(spec, tuple):
        if len(spec) != 2 or not callable(spec[0]) or not isinstance(spec[1], Mapping):
            raise TypeError(f"the loss given for {shown(key)} must be (class, kwargs), got {shown(spec)}")
        factory, kwargs = spec
        return factory(model, **kwargs)
    if callable(spec):
        return spec(model)
    raise TypeError(
        f"the loss given for {shown(key)} must be a loss, a loss class or (class, kwargs); got {shown(spec)}"
    )


@checked_arguments
def losses_for_tasks(
    model: nn.Module,
    dataset_dict: DatasetDict | Mapping[str, Dataset],
    losses: Mapping[str, LossSpec],
    *,
    negatives_per_query: int | Mapping[str, int] = 1,
) -> dict[str, nn.Module]:
    """One loss per task of ``dataset_dict``, chosen by task name or else by task type.

    Each loss is checked against its task's rows before it is built (a factory once built): the rows
    must carry what its :class:`~hf_unified_embed.losses.ColumnLayout` reads.

    Args:
        model: The ``SentenceTransformer`` being trained; classes and factories are called with it.
        dataset_dict: Unified tasks keyed by task name.
        losses: Keys are task names or task types (a task name wins). Values are a loss instance
            (shared by all tasks it covers), a class / factory ``f(model)`` (one instance per task),
            or ``(class, kwargs)`` for ``class(model, **kwargs)``.
        negatives_per_query: K− the collator will draw, one number or one per task name (as given to
            :meth:`~hf_unified_embed.training.UnifiedDataCollator.for_losses`).

    Returns:
        ``{task: loss}`` with every task of ``dataset_dict``, for ``SentenceTransformerTrainer(loss=...)``.

    Raises:
        LossFitError: A loss cannot read its task's rows (the message names the task, the loss, what
            the rows lack and the losses that fit).
        ValueError: A task has no loss, or a loss key matches no task name or task type.

    Example:
        ::

            losses = losses_for_tasks(model, train, {
                "retrieval": (MultiPositiveInfoNCELoss, {"positives_per_query": 2}),
                "sts": CoDiEmbSTSLoss,
            })
    """
    result = {}
    unused = set(losses)
    for task, dataset in dataset_dict.items():
        rows = TaskColumns.of(dataset, task)
        key = task if task in losses else rows.task_type
        if key not in losses:
            raise ValueError(
                f"task {shown(task)} (task_type {shown(rows.task_type)}) has no loss; give one under the task name or "
                f"its task type (losses are given for {sorted(losses)})"
            )
        unused.discard(key)
        k_neg = negatives_per_query if isinstance(negatives_per_query, int) else negatives_per_query.get(task, 1)
        known = described(losses[key])
        if known is not None:
            check_loss_fits(known, rows, k_neg, f"losses[{key!r}]")
        result[task] = _build(losses[key], model, key)
        if known is None or known is not losses[key]:  # a factory, or a class described before it was built
            check_loss_fits(result[task], rows, k_neg, f"losses[{key!r}]")
    # A loss for a task type the data lacks is how one recipe serves an IR-only and an STS-only run;
    # any other unmatched key is a typo or a task missing from the data.
    if unmatched := sorted(unused - set(TASK_TYPES)):
        raise ValueError(f"losses given for {unmatched} match no task name or task type of the dataset")
    if unused:
        logger.warning("no task of type %s in the dataset; the losses given for them are not used", sorted(unused))
    return result
