"""Which loss can read which task: every (task, loss) pair of a run checked against the rows before any model loads.

A loss says what it reads in its :class:`~hf_unified_embed.losses.columns.ColumnLayout`; a task's rows
are counted once into :class:`~hf_unified_embed.losses.columns.TaskColumns`. Before the model exists a
loss is described from its class and options: :func:`stand_in` is an instance whose ``__init__`` did not
run, holding only the options, which is all ``column_layout`` may read. sentence-transformers' losses are
described by :func:`~hf_unified_embed.losses.layouts.layout_for_loss`, exactly as the collator will lay
out their batches. A loss that can read a task's rows but has no gradient on them (a distillation over one
document, a loss that selects labels the rows do not have) is refused too, by its
:class:`~hf_unified_embed.losses.learns_from.LearnsFrom` declaration.

The losses a refusal suggests, and the loss overview (:mod:`hf_unified_embed.losses.overview`), come from
:func:`known_losses`: this package's losses, the sentence-transformers losses the collator knows, and
every loss a user's installed package registers under the entry-point group :data:`ENTRY_POINT_GROUP`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from torch import nn

from hf_unified_embed.errors import LossFitError, shown
from hf_unified_embed.losses.columns import ColumnLayout, TaskColumns
from hf_unified_embed.losses.layouts import SENTENCE_TRANSFORMERS_LAYOUTS, innermost_loss, layout_for_loss
from hf_unified_embed.losses.learns_from import learns_from

#: The entry-point group a package registers its own losses under, e.g. in ``pyproject.toml``::
#:
#:     [project.entry-points."hf_unified_embed.losses"]
#:     MyLoss = "my_package.losses:MyLoss"
ENTRY_POINT_GROUP = "hf_unified_embed.losses"


def stand_in(cls: type[nn.Module], options: Mapping[str, Any]) -> nn.Module | None:
    """An instance of ``cls`` that holds only its constructor options, to ask its ``column_layout`` before a model exists.

    Args:
        cls: The loss class (its first constructor argument is the model).
        options: The keyword arguments it will be built with; the others take their defaults.

    Returns:
        The stand-in (``__init__`` does not run: no parameter, no model), or ``None`` when a required
        argument other than the model has no value (a wrapper of another loss, a guide model).
    """
    try:
        parameters = list(inspect.signature(cls).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    values = {}
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.name in options:
            values[parameter.name] = options[parameter.name]
        elif parameter.default is not parameter.empty:
            values[parameter.name] = parameter.default
        else:
            return None
    loss = cls.__new__(cls)
    # Written past nn.Module.__setattr__, which needs the state __init__ would have made.
    loss.__dict__.update(values)
    return loss


def described(spec: Any) -> nn.Module | None:
    """The loss a ``losses_for_tasks`` entry stands for, as far as it is known before it is built.

    Args:
        spec: A loss instance, a loss class, ``(class, kwargs)``, or a factory.

    Returns:
        The instance itself, a :func:`stand_in` of the class with the options, or ``None`` for a factory
        (or a class that cannot be described unbuilt): it is checked once built.
    """
    if isinstance(spec, nn.Module):
        return spec
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], Mapping):
        spec, options = spec
    else:
        options = {}
    if isinstance(spec, type) and issubclass(spec, nn.Module):
        return stand_in(spec, options)
    return None


def layout_of(loss: nn.Module, task_type: str, negatives_per_query: int) -> ColumnLayout | None:
    """The layout ``loss`` (an instance or a :func:`stand_in`) reads on a task of ``task_type``.

    Returns:
        The layout, or ``None`` for a stand-in whose ``column_layout`` reads what only ``__init__`` makes.

    Raises:
        ValueError: The loss refuses the task type or ``negatives_per_query`` (its own message).
    """
    try:
        return layout_for_loss(loss, task_type, negatives_per_query)
    except AttributeError:
        if _is_stand_in(loss):
            return None
        raise


def _is_stand_in(loss: nn.Module) -> bool:
    return "_parameters" not in loss.__dict__


def _name(loss: nn.Module) -> str:
    return type(innermost_loss(loss)).__name__


def _undeclared_sentence_transformers_loss(loss: nn.Module) -> bool:
    """A sentence-transformers loss the collator would lay out by task type, guessing (``MarginMSELoss``
    wants score margins, ``SoftmaxLoss`` class ids, ``MSELoss`` teacher embeddings: none is in unified rows)."""
    inner = innermost_loss(loss)
    return (
        type(inner).__module__.startswith("sentence_transformers.")
        and not callable(getattr(inner, "column_layout", None))
        and type(inner).__name__ not in SENTENCE_TRANSFORMERS_LAYOUTS
    )


def known_losses() -> dict[str, type[nn.Module]]:
    """Every loss that can be listed by name: this package's, the sentence-transformers losses whose
    columns the collator knows, and those registered under :data:`ENTRY_POINT_GROUP`.

    Returns:
        ``{name: class}`` sorted by name; a registered loss is listed by its entry point's name.
    """
    from sentence_transformers.sentence_transformer import losses as st_losses

    from hf_unified_embed import losses as package_losses

    found: dict[str, Any] = {name: getattr(package_losses, name) for name in package_losses.__all__}
    found.update({name: getattr(st_losses, name, None) for name in SENTENCE_TRANSFORMERS_LAYOUTS})
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        found[entry_point.name] = entry_point.load()
    return {
        name: cls
        for name, cls in sorted(found.items())
        if isinstance(cls, type) and issubclass(cls, nn.Module) and not inspect.isabstract(cls)
    }


def losses_that_fit(task: TaskColumns, negatives_per_query: int = 1) -> list[str]:
    """The names of the :func:`known_losses` that can read ``task`` with their default options and learn from it."""
    fitting = []
    for name, cls in known_losses().items():
        loss = stand_in(cls, {})
        try:
            layout = layout_of(loss, task.task_type, negatives_per_query) if loss is not None else None
        except ValueError:
            continue
        if (
            layout is not None
            and loss is not None
            and not layout.missing(task)
            and not _learns_nothing(loss, layout, task)
        ):
            fitting.append(name)
    return fitting


def _learns_nothing(loss: nn.Module, layout: ColumnLayout, task: TaskColumns) -> str | None:
    """Why ``loss`` reading ``layout`` has no gradient on ``task``'s rows (:mod:`~hf_unified_embed.losses.learns_from`)."""
    return learns_from(loss).problem(layout, task)


