"""Whether a value from a YAML file fits the annotation of the parameter or field it is meant for.

Recipes, suites and configs hand their values to classes that never check them: a loss's
``temperature: "hot"`` or a trainer's ``learning_rate: fast`` would be accepted and fail much later,
inside a comparison, with no key named. The annotations those classes already declare say what fits,
so each value is checked against its annotation (pydantic's strict mode: no string is read as a
number, no ``1`` as ``true``; a YAML list stands for a tuple) before anything is built, and the caller
names the file and key.

* :func:`constructor_parameters`: what ``cls(...)`` takes, following ``**kwargs`` to the base classes;
* :func:`function_parameters`: what a function takes (a source format's options);
* :func:`field_annotations`: the annotations of a dataclass's fields;
* :func:`type_problem`: why a value does not fit an annotation, or ``None``.

An annotation pydantic cannot check (``Any``, a bare class without a schema, a name imported only for
type checkers) is left unchecked rather than guessed.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
import typing
from collections.abc import Hashable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, cast

from hf_unified_embed.errors import shown


def type_problem(annotation: Any, value: Any) -> str | None:
    """Why ``value`` does not fit ``annotation`` (pydantic's strict check), or ``None``.

    YAML has no tuples and no paths: a list where a tuple is annotated (``score_range: [0, 5]``) and
    a string where a ``Path`` is annotated stand for one.
    """
    adapter = _adapter(annotation)
    if adapter is None:
        return None
    errors = _errors(adapter, value)
    if not errors:
        return None
    tuples = any(error["type"] == "tuple_type" for error in errors)
    paths = any(error["type"] == "is_instance_of" and isinstance(error["input"], str) for error in errors)
    if tuples or paths:
        as_yaml_means = _yaml_meaning(value, tuples=tuples, paths=paths)
        if as_yaml_means != value:
            errors = _errors(adapter, as_yaml_means)
            if not errors:
                return None
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        # pydantic reports every member's failure; the annotation itself says it in a few words.
        return "input should be " + " or ".join(_in_words(member) for member in typing.get_args(annotation))
    location = "".join(f"[{shown(part)}]" for part in errors[0]["loc"])
    return f"{location} {errors[0]['msg'][0].lower()}{errors[0]['msg'][1:]}".strip()


#: How a recipe's author reads the members of a union (YAML words: null, true/false).
_WORDS = {
    type(None): "null",
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    Path: "a path",
}


def _in_words(annotation: Any) -> str:
    """``Annotated[int, Ge(1)]`` as "an integer >= 1", ``Literal['auto']`` as "'auto'", ``None`` as "null"."""
    if typing.get_origin(annotation) is typing.Annotated:
        base, *metadata = typing.get_args(annotation)
        bounds = [
            f"{symbol} {getattr(item, name)}"
            for item in metadata
            for name, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
            if getattr(item, name, None) is not None
        ]
        shortest = max((getattr(item, "min_length", None) or 0 for item in metadata), default=0)
        longest = min((n for item in metadata if (n := getattr(item, "max_length", None)) is not None), default=None)
        if shortest == longest:
            bounds.append(f"of exactly {shortest} character{'s' * (shortest != 1)}")
        else:
            bounds += [f"of at least {shortest} characters"] * bool(shortest)
            bounds += [f"of at most {longest} characters"] * (longest is not None)
        return " ".join([_in_words(base), *bounds])
    if typing.get_origin(annotation) is typing.Literal:
        return " or ".join(repr(value) for value in typing.get_args(annotation))
    return _WORDS.get(annotation, inspect.formatannotation(annotation).replace("typing.", ""))


def _errors(adapter: Any, value: Any) -> list[Any]:
    from pydantic import ValidationError

    try:
        adapter.validate_python(value, strict=True)
    except ValidationError as error:
        return list(error.errors())
    return []


def _yaml_meaning(value: Any, *, tuples: bool, paths: bool) -> Any:
    """``value`` with its lists as tuples and its strings as paths (at any depth), as asked."""
    if isinstance(value, (list, tuple)):
        items = [_yaml_meaning(item, tuples=tuples, paths=paths) for item in value]
        return tuple(items) if tuples else items
    if isinstance(value, dict):
        return {key: _yaml_meaning(item, tuples=tuples, paths=paths) for key, item in value.items()}
    if paths and isinstance(value, str):
        return Path(value)
    return value


@cache
def _adapter(annotation: Any) -> Any:
    """A pydantic ``TypeAdapter`` for ``annotation``; ``None`` for ``Any`` or a type pydantic cannot check."""
    from pydantic import PydanticUserError, TypeAdapter
    from pydantic.errors import PydanticSchemaGenerationError

    if annotation is Any:
        return None
    try:
        return TypeAdapter(annotation)
    except (PydanticUserError, PydanticSchemaGenerationError, TypeError):  # e.g. a bare class without a schema
        return None


@cache
def constructor_parameters(cls: Hashable) -> dict[str, tuple[Any, bool]]:
    """``{name: (annotation, has_default)}`` of ``cls(...)``, following ``**kwargs`` to the base classes."""
    parameters: dict[str, tuple[Any, bool]] = {}
    for klass in cast(type, cls).__mro__:
        if "__init__" not in vars(klass):
            continue
        own, takes_more = _signature(vars(klass)["__init__"], klass.__module__)
        parameters.update({name: value for name, value in own.items() if name not in parameters})
        if not takes_more:
            break
    return parameters


@cache
def function_parameters(function: Hashable) -> dict[str, tuple[Any, bool]]:
    """``{name: (annotation, has_default)}`` of a function's parameters (e.g. a source format's options)."""
    return _signature(function, cast(Any, function).__module__)[0]


def _signature(function: Any, module_name: str) -> tuple[dict[str, tuple[Any, bool]], bool]:
    """The parameters of ``function`` but ``self``, and whether it takes ``**kwargs``."""
    module = getattr(sys.modules.get(module_name), "__dict__", {})
    parameters: dict[str, tuple[Any, bool]] = {}
    takes_more = False
    for name, parameter in inspect.signature(function).parameters.items():
        if name == "self":
            continue
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            takes_more = True
        elif parameter.kind is not inspect.Parameter.VAR_POSITIONAL:
            parameters[name] = (
                _resolve(parameter.annotation, module),
                parameter.default is not inspect.Parameter.empty,
            )
    return parameters, takes_more


@cache
def field_annotations(cls: Hashable) -> dict[str, Any]:
    """``{field: annotation}`` of the dataclass ``cls`` (``Any`` where one does not resolve)."""
    module = getattr(sys.modules.get(cast(type, cls).__module__), "__dict__", {})
    return {field.name: _resolve(field.type, module) for field in dataclasses.fields(cast(type, cls))}


def _resolve(annotation: Any, namespace: Mapping[str, Any]) -> Any:
    if annotation is inspect.Parameter.empty:
        return Any
    if isinstance(annotation, str):
        try:
            # A library's own annotation, evaluated in its module as typing.get_type_hints does.
            return eval(annotation, dict(namespace))
        except (NameError, TypeError, SyntaxError):  # a name imported only for type checkers: left unchecked
            return Any
    return annotation


def mismatched_field(cls: Hashable, values: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first ``(field, problem)`` of ``values`` that does not fit the dataclass ``cls``'s annotation, or ``None``.

    Keys that are not fields are left to the caller (which reports unknown keys its own way).
    """
    annotations = field_annotations(cls)
    for key, value in values.items():
        if key in annotations:
            problem = type_problem(annotations[key], value)
            if problem:
                return key, f"{problem}, got {shown(value)}"
    return None
