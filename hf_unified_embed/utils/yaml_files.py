"""Reading the YAML files users write: build recipes, training recipes, evaluation suites, merge configs.

Every one of them goes through :func:`read_yaml_mapping`, which is strict where PyYAML is lenient: a key
given twice in one mapping is an error (PyYAML keeps the last value silently, so
``{learning_rate: 5.0e-5, learning_rate: 5.0}`` would train at 5.0), and a file nested deeper than
:data:`MAX_DEPTH` levels is refused in one line (PyYAML composes and constructs recursively: 3,000 levels
were a ``RecursionError``). :func:`relative_to_file` is the
one rule for paths written in such a file: a relative path is relative to the file's own folder.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

#: The deepest nesting of mappings and lists a file may have: far beyond any recipe's (four or five levels),
#: far below what Python's recursion limit lets PyYAML compose.
MAX_DEPTH = 100

_MERGE_TAG = "tag:yaml.org,2002:merge"
_VALUE_TAG = "tag:yaml.org,2002:value"


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A key given twice in one mapping; ``line`` and ``first_line`` count from 1, ``where`` is the key path."""

    def __init__(self, where: str, duplicate: Node, first: Node) -> None:
        self.key, self.first_key, self.where = str(duplicate.value), str(first.value), where
        self.line, self.first_line = duplicate.start_mark.line + 1, first.start_mark.line + 1
        super().__init__(None, None, self.description, duplicate.start_mark)

    @property
    def description(self) -> str:
        """``duplicate key 'learning_rate' in 'training_args' (first at line 6)``: the key, its path, the first line."""
        place = f"in '{self.where}'" if self.where else "at the top level"
        same = f" (the same key as '{self.first_key}')" if self.first_key != self.key else ""
        hint = "; merge several mappings with one '<<: [*a, *b]'" if self.key == "<<" else ""
        return f"duplicate key '{self.key}'{same} {place} (first at line {self.first_line}){hint}"


class StrictSafeLoader(yaml.SafeLoader):
    """PyYAML's ``SafeLoader`` that refuses a key given twice in one mapping, at any depth.

    Block and flow mappings alike, and the mappings merged in with ``<<``: a key written twice in one
    mapping (``<<`` included) is a :class:`DuplicateKeyError`. A key that a merge (``<<: *defaults``)
    brings in and the mapping then gives explicitly is overridden, as YAML specifies; that is what
    merge keys are for, and it stays allowed (so does a key that two merged mappings share: the first
    one's value wins, see :meth:`flatten_mapping`).
    """

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._key_paths: dict[int, str] = {}
        self._checked: set[int] = set()
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        """Compose a node, refusing one nested deeper than :data:`MAX_DEPTH` where it starts."""
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node: Node) -> Any:
        self._key_paths = _key_paths(node)
        return super().construct_document(node)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> Any:
        if isinstance(node, MappingNode):
            self._refuse_duplicate_keys(node)  # before flatten_mapping mixes the merged keys in
        return super().construct_mapping(node, deep=deep)

    def flatten_mapping(self, node: MappingNode) -> None:
        """Resolve ``<<`` in ``node`` as the YAML merge key type says, the same with every PyYAML version.

        The merged mappings' pairs come first — where two of them share a key, only the first mapping's
        pair (PyYAML 6.0.4 decides that by the identity of the key's string object, so the value could
        depend on whether Python interned the string) — then the explicit pairs, which override them
        when the dict is built. A mapping merged in is flattened without being constructed: it is
        checked for duplicate keys here.
        """
        self._refuse_duplicate_keys(node)
        merged: list[tuple[Node, Node]] = []
        explicit: list[tuple[Node, Node]] = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                if key_node.tag == _VALUE_TAG:
                    key_node.tag = "tag:yaml.org,2002:str"
                explicit.append((key_node, value_node))
                continue
            sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
            for source in sources:
                if not isinstance(source, MappingNode):
                    what = (
                        "a mapping for merging"
                        if source is not value_node
                        else "a mapping or list of mappings for merging"
                    )
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"expected {what}, but found {source.id}",
                        source.start_mark,
                    )
                self.flatten_mapping(source)
                merged.extend(source.value)
        if merged:
            first: dict[Any, tuple[Node, Node]] = {}
            for pair in merged:
                first.setdefault(self._key_of(pair[0]), pair)
            node.value = [*first.values(), *explicit]

    def _refuse_duplicate_keys(self, node: MappingNode) -> None:
        if id(node) in self._checked:  # an anchored mapping is checked once, as written
            return
        self._checked.add(id(node))
        seen: dict[Any, Node] = {}
        for key_node, _ in node.value:
            first = seen.setdefault(self._key_of(key_node), key_node)
            if first is not key_node:
                raise DuplicateKeyError(self._key_paths.get(id(node), ""), key_node, first)

    def _key_of(self, key_node: Node) -> Any:
        """What makes two keys one: the constructed value (``0x10`` and ``16`` are one key, as in the dict)."""
        if key_node.tag == _MERGE_TAG:
            return (_MERGE_TAG,)
        if key_node.tag == _VALUE_TAG:
            return key_node.value
        if isinstance(key_node, ScalarNode):
            key = self.construct_object(key_node)
            try:
                hash(key)
            except TypeError:
                return key_node  # unhashable: PyYAML refuses it itself when it builds the dict
            return key
        return key_node  # a mapping or list as a key: only equal to itself


