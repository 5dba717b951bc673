"""A public function's arguments checked against its own annotations, at its entry.

``train_from_recipe(123)`` used to end in an ``AttributeError`` three modules down, and
``mine_hard_negatives(["rows"], model)`` in ``'list' object has no attribute 'items'``: neither says
which argument is wrong or what it takes. The annotations already say what each argument takes, so
:func:`checked_arguments` reads them once and checks each argument a caller gave before the function
runs, raising one :class:`~hf_unified_embed.errors.ArgumentError` that names the function, the argument
and what fits::

    train_from_recipe: recipe must be a TrainRecipe, got 123

The check is ``isinstance`` on what the annotation names — union members, ``Literal`` values, the keys
and values of a ``Mapping``, the items of a ``Sequence`` — and leaves alone what it cannot check
without consuming it (an ``Iterable``'s items), what it cannot name (``Any``, a type variable) and the
arguments a caller did not give (the defaults). It is a guard for wrong types and names, not a second
validation of values: what a value means (a task a dataset does not have, a file that does not exist)
stays with the function's own checks.
"""

from __future__ import annotations

import collections.abc
import functools
import importlib
import inspect
import numbers
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import Any, ParamSpec, TypeVar

from hf_unified_embed.errors import ArgumentError, shown

P = ParamSpec("P")
R = TypeVar("R")

#: Library names a module may import only for type checkers (to keep its import light): resolved from
#: the library when an annotation names them, so that ``model: SentenceTransformer`` is still checked.
_LIBRARY_NAMES = {
    "SentenceTransformer": ("sentence_transformers", "SentenceTransformer"),
    "CrossEncoder": ("sentence_transformers", "CrossEncoder"),
    "Dataset": ("datasets", "Dataset"),
    "DatasetDict": ("datasets", "DatasetDict"),
    "IterableDataset": ("datasets", "IterableDataset"),
    "IterableDatasetDict": ("datasets", "IterableDatasetDict"),
    "torch": ("torch", None),
    "nn": ("torch.nn", None),
    "np": ("numpy", None),
    "pa": ("pyarrow", None),
}

#: How an error names the types a user meets most.
_WORDS: dict[Any, str] = {
    type(None): "None",
    bool: "True or False",
    int: "an integer",
    float: "a number",
    str: "a string",
    PurePath: "a path",
}


def checked_arguments(function: Callable[P, R] | None = None, *, first: Callable[..., None] | None = None) -> Any:
    """``function`` that first checks each argument it is given against its annotation.

    Args:
        function: the public function (``@checked_arguments``).
        first: the function's own check, with words the annotation cannot give ("one task: ['stsb']", "pass
            ``{"task_name": dataset}``"): called with the given arguments by name before the annotation check
            (``@checked_arguments(first=_check_request)``); it raises :class:`~hf_unified_embed.errors.ArgumentError`.

    Raises:
        hf_unified_embed.errors.ArgumentError: (from the returned function) an argument that does not fit
            its annotation: ``"<function>: <argument> must be <what fits>, got <value>"``.
    """
    if function is None:
        return functools.partial(checked_arguments, first=first)
    signature = inspect.signature(function)

    @functools.wraps(function)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:  # a missing or unknown argument: Python's own words, under our name
            raise ArgumentError(f"{function.__name__}: {error}") from None
        if first is not None:
            try:
                first(**bound.arguments)
            except ArgumentError as error:
                raise ArgumentError(f"{function.__name__}: {error}") from None
        annotations = _annotations(function)
        for name, value in bound.arguments.items():
            kind = signature.parameters[name].kind
            if kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                continue
            problem = _problem(annotations.get(name, Any), value, name)
            if problem is not None:
                where, annotation, got = problem
                raise ArgumentError(f"{function.__name__}: {where} must be {_in_words(annotation)}, got {shown(got)}")
        return function(*args, **kwargs)

    return checked


@functools.cache
def _annotations(function: Callable[..., Any]) -> dict[str, Any]:
    """``{parameter: annotation}``, resolved on first call (the module is complete by then)."""
    module = vars(sys.modules[function.__module__])
    names = _Names(module)
    resolved: dict[str, Any] = {}
    for name, parameter in inspect.signature(function).parameters.items():
        annotation = parameter.annotation
        if annotation is inspect.Parameter.empty:
            annotation = Any
        elif isinstance(annotation, str):
            try:
                annotation = eval(annotation, dict(module), names)  # as typing.get_type_hints evaluates it
            except (NameError, AttributeError, TypeError, SyntaxError, ImportError):
                annotation = Any  # a name this module cannot resolve: left unchecked rather than guessed
        resolved[name] = annotation
    return resolved


