"""Classes, their ``__init__`` parameters and dataclass fields read from source with ``ast``: nothing is imported.

Importing sentence-transformers takes seconds (torch, transformers, scikit-learn), and a typo in a
recipe must be reported in about one (:func:`~hf_unified_embed.recipe.preflight.quick_preflight`). The
resolver follows a name through a module's imports in its source file, as Python would bind it, and
answers only when the source says for certain. Otherwise — a lazy module with ``__getattr__``, a
``from ... import *``, a name bound twice, an inherited ``__init__``, a base class it cannot follow —
it answers ``None`` and the caller imports the class and checks it as before: the answers are the same
as the imported class's (``tests/test_train_rows.py`` compares them for every loss of this package and of
sentence-transformers, and for ``SentenceTransformerTrainingArguments``).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

#: How many imports deep a name is followed.
MAX_DEPTH = 8


@dataclass(frozen=True)
class SourceClass:
    """A class found in source: its module and its ``ast`` node."""

    module: str
    node: ast.ClassDef

    @property
    def name(self) -> str:
        return self.node.name


class _Absent:
    """The module's source binds no such name, for certain."""


#: ``find_class`` answer: the module binds no such name.
ABSENT = _Absent()


@dataclass(frozen=True)
class _Binding:
    kind: str  # "class", "from" (an import of ``name`` from ``module``) or "other"
    node: ast.ClassDef | None = None
    module: str = ""
    name: str = ""


@dataclass(frozen=True)
class _Module:
    bindings: dict[str, _Binding | None]  # None: bound more than once, or in a way the resolver cannot follow
    complete: bool  # no module ``__getattr__``, star import or ``sys.modules`` swap: an unbound name is absent


def module_file(module: str) -> Path | None:
    """The source file of ``module``, found without importing it or its packages (``None``: not found)."""
    top, *parts = module.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: nothing is imported
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not parts:
        origin = spec.origin
        return Path(origin) if origin and origin.endswith(".py") else None
    for location in spec.submodule_search_locations or []:
        folder = Path(location).joinpath(*parts[:-1])
        for candidate in (folder / parts[-1] / "__init__.py", folder / f"{parts[-1]}.py"):
            if candidate.is_file():
                return candidate
    return None


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str | None:
    if not node.level:
        return node.module
    package = module.split(".") if is_package else module.split(".")[:-1]
    if node.level - 1 > len(package):
        return None
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@functools.cache
def _module(module: str) -> _Module | None:
    path = module_file(module)
    if path is None:
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    is_package = path.name == "__init__.py"
    bindings: dict[str, _Binding | None] = {}
    complete = True

    def bind(name: str, binding: _Binding) -> None:
        bindings[name] = binding if name not in bindings or bindings[name] == binding else None

    def visit(statements: list[ast.stmt]) -> None:
        nonlocal complete
        for statement in statements:
            if isinstance(statement, ast.ClassDef):
                bind(statement.name, _Binding("class", node=statement))
            elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if statement.name == "__getattr__":
                    complete = False
                bind(statement.name, _Binding("other"))
            elif isinstance(statement, ast.ImportFrom):
                source = _absolute(module, is_package, statement)
                for alias in statement.names:
                    if alias.name == "*":
                        complete = False
                    elif source is None:
                        bind(alias.asname or alias.name, _Binding("other"))
                    else:
                        bind(alias.asname or alias.name, _Binding("from", module=source, name=alias.name))
            elif isinstance(statement, ast.Import):
                for alias in statement.names:
                    bind(alias.asname or alias.name.split(".")[0], _Binding("other"))
            elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            bind(name.id, _Binding("other"))
                        elif isinstance(name, ast.Subscript):  # sys.modules[__name__] = _LazyModule(...)
                            complete = False
            elif isinstance(statement, ast.If):
                # ``if TYPE_CHECKING:`` lists what a lazy module binds on first use; other branches may bind.
                visit(statement.body)
                visit(statement.orelse)
            elif isinstance(statement, ast.Try):
                visit(statement.body)
                for handler in statement.handlers:
                    visit(handler.body)
                visit(statement.orelse)
                visit(statement.finalbody)
            elif isinstance(statement, (ast.With, ast.For, ast.While, ast.Match)):
                complete = False  # bindings the resolver does not follow

    visit(tree.body)
    return _Module(bindings, complete)