def _key_paths(root: Node) -> dict[int, str]:
    """``{id(node): key path}`` of every mapping and list, ``training_args`` or ``sources[0].options``.

    Document order, so that a mapping with an anchor gets the path where it is written, not that of an
    alias to it.
    """
    paths: dict[int, str] = {}
    stack: list[tuple[Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in paths or not isinstance(node, (MappingNode, SequenceNode)):
            continue
        paths[id(node)] = path
        children: list[tuple[Node, str]] = []
        if isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:
                    name = "<<"
                else:
                    name = str(key_node.value) if isinstance(key_node, ScalarNode) else "?"
                children.append((value_node, f"{path}.{name}" if path else name))
        else:
            children = [(item, f"{path}[{index}]") for index, item in enumerate(node.value)]
        stack.extend(reversed(children))
    return paths


def load_yaml_text(text: str) -> Any:
    """``yaml.safe_load`` with :class:`StrictSafeLoader`: a duplicate key raises :class:`DuplicateKeyError`."""
    return yaml.load(text, Loader=StrictSafeLoader)  # a SafeLoader: no arbitrary objects


def read_yaml_mapping(path: str | Path, error: type[Exception]) -> dict[str, Any]:
    """The top-level mapping of a YAML file (``{}`` for an empty file).

    A missing file, bytes that are not UTF-8 (a binary file, a UTF-16 export), invalid YAML, a key given
    twice in one mapping (``file:7: duplicate key 'learning_rate' in 'training_args' (first at line
    6)``) or a top level that is not a mapping raise ``error`` with one line naming the file and where in
    it, so that each command reports it as an input error rather than a traceback.
    """
    path = Path(path)
    if path.is_dir():
        raise error(f"{path}: is a folder; give the YAML file itself")
    if not path.is_file():
        raise error(f"{path}: file does not exist")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as problem:
        line = raw.count(b"\n", 0, problem.start) + 1
        raise error(
            f"{path}:{line}: byte 0x{raw[problem.start]:02x} at byte offset {problem.start} is not UTF-8 "
            "(a YAML file must be UTF-8 text; is it a binary file?)"
        ) from None
    try:
        data = load_yaml_text(text)
    except DuplicateKeyError as problem:
        raise error(f"{path}:{problem.line}: {problem.description}") from None
    except yaml.YAMLError as problem:
        raise error(_located(path, text, problem)) from None
    except RecursionError:  # aliases of aliases, each one level deeper than the one it names
        raise error(f"{path}: not valid here: nested deeper than {MAX_DEPTH} levels (through aliases)") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise error(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return dict(data)


def yaml_folder(path: str | Path) -> Path:
    """The folder that relative paths in the YAML file ``path`` are relative to: the file's own."""
    return Path(path).expanduser().resolve().parent


def relative_to_file(value: str, folder: Path) -> str:
    """``value``, a local path written in a YAML file in ``folder``, as the path it names from anywhere.

    The one rule for every YAML file the package reads (training and build recipes, merge configs,
    evaluation suites): a relative path is relative to the file's own folder, so a file means the same
    from any working folder. Absolute paths, ``~`` paths and URLs are kept as written. A mapping given
    to the Python API instead (``recipe_from_dict``, ``MergeConfig.from_dict``) has no file: its
    relative paths stay relative to the working folder.
    """
    if not value or value.startswith("~") or "://" in value or Path(value).is_absolute():
        return value
    return os.path.normpath(folder / value)


def _located(path: Path, text: str, problem: yaml.YAMLError) -> str:
    """PyYAML's error as one line ``file:line:column: not valid YAML: ...`` (its own text spans several)."""
    if isinstance(problem, yaml.reader.ReaderError):
        line = text.count("\n", 0, problem.position) + 1
        character = problem.character if isinstance(problem.character, int) else ord(problem.character)
        return f"{path}:{line}: not valid YAML: character U+{character:04X} is not allowed ({problem.reason})"
    mark = getattr(problem, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    what = getattr(problem, "problem", None) or str(problem).splitlines()[0]
    context, context_mark = getattr(problem, "context", None), getattr(problem, "context_mark", None)
    if context:
        what += f" ({context}" + (f" from line {context_mark.line + 1})" if context_mark is not None else ")")
    return f"{where}: not valid YAML: {what}"
