"""Recipe preflight, losses: every loss name resolves, its keyword arguments fit its signature, and it can
read the rows of every task it is given for.

:func:`check_loss_in_source` reads the losses' source files (nothing imported) for the quick preflight;
:func:`resolve_loss_class` and :func:`bind_loss_kwargs` import the class and check every value against its
parameter's annotation (``temperature: "hot"`` is refused, naming the key). Once the data are loaded, and
before any model (the base, a curriculum's teacher) loads, :func:`check_losses_fit_tasks` checks every
(task, loss) pair: a loss whose columns or values the task lacks is refused in one line naming the task,
the loss, what is missing and the losses that fit.
"""

from __future__ import annotations

import difflib
import inspect
import logging
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any, cast

from hf_unified_embed.errors import LossFitError, RecipeError, shown
from hf_unified_embed.utils.plugins import import_object, is_import_path
from hf_unified_embed.utils.typecheck import constructor_parameters, type_problem

if TYPE_CHECKING:
    from datasets import Dataset
    from torch import nn

    from hf_unified_embed.recipe.train_recipe import TrainRecipe

logger = logging.getLogger(__name__)


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


def bind_loss_kwargs(cls: type[nn.Module], kwargs: Mapping[str, Any], where: str) -> None:
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
                f"{where}.{key} (of {cls.__name__}): {problem}, got {shown(value)}{yaml_number_hint(value)}"
            )


def _loss_kwargs_error(where: str, class_name: str, problem: str, names: list[str]) -> RecipeError:
    return RecipeError(f"{where}: {class_name}: {problem}; its parameters: {names}")


#: Where a loss named by its bare class name is looked up, in this order (:func:`resolve_loss_class`).
_LOSS_MODULES = ("hf_unified_embed.losses", "sentence_transformers.sentence_transformer.losses")


def check_loss_in_source(spec: Mapping[str, Any], where: str) -> None:
    """The loss name and its keyword names, checked in the source files (nothing imported): an unknown
    loss or keyword is refused with the message of :func:`resolve_loss_class` / :func:`bind_loss_kwargs`.

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


def check_losses_fit_tasks(
    recipe: TrainRecipe,
    losses: Mapping[str, tuple[type[nn.Module], Mapping[str, Any]]],
    tasks: Mapping[str, Dataset],
) -> None:
    """Every task's loss can read its rows; a loss for a task type no task has is a warning.

    Runs after the data load and before any model does (the base model, a curriculum's teacher), in
    ``train`` and ``train --check`` alike. A teacher-computed curriculum adds the ``difficulty`` column
    later, so it counts as present then. A loss whose class cannot be described before it is built is
    checked once built (:func:`~hf_unified_embed.training.losses_for_tasks`).

    Args:
        recipe: The checked recipe (for its file name, ``negatives_per_query`` and curriculum).
        losses: ``{task name or task type: (loss class, kwargs)}`` as preflight resolved them.
        tasks: The loaded tasks (for a streaming run, the first rows of each).

    Raises:
        LossFitError: ``RECIPE: losses.KEY: task 'T' (TYPE) cannot train with LOSS: it needs FIELD (empty in
            N of M rows); losses that fit this task: A, B`` for the first pair that does not fit.
        RecipeError: A task has no loss, or a loss key names neither a task nor a task type of the data.
    """
    from hf_unified_embed.losses.columns import TaskColumns
    from hf_unified_embed.losses.task_fit import check_loss_fits, stand_in
    from hf_unified_embed.schema import TASK_TYPES

    origin = recipe.source or "<recipe>"
    difficulty_planned = recipe.curriculum is not None and not recipe.curriculum.plan
    k_neg = recipe.negatives_per_query
    used = set()
    for task, dataset in tasks.items():
        try:
            rows = TaskColumns.of(dataset, task, difficulty_planned=difficulty_planned)
        except ValueError as error:
            raise RecipeError(f"{origin}: data: {error}") from None
        key = task if task in losses else rows.task_type
        used.add(key)
        if key not in losses:
            raise RecipeError(
                f"{origin}: losses: task {shown(task)} (task_type {shown(rows.task_type)}) has no loss; give one "
                f"under the task name or its task type (losses are given for {sorted(losses)})"
            )
        cls, kwargs = losses[key]
        loss = stand_in(cls, kwargs)
        if loss is None:
            continue  # checked once built (losses_for_tasks)
        try:
            check_loss_fits(loss, rows, k_neg, f"losses.{key}")
        except LossFitError as error:
            raise error.within(origin) from None
    if unmatched := sorted(set(losses) - used - set(TASK_TYPES)):
        raise RecipeError(
            f"{origin}: losses given for {unmatched} match no task name or task type of {recipe.data.path}"
        )
    if unused := [key for key in losses if key in TASK_TYPES and key not in used]:
        # One recipe may serve several data folders (the shipped one names pair_classification for when
        # msrp is added), so this is no error; but a loss silently left out is worth one line.
        logger.warning(
            "%s: losses given for task type(s) %s are not used: no task of %s has that type",
            origin, ", ".join(unused), recipe.data.path,
        )  # fmt: skip


def yaml_number_hint(value: Any) -> str:
    """Why a number arrived as text: YAML 1.1 reads ``1e-4`` (no dot) as a string."""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return ""
        return "; YAML reads a number like 1e-4 without a dot as text: write 1.0e-4"
    return ""
