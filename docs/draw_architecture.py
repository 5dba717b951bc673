"""The package's house plan, read from its imports: the layout checks and ``docs/architecture.png``.

Run from the repository root::

    python docs/draw_architecture.py            # draws docs/architecture.png (and prints the checks)
    python docs/draw_architecture.py --check    # only the checks; exit status 1 if one fails

Every ``import`` and ``from ... import`` of ``hf_unified_embed`` in every module is read with
:mod:`ast`, nothing is imported. An import is one of three kinds: ``module`` (runs when the module is
imported), ``function`` (inside a function or method, runs when it is called) and ``type`` (under
``if TYPE_CHECKING:``, never runs). The checks count all three. Imports made with
``importlib.import_module`` from a computed name (the package face's lazy exports, the command
registry of ``cli/main.py``, the adapter discovery of ``data/source_formats.py``) are not seen; each of them
stays inside its own package or repeats a ``TYPE_CHECKING`` import that is seen.

A *unit* is a top-level sub-package (``losses`` with everything below it) or a module at the package
root (``errors``, ``schema``, ``__main__``, and ``__init__``, the package face). :data:`LAYERS` orders
the units; :func:`run_checks` returns the offenders of each rule:

a. ``root``: the package root holds only ``__init__``, ``__main__``, ``errors`` and ``schema``;
b. ``stems``: no two modules (``__init__.py`` and ``__main__.py`` aside) share a file name;
c. ``cycles``: no import cycle between modules (Tarjan's strongly connected components);
d. ``layers``: no unit imports a unit of a higher layer, two units of one layer do not import each
   other, and every unit has a layer;
e. ``paths``: every ``hf_unified_embed`` import names a module that exists as a file (no import
   of a 0.1 path that only the deprecation finder resolves).
"""

from __future__ import annotations

import argparse
import ast
import itertools
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "hf_unified_embed"
PACKAGE_DIR = REPO / PACKAGE
PICTURE = REPO / "docs" / "architecture.png"

#: The modules allowed at the package root (rule a).
ROOT_MODULES = ("__init__", "__main__", "errors", "schema")

#: The layers, highest first. A unit may import units of its own layer or of a lower one, never of a
#: higher one, and two units of one layer may not import each other (rule d). Within a layer the
#: order is the order of the boxes in the picture.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("entry point", ("__main__",)),
    ("command line", ("cli",)),
    ("package face", ("__init__",)),
    ("training run", ("recipe",)),
    ("features", ("curriculum", "merge", "evaluation", "hub", "negatives")),
    ("training bridge and data", ("sampling", "training", "losses", "data", "gur_pairs")),
    ("foundation", ("schema", "utils", "errors")),
)

#: What each unit holds, for the picture.
ROLES: dict[str, str] = {
    "__main__": "python -m hf_unified_embed",
    "cli": "the commands; launch.py: torchrun",
    "__init__": "the package face: headline names,\nimported on first use",
    "recipe": "recipe, preflight, run, model card",
    "curriculum": "task order, difficulty",
    "negatives": "hard-negative mining",
    "gur_pairs": "GUR pair mining",
    "hub": "publishing",
    "merge": "streamed safetensors merge",
    "evaluation": "suites and kinds",
    "sampling": "CurriculumBatchSampler",
    "training": "collator, prompts, loss per task",
    "losses": "one loss per file",
    "data": "adapters, builder, Hub layout",
    "schema": "the unified columns",
    "utils": "outputs, redaction, plugins, ...",
    "errors": "every error class",
}

KINDS = ("module", "function", "type")


# --------------------------------------------------------------------------------------------------
# Reading the imports


@dataclass(frozen=True)
class Import:
    """One import of a package module by another: ``source`` imports ``target`` at ``line``."""

    source: str  # dotted module name, ``hf_unified_embed.losses.pro``
    target: str  # the module imported (a package stands for its ``__init__``)
    kind: str  # "module", "function" or "type"
    line: int
    exists: bool = True  # False: ``target`` is no file of the package


@dataclass(repr=False)
class Package:
    """The modules of the package (dotted name → file) and the imports between them."""

    modules: dict[str, Path]
    imports: list[Import] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"Package({len(self.modules)} modules, {len(self.imports)} imports)"