def check_loss_fits(loss: nn.Module, task: TaskColumns, negatives_per_query: int, where: str) -> None:
    """Refuse ``loss`` for ``task`` when the rows lack what it reads, or when it would learn nothing from them.

    Args:
        loss: The loss (an instance, or a :func:`stand_in` of a recipe's class and options).
        task: What the task's rows carry.
        negatives_per_query: K− the run draws for the task.
        where: The key the loss was given under, e.g. ``losses.retrieval``.

    Raises:
        LossFitError: One line naming the task, the loss, what is missing and the losses that fit
            (``losses.retrieval: task 'wikiqa' (retrieval) cannot train with CoDiEmbSTSLoss: it needs
            positive_scores (empty in 16 of 16 rows); losses that fit this task: ...``), or why its loss and
            gradient would be 0 on these rows (``cannot train with OnlineContrastiveLoss: it would learn
            nothing: it learns only from pairs labelled exactly 0 or 1, and these scores are graded ...``).
    """
    try:
        layout = layout_of(loss, task.task_type, negatives_per_query)
    except ValueError as error:
        problem = str(error).rstrip(".")
    else:
        if _undeclared_sentence_transformers_loss(loss):
            problem = "the columns and labels this sentence-transformers loss reads are not known to the collator"
        elif layout is None:
            return  # described once built (losses_for_tasks checks the built loss)
        elif missing := layout.missing(task):
            problem = "it needs " + "; ".join(missing)
        elif nothing := _learns_nothing(loss, layout, task):
            problem = f"it would learn nothing: {nothing}"
        else:
            return
    fitting = losses_that_fit(task, negatives_per_query)
    suggestion = f"losses that fit this task: {', '.join(fitting)}" if fitting else "no known loss fits this task"
    raise LossFitError(
        f"{where}: task {shown(task.task)} ({task.task_type}) cannot train with {_name(loss)}: {problem}; {suggestion}"
    )