def find_class(module: str, name: str, depth: int = 0) -> SourceClass | _Absent | None:
    """The class ``module`` binds to ``name``: a :class:`SourceClass`, :data:`ABSENT` (the module binds no
    such name), or ``None`` (the source does not say for certain)."""
    parsed = _module(module) if depth <= MAX_DEPTH else None
    if parsed is None:
        return None
    if name not in parsed.bindings:
        return ABSENT if parsed.complete else None
    binding = parsed.bindings[name]
    if binding is None or binding.kind == "other":
        return None
    if binding.kind == "class":
        assert binding.node is not None
        return SourceClass(module, binding.node)
    found = find_class(binding.module, binding.name, depth + 1)
    return found if isinstance(found, SourceClass) else None


def bound_names(module: str) -> set[str] | None:
    """Every name ``module``'s source binds, or ``None`` when that is not certain (a lazy module, ``*``)."""
    parsed = _module(module)
    return set(parsed.bindings) if parsed is not None and parsed.complete else None


@dataclass(frozen=True)
class Parameter:
    name: str
    kind: str  # "positional_only", "positional_or_keyword" or "keyword_only"
    has_default: bool


def init_parameters(cls: SourceClass) -> list[Parameter] | None:
    """The parameters of the class's own ``__init__`` after ``self``, as ``inspect.signature(cls)`` lists
    them; ``None`` when the source does not fix them (``*args``/``**kwargs``, decorators, an inherited
    ``__init__``, ``__new__`` or ``__signature__``)."""
    if cls.node.decorator_list:
        return None
    init = None
    for statement in cls.node.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and statement.name in ("__new__",):
            return None
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and any(
            isinstance(target, ast.Name) and target.id == "__signature__"
            for target in (statement.targets if isinstance(statement, ast.Assign) else [statement.target])
        ):
            return None
        if isinstance(statement, ast.FunctionDef) and statement.name == "__init__":
            init = statement
    if init is None or init.decorator_list or init.args.vararg or init.args.kwarg:
        return None
    arguments = init.args
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults_from = len(positional) - len(arguments.defaults)
    parameters = [
        Parameter(
            argument.arg,
            "positional_only" if index < len(arguments.posonlyargs) else "positional_or_keyword",
            index >= defaults_from,
        )
        for index, argument in enumerate(positional)
    ]
    parameters += [
        Parameter(argument.arg, "keyword_only", default is not None)
        for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults)
    ]
    return parameters[1:] if parameters else None  # without self


def _is_class_var(annotation: ast.expr) -> bool:
    target = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        name = annotation.value.split("[")[0].rpartition(".")[2]
    return name in ("ClassVar", "InitVar")


def dataclass_field_names(cls: SourceClass, depth: int = 0) -> set[str] | None:
    """The names of the class's annotated attributes and its bases' (its dataclass fields, or more);
    ``None`` when a base class cannot be followed in source."""
    if depth > MAX_DEPTH:
        return None
    names = {
        statement.target.id
        for statement in cls.node.body
        if isinstance(statement, ast.AnnAssign)
        and isinstance(statement.target, ast.Name)
        and not _is_class_var(statement.annotation)
    }
    for base in cls.node.bases:
        if isinstance(base, ast.Name) and base.id == "object":
            continue
        found = find_class(cls.module, base.id) if isinstance(base, ast.Name) else None
        if not isinstance(found, SourceClass):
            return None
        inherited = dataclass_field_names(found, depth + 1)
        if inherited is None:
            return None
        names |= inherited
    return names