class _Names(dict[str, Any]):
    """The local names an annotation is evaluated with: the library names a module imports only for type checkers."""

    def __init__(self, module: Mapping[str, Any]) -> None:
        super().__init__()
        self._module = module

    def __missing__(self, name: str) -> Any:
        if name in self._module or name not in _LIBRARY_NAMES:
            raise KeyError(name)
        module_name, attribute = _LIBRARY_NAMES[name]
        module = importlib.import_module(module_name)
        return module if attribute is None else getattr(module, attribute)


def _problem(annotation: Any, value: Any, where: str) -> tuple[str, Any, Any] | None:
    """``(where, annotation, value)`` of the first part of ``value`` that does not fit, or ``None``."""
    if annotation is Any or isinstance(annotation, (TypeVar, str, typing.ForwardRef)):
        return None
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _problem(arguments[0], value, where)
    if origin in (typing.Union, types.UnionType):
        if any(_problem(member, value, where) is None for member in arguments):
            return None
        # one member that is a container of the value's kind says more (e.g. which task's value is wrong)
        for member in arguments:
            container = typing.get_origin(member)
            if isinstance(container, type) and container not in (type, tuple) and isinstance(value, container):
                return _problem(member, value, where)
        return where, annotation, value
    if origin is typing.Literal:
        return (
            None
            if any(value == item and type(value) is type(item) for item in arguments)
            else (where, annotation, value)
        )
    if annotation is None or annotation is type(None):
        return None if value is None else (where, annotation, value)
    if origin is collections.abc.Callable or annotation is collections.abc.Callable:
        return None if callable(value) else (where, annotation, value)
    if origin is type:
        return None if isinstance(value, type) else (where, annotation, value)
    cls = origin or annotation
    if not isinstance(cls, type):
        return None  # a construct this check does not know: left to the function
    if not _is_instance(value, cls):
        return where, annotation, value
    if issubclass(cls, Mapping) and len(arguments) == 2:
        for key, item in value.items():
            problem = _problem(arguments[0], key, f"{where} key {shown(key)}") or _problem(
                arguments[1], item, f"{where}[{shown(key)}]"
            )
            if problem is not None:
                return problem
    elif issubclass(cls, collections.abc.Sequence) and not issubclass(cls, tuple) and len(arguments) == 1:
        for index, item in enumerate(value):
            problem = _problem(arguments[0], item, f"{where}[{index}]")
            if problem is not None:
                return problem
    return None


def _is_instance(value: Any, cls: type) -> bool:
    """``isinstance`` as a user means the annotation: ``True`` is no integer, an integer is a number, a string
    is no sequence or iterable of strings (it would be read one character at a time)."""
    if isinstance(value, bool) and cls is not bool:
        return cls is object
    if cls is int:
        return isinstance(value, numbers.Integral)
    if cls is float:
        return isinstance(value, numbers.Real)
    if issubclass(cls, PurePath):
        return isinstance(value, (str, os.PathLike))
    if isinstance(value, str) and cls in (
        collections.abc.Sequence,
        collections.abc.Iterable,
        collections.abc.Collection,
    ):
        return False
    try:
        return isinstance(value, cls)
    except TypeError:  # a Protocol or TypedDict that cannot be checked at run time: left to the function
        return True


def _in_words(annotation: Any) -> str:
    """``str | Path | None`` as "a string or a path or None", ``Mapping[str, Dataset]`` as "a mapping of str to Dataset"."""
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _in_words(arguments[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(_in_words(member) for member in arguments))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(item) for item in arguments)
    if annotation is None or annotation is type(None):
        return "None"
    cls = origin or annotation
    if isinstance(cls, type) and issubclass(cls, PurePath):
        return _WORDS[PurePath]
    if cls in _WORDS:
        return _WORDS[cls]
    if isinstance(cls, type) and cls.__module__ in ("builtins", "collections.abc"):
        if issubclass(cls, Mapping):
            inner = f" of {_name(arguments[0])} to {_name(arguments[1])}" if len(arguments) == 2 else ""
            return f"a mapping{inner}"
        if issubclass(cls, collections.abc.Iterable) and cls is not type:
            inner = f" of {_name(arguments[0])}" if len(arguments) == 1 else ""
            return f"{_article(cls.__name__.lower())}{inner}"
        if cls is collections.abc.Callable:
            return "a callable"
    return _article(_name(annotation))


def _name(annotation: Any) -> str:
    """An annotation as code spells it, short: ``str | Path``, ``Dataset``, ``tuple``, ``Any``."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_name(member) for member in typing.get_args(annotation))
    if origin is typing.Annotated:
        return _name(typing.get_args(annotation)[0])
    if annotation is None or annotation is type(None):
        return "None"
    cls = origin or annotation
    return str(getattr(cls, "__name__", cls)).removeprefix("typing.")


def _article(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"