def module_name(path: Path, package_dir: Path = PACKAGE_DIR) -> str:
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str:
    """The unit a module belongs to: its top-level sub-package, or its own name at the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, kind: str = "module") -> Iterator[tuple[ast.AST, str]]:
    """Every node below ``node`` with the kind its imports would have."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for statement in child.body:
                yield statement, "type"
                yield from _walk(statement, "type")
            for statement in child.orelse:
                yield statement, kind
                yield from _walk(statement, kind)
            continue
        child_kind = kind
        if kind == "module" and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            child_kind = "function"
        yield child, child_kind
        yield from _walk(child, child_kind)


def read_package(package_dir: Path = PACKAGE_DIR) -> Package:
    """Every module below ``package_dir`` and every import of one of them by another."""
    package = package_dir.name
    modules = {module_name(path, package_dir): path for path in sorted(package_dir.rglob("*.py"))}
    result = Package(modules)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, kind in _walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(node, here, modules):
                if target == package or target.startswith(package + "."):
                    result.imports.append(Import(name, target, kind, node.lineno, target in modules))
    return result


def _targets(node: ast.AST, here: str, modules: dict[str, Path]) -> Iterable[str]:
    """The modules an import statement imports (``from a import b`` imports ``a.b`` if that is a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        parts = here.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1])
        origin = f"{base}.{node.module}" if node.module else base
    else:
        origin = node.module or ""
    targets = []
    plain = False  # a name that is no module: the import reads ``origin`` itself
    for alias in node.names:
        if f"{origin}.{alias.name}" in modules:
            targets.append(f"{origin}.{alias.name}")
        else:
            plain = True
    return [origin, *targets] if plain or not targets else targets


# --------------------------------------------------------------------------------------------------
# The checks


def layer_of(unit: str) -> int | None:
    """The layer index of a unit, 0 the highest; ``None`` if :data:`LAYERS` does not name it."""
    for index, (_, units) in enumerate(LAYERS):
        if unit in units:
            return index
    return None


def unit_imports(package: Package) -> dict[tuple[str, str], list[Import]]:
    """The imports between two different units, by (importing unit, imported unit)."""
    edges: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for imp in package.imports:
        source, target = unit_of(imp.source), unit_of(imp.target)
        if source != target:
            edges[source, target].append(imp)
    return dict(edges)


def check_root(package: Package) -> list[str]:
    """Rule a: the modules at the package root besides :data:`ROOT_MODULES`."""
    return sorted(
        f"{path.name} at the package root"
        for name, path in package.modules.items()
        if name.count(".") == 1 and path.name != "__init__.py" and path.stem not in ROOT_MODULES
    )


def check_stems(package: Package) -> list[str]:
    """Rule b: file names used by more than one module (``__init__.py`` and ``__main__.py`` aside)."""
    by_stem: dict[str, list[str]] = defaultdict(list)
    base = min(package.modules.values(), key=lambda p: len(p.parts)).parent.parent
    for path in package.modules.values():
        if path.name not in ("__init__.py", "__main__.py"):
            by_stem[path.stem].append(path.relative_to(base).as_posix())
    return [f"{stem}.py: {', '.join(sorted(paths))}" for stem, paths in sorted(by_stem.items()) if len(paths) > 1]


def strongly_connected(nodes: Iterable[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted, those of two or more nodes or a self-loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in edges.get(node, ()):
                        components.append(sorted(component))
    return sorted(components)


def shortest_cycle(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest cycle through the first member of a strongly connected component (breadth first)."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges.get(node, ())):
                if child not in members:
                    continue
                if child == start:
                    cycle = [node]
                    while cycle[-1] != start:
                        cycle.append(previous[cycle[-1]])
                    return [*reversed(cycle), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return [start, start]


def check_cycles(package: Package) -> list[str]:
    """Rule c: each import cycle between modules, as one cycle with the kind and line of each import."""
    edges: dict[str, set[str]] = defaultdict(set)
    how: dict[tuple[str, str], Import] = {}
    for imp in package.imports:
        if imp.exists and imp.source != imp.target:
            edges[imp.source].add(imp.target)
            known = how.get((imp.source, imp.target))
            if known is None or KINDS.index(imp.kind) < KINDS.index(known.kind):
                how[imp.source, imp.target] = imp
    short = _shortener(package)
    offenders = []
    for component in strongly_connected(sorted(package.modules), edges):
        cycle = shortest_cycle(component, edges)
        steps = " -> ".join(short(module) for module in cycle)
        where = ", ".join(f"{short(a)}:{how[a, b].line} ({how[a, b].kind})" for a, b in itertools.pairwise(cycle))
        others = (
            f"; {len(component)} modules in the cycle: {', '.join(map(short, component))}"
            if len(component) > len(cycle) - 1
            else ""
        )
        offenders.append(f"{steps}; imports at {where}{others}")
    return offenders


def check_layers(package: Package) -> list[str]:
    """Rule d: imports of a higher layer, two units of one layer importing each other, units without a layer."""
    offenders = []
    units = sorted({unit_of(name) for name in package.modules})
    for unit in units:
        if layer_of(unit) is None:
            offenders.append(f"{unit} has no layer in LAYERS")
    edges = unit_imports(package)
    short = _shortener(package)
    for (source, target), imports in sorted(edges.items()):
        source_layer, target_layer = layer_of(source), layer_of(target)
        if source_layer is None or target_layer is None:
            continue
        where = ", ".join(f"{short(i.source)}:{i.line} ({i.kind})" for i in imports)
        if target_layer < source_layer:
            offenders.append(
                f"{source} ({LAYERS[source_layer][0]}) imports {target} ({LAYERS[target_layer][0]}), a higher layer: {where}"
            )
        elif target_layer == source_layer and (target, source) in edges and source < target:
            back = ", ".join(f"{short(i.source)}:{i.line} ({i.kind})" for i in edges[target, source])
            offenders.append(f"{source} and {target} ({LAYERS[source_layer][0]}) import each other: {where}; {back}")
    return offenders


def check_paths(package: Package) -> list[str]:
    """Rule e: imports of a module path that is no file of the package (a 0.1 path, a typo)."""
    short = _shortener(package)
    return sorted(
        f"{short(i.source)}:{i.line} imports {i.target}, which is no module of the package"
        for i in package.imports
        if not i.exists
    )


def _shortener(package: Package):
    prefix = min(package.modules, key=len) + "."

    def short(module: str) -> str:
        return module.removeprefix(prefix) or module

    return short


CHECKS = {
    "root": check_root,
    "stems": check_stems,
    "cycles": check_cycles,
    "layers": check_layers,
    "paths": check_paths,
}


def run_checks(package: Package | None = None) -> dict[str, list[str]]:
    """The offenders of each rule (an empty list: the rule holds)."""
    package = package or read_package()
    return {name: check(package) for name, check in CHECKS.items()}


def report(results: dict[str, list[str]]) -> str:
    lines = []
    for name, offenders in results.items():
        lines.append(f"{name}: {'ok' if not offenders else f'{len(offenders)} offender(s)'}")
        lines.extend(f"  {offender}" for offender in offenders)
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# The picture

#: The data-flow lane: (stage, where it lives). Module paths are below ``hf_unified_embed/``.
DATA_FLOW: tuple[tuple[str, str, str], ...] = (
    # (stage, where it lives, the unit whose layer colour the stage takes)
    ("raw sources", "local files (STS-B, SICK, BEIR, MEDI, pairs, ...),\nHub datasets, raw documents", ""),
    ("data adapters", "data/adapters/ (one file per source format)\ngur_pairs/: pairs mined from raw text", "data"),
    (
        "unified DatasetDict / Hub layout",
        "schema.py, data/builder.py, data/hub_layout.py\nnegatives/: mined hard negatives added",
        "data",
    ),
    ("curriculum", "curriculum/: task order, difficulty column", "curriculum"),
    (
        "training bridge: collator, sampler, losses",
        "training/collator.py, training/loss_mapping.py,\nsampling/curriculum_sampler.py, losses/",
        "training",
    ),
    (
        "SentenceTransformerTrainer",
        "sentence-transformers' trainer, run by recipe/run.py\n(cli/launch.py: torchrun)",
        "recipe",
    ),
    ("model", "a sentence-transformers folder\n(training/backbones.py: LLM backbones, LoRA)", "training"),
    ("merge", "merge/ (engine.py, methods/)", "merge"),
    ("evaluation", "evaluation/ (suite.py, kinds/)", "evaluation"),
    ("card", "recipe/model_card.py, merge/card.py,\ncards/*.md.j2 (templates)", "recipe"),
    ("Hub", "hub/publishing.py", "hub"),
)

LAYER_COLOURS = ("#eeeeee", "#fde2e4", "#f3e8ff", "#fff1d6", "#e2f0cb", "#dcecf7", "#ececec")
#: Arrow colours by importing unit (no red: red marks an import of a higher layer).
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#3182bd",
    "#31a354",
)
STYLES: dict[str, Any] = {"module": "-", "function": (0, (5, 3)), "type": (0, (1, 2))}


@dataclass
class Box:
    unit: str
    x: float  # centre
    y: float  # centre
    width: float
    height: float

    @property
    def left(self) -> float:
        return self.x - self.width / 2

    @property
    def right(self) -> float:
        return self.x + self.width / 2

    @property
    def top(self) -> float:
        return self.y + self.height / 2

    @property
    def bottom(self) -> float:
        return self.y - self.height / 2


def unit_label(unit: str, package: Package) -> tuple[str, str]:
    """The box title and its small print: the role, the module count and the sub-packages."""
    if unit in ("__init__", "__main__", "errors", "schema"):
        return f"{unit}.py", ROLES.get(unit, "")
    names = [name for name in package.modules if unit_of(name) == unit]
    sub = sorted({name.split(".")[2] for name in names if name.count(".") >= 3})
    count = f"{len(names)} modules" + (f"; {', '.join(s + '/' for s in sub)}" if sub else "")
    return f"{unit}/", f"{ROLES.get(unit, '')}\n{count}"


def _layout(units: set[str], width: float, top: float, pitch: float, height: float) -> dict[str, Box]:
    boxes = {}
    rows = [[u for u in members if u in units] for _, members in LAYERS]
    extra = sorted(units - {u for row in rows for u in row})
    if extra:  # a unit without a layer: drawn in a row of its own at the bottom, flagged by rule d
        rows.append(extra)
    for index, row in enumerate(rows):
        if not row:
            continue
        y = top - index * pitch
        gap = 0.55
        if len(row) == 1:
            box_width = 3.6
        else:
            box_width = min(4.4, (width - gap * (len(row) + 1)) / len(row))
        total = len(row) * box_width + (len(row) - 1) * gap
        start = (width - total) / 2 + box_width / 2
        for position, unit in enumerate(row):
            boxes[unit] = Box(unit, start + position * (box_width + gap), y, box_width, height)
    return boxes


def _curve(points: list[tuple[float, float]]):
    """A smooth path through ``points`` with vertical tangents at each (cubic Bézier pieces)."""
    from matplotlib.path import Path as MplPath

    vertices = [points[0]]
    codes = [MplPath.MOVETO]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if abs(x1 - x0) < 1e-6 or abs(y1 - y0) < 1e-6:
            vertices.append((x1, y1))
            codes.append(MplPath.LINETO)
            continue
        middle = (y0 + y1) / 2
        vertices += [(x0, middle), (x1, middle), (x1, y1)]
        codes += [MplPath.CURVE4] * 3
    return MplPath(vertices, codes)


def draw(package: Package, results: dict[str, list[str]], path: Path = PICTURE) -> Path:
    """Draw the layers, the imports between units and the data-flow lane into ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    graph_width, lane_x, lane_width = 15.0, 16.4, 5.4
    pitch, box_height, top = 1.9, 1.0, 13.0
    units = {unit_of(name) for name in package.modules}
    boxes = _layout(units, graph_width, top, pitch, box_height)
    bottom_y = min(b.y for b in boxes.values())
    x_limits, y_limits = (-1.55, lane_x + lane_width + 0.3), (bottom_y - 1.45, top + 1.95)
    inches = 0.95  # per unit of the drawing, in both directions
    figure = plt.figure(figsize=((x_limits[1] - x_limits[0]) * inches, (y_limits[1] - y_limits[0]) * inches), dpi=100)
    ax = figure.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(*x_limits)
    ax.set_ylim(*y_limits)
    ax.axis("off")

    ax.text(
        -1.4,
        top + 1.55,
        "hf_unified_embed: sub-packages by layer, and the imports between them",
        fontsize=17,
        fontweight="bold",
        va="center",
    )
    ax.text(
        -1.4,
        top + 1.1,
        "An arrow A → B: a module of A imports a module of B (read from the code with ast by "
        "docs/draw_architecture.py). Imports point down or sideways within a layer; red: an import of a higher layer.",
        fontsize=10.5,
        color="#444444",
        va="center",
    )

    # Layer bands and names.
    for index, (name, members) in enumerate(LAYERS):
        row = [boxes[u] for u in members if u in boxes]
        if not row:
            continue
        y = row[0].y
        colour = LAYER_COLOURS[index % len(LAYER_COLOURS)]
        ax.add_patch(
            FancyBboxPatch(
                (-1.45, y - pitch / 2 + 0.12),
                graph_width + 1.55,
                pitch - 0.24,
                boxstyle="round,pad=0,rounding_size=0.15",
                facecolor=colour,
                alpha=0.35,
                edgecolor="none",
                zorder=0,
            )
        )
        ax.text(
            -1.35,
            y,
            name.replace(" and ", "\nand ").replace(" ", "\n", 1) if len(name) > 12 else name,
            fontsize=9.5,
            color="#555555",
            style="italic",
            va="center",
            ha="left",
            zorder=1,
        )

    edges = unit_imports(package)
    upward = {(s, t) for (s, t) in edges if (layer_of(s) or 0) > (layer_of(t) or 0)}
    sources = sorted({s for s, _ in edges}, key=lambda u: (boxes[u].y * -1, boxes[u].x))
    colour_of = {unit: PALETTE[i % len(PALETTE)] for i, unit in enumerate(sources)}

    # Ports: where each edge leaves and enters its boxes, spread along the side and sorted by the other end.
    def row_of(unit: str) -> float:
        return round(boxes[unit].y, 3)

    sides: dict[tuple[str, str], list[tuple[float, tuple[str, str], str]]] = defaultdict(list)
    for source, target in edges:
        a, b = boxes[source], boxes[target]
        if row_of(source) == row_of(target):
            if abs(layer_position(source) - layer_position(target)) == 1:
                continue  # neighbours: a short arrow between the facing sides
            sides[source, "bottom"].append((b.x, (source, target), "out"))
            sides[target, "bottom"].append((a.x, (source, target), "in"))
        elif a.y > b.y:
            sides[source, "bottom"].append((b.x, (source, target), "out"))
            sides[target, "top"].append((a.x, (source, target), "in"))
        else:
            sides[source, "top"].append((b.x, (source, target), "out"))
            sides[target, "bottom"].append((a.x, (source, target), "in"))
    port: dict[tuple[tuple[str, str], str], float] = {}
    for (unit, _side), entries in sides.items():
        box = boxes[unit]
        entries.sort(key=lambda e: (e[0], e[2]))
        span = box.width * 0.84
        for i, (_, edge, end) in enumerate(entries):
            port[edge, end] = box.left + box.width * 0.08 + span * (i + 0.5) / len(entries)

    # Channels: an edge crossing a row passes through the gap between two boxes nearest its line.
    row_ys = sorted({b.y for b in boxes.values()}, reverse=True)
    gaps_of = {}
    for y in row_ys:
        row = sorted((b for b in boxes.values() if abs(b.y - y) < 1e-6), key=lambda b: b.x)
        edges_x = [-0.9] + [v for b in row for v in (b.left, b.right)] + [graph_width + 0.2]
        gaps_of[y] = [(edges_x[i], edges_x[i + 1]) for i in range(0, len(edges_x), 2)]
    through: dict[tuple[float, int], list[tuple[float, tuple[str, str]]]] = defaultdict(list)
    plans = {}
    for edge in edges:
        source, target = edge
        a, b = boxes[source], boxes[target]
        if row_of(source) == row_of(target):
            continue
        down = a.y > b.y
        x0, x1 = port[edge, "out"], port[edge, "in"]
        y0 = a.bottom if down else a.top
        y1 = b.top if down else b.bottom
        crossed = [y for y in row_ys if min(a.y, b.y) + 1e-6 < y < max(a.y, b.y) - 1e-6]
        plans[edge] = (x0, y0, x1, y1, crossed)
        for y in crossed:
            ideal = x0 + (x1 - x0) * (y0 - y) / (y0 - y1)
            choices = gaps_of[y]
            best = min(range(len(choices)), key=lambda i: max(choices[i][0] - ideal, 0, ideal - choices[i][1]))
            through[y, best].append((ideal, edge))
    channel: dict[tuple[tuple[str, str], float], float] = {}
    for (y, gap), passing in through.items():
        # Each edge as near its straight line as the gap allows, at least ``spacing`` from the next.
        left, right = gaps_of[y][gap]
        passing.sort()
        spacing = min(0.16, (right - left) / (len(passing) + 1))
        xs = [min(max(ideal, left + spacing), right - spacing) for ideal, _ in passing]
        for i in range(1, len(xs)):
            xs[i] = max(xs[i], xs[i - 1] + spacing)
        for i in range(len(xs) - 1, -1, -1):
            limit = right - spacing if i == len(xs) - 1 else xs[i + 1] - spacing
            xs[i] = min(xs[i], limit)
        for x, (_, edge) in zip(xs, passing):
            channel[edge, y] = x

    for edge, imports in sorted(edges.items()):
        source, target = edge
        kinds = {i.kind for i in imports}
        kind = next(k for k in KINDS if k in kinds)
        bad = edge in upward
        colour = "#d62728" if bad else colour_of[source]
        foundation = layer_of(target) == len(LAYERS) - 1 and layer_of(source) != len(LAYERS) - 1
        alpha = 1.0 if bad else (0.45 if foundation else 0.85)
        width = (2.8 if bad else 1.0) + 0.45 * min(len(imports), 16) ** 0.5
        a, b = boxes[source], boxes[target]
        if edge in plans:
            x0, y0, x1, y1, crossed = plans[edge]
            down = y0 > y1
            points = [(x0, y0)]
            for y in crossed:
                gx = channel[edge, y]
                half = box_height / 2
                points += [(gx, y + half), (gx, y - half)] if down else [(gx, y - half), (gx, y + half)]
            points.append((x1, y1))
            shape = _curve(points)
        elif abs(layer_position(source) - layer_position(target)) == 1:
            sign = 1 if b.x > a.x else -1
            offset = (
                0.16 if (target, source) in edges and source < target else (-0.16 if (target, source) in edges else 0)
            )
            shape = _curve([(a.x + sign * a.width / 2, a.y + offset), (b.x - sign * b.width / 2, b.y + offset)])
        else:  # same row, not neighbours: an arc under the row
            x0, x1 = port[edge, "out"], port[edge, "in"]
            low = a.bottom - 0.42
            from matplotlib.path import Path as MplPath

            shape = MplPath(
                [(x0, a.bottom), (x0, low), (x1, low), (x1, b.bottom)],
                [MplPath.MOVETO, MplPath.CURVE4, MplPath.CURVE4, MplPath.CURVE4],
            )
        ax.add_patch(
            FancyArrowPatch(
                path=shape,
                arrowstyle="-|>",
                mutation_scale=13 + (5 if bad else 0),
                linewidth=width,
                linestyle=STYLES[kind],
                color=colour,
                alpha=alpha,
                zorder=4 if bad else 2,
                shrinkA=0,
                shrinkB=0,
            )
        )

    for unit, box in boxes.items():
        layer = layer_of(unit)
        colour = LAYER_COLOURS[layer % len(LAYER_COLOURS)] if layer is not None else "#ffcccc"
        ax.add_patch(
            FancyBboxPatch(
                (box.left, box.bottom),
                box.width,
                box.height,
                boxstyle="round,pad=0.02,rounding_size=0.08",
                facecolor=colour,
                edgecolor="#333333" if layer is not None else "#d62728",
                linewidth=1.4,
                zorder=3,
            )
        )
        title, small = unit_label(unit, package)
        ax.text(
            box.x,
            box.top - 0.2,
            title,
            ha="center",
            va="center",
            fontsize=13,
            fontweight="bold",
            family="monospace",
            zorder=5,
        )
        ax.text(
            box.x,
            box.y - 0.13,
            small,
            ha="center",
            va="center",
            fontsize=8.8,
            color="#333333",
            zorder=5,
            linespacing=1.25,
        )

    # Legend.
    handles = [
        Line2D([], [], color="#555555", linestyle=STYLES["module"], linewidth=2, label="import at module level"),
        Line2D([], [], color="#555555", linestyle=STYLES["function"], linewidth=2, label="only inside functions"),
        Line2D([], [], color="#555555", linestyle=STYLES["type"], linewidth=2, label="only under TYPE_CHECKING"),
        Line2D([], [], color="#d62728", linewidth=3.5, label="import of a higher layer (rule d)"),
        Line2D([], [], color="#999999", alpha=0.5, linewidth=2, label="into the foundation layer (faded)"),
    ]
    ax.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0.005, 0.002),
        ncol=5,
        fontsize=10,
        frameon=False,
        handlelength=3.2,
    )

    # The data-flow lane.
    lane_top, lane_bottom = top + 0.35, bottom_y - 0.6
    ax.add_patch(
        FancyBboxPatch(
            (lane_x - 0.2, lane_bottom),
            lane_width + 0.4,
            lane_top - lane_bottom + 0.3,
            boxstyle="round,pad=0,rounding_size=0.2",
            facecolor="#f7f7f7",
            edgecolor="#bbbbbb",
            zorder=0,
        )
    )
    ax.text(
        lane_x + lane_width / 2, lane_top + 0.05, "data flow", ha="center", va="center", fontsize=14, fontweight="bold"
    )
    stage_height = 0.8
    first, last = lane_top - 0.6, lane_bottom + 0.15 + stage_height / 2
    step = (first - last) / (len(DATA_FLOW) - 1)
    for i, (stage, where, unit) in enumerate(DATA_FLOW):
        y = first - i * step
        layer = layer_of(unit) if unit else None
        face = LAYER_COLOURS[layer % len(LAYER_COLOURS)] if layer is not None else "white"
        ax.add_patch(
            FancyBboxPatch(
                (lane_x, y - stage_height / 2),
                lane_width,
                stage_height,
                boxstyle="round,pad=0.0,rounding_size=0.1",
                facecolor=face,
                edgecolor="#4a7ab5",
                linewidth=1.3,
                zorder=3,
            )
        )
        ax.text(
            lane_x + lane_width / 2,
            y + 0.21,
            stage,
            ha="center",
            va="center",
            fontsize=11.5,
            fontweight="bold",
            zorder=5,
        )
        ax.text(
            lane_x + lane_width / 2,
            y - 0.13,
            where,
            ha="center",
            va="center",
            fontsize=8.6,
            color="#333333",
            zorder=5,
            family="monospace",
            linespacing=1.15,
        )
        if i < len(DATA_FLOW) - 1:
            ax.add_patch(
                FancyArrowPatch(
                    (lane_x + lane_width / 2, y - stage_height / 2),
                    (lane_x + lane_width / 2, y - step + stage_height / 2),
                    arrowstyle="-|>",
                    mutation_scale=14,
                    color="#4a7ab5",
                    linewidth=1.8,
                    zorder=2,
                    shrinkA=0,
                    shrinkB=0,
                )
            )

    failing = [name for name, offenders in results.items() if offenders]
    ax.text(
        lane_x + lane_width,
        bottom_y - 1.3,
        "checks: " + ", ".join(f"{n} {'FAILS' if n in failing else 'ok'}" for n in results),
        ha="right",
        va="center",
        fontsize=10,
        color="#d62728" if failing else "#2a7a2a",
    )

    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def layer_position(unit: str) -> int:
    """The position of a unit within its layer (the box order)."""
    index = layer_of(unit)
    return LAYERS[index][1].index(unit) if index is not None else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only run the checks (exit status 1 if one fails)")
    parser.add_argument(
        "--output", type=Path, default=PICTURE, help=f"the PNG to write (default: {PICTURE.relative_to(REPO)})"
    )
    args = parser.parse_args(argv)
    package = read_package()
    results = run_checks(package)
    print(report(results))
    if not args.check:
        print(f"wrote {draw(package, results, args.output)}")
    return 1 if args.check and any(results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
