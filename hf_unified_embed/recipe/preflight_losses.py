"""Recipe preflight, losses: every loss name resolves and its keyword arguments fit its signature.

:func:`check_loss_in_source` reads the losses' source files (nothing imported) for the quick preflight;
:func:`resolve_loss_class` and :func:`bind_loss_kwargs` import the class and check every value against its
parameter's annotation (``temperature: "hot"`` is refused, naming the key).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any, cast

from hf_unified_embed.errors import RecipeError, shown
from hf_unified_embed.utils.plugins import import_object, is_import_path
from hf_unified_embed.utils.typecheck import constructor_parameters, type_problem

if TYPE_CHECKING:
    from torch import nn


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


def yaml_number_hint(value: Any) -> str:
    """Why a number arrived as text: YAML 1.1 reads ``1e-4`` (no dot) as a string."""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return ""
        return "; YAML reads a number like 1e-4 without a dot as text: write 1.0e-4"
    return ""
