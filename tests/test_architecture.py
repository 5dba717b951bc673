"""The package's house plan (docs/architecture.md): root modules, file names, import cycles, layers.

The checks live in ``docs/draw_architecture.py`` (``python docs/draw_architecture.py --check``); this file
runs each on the package and prints its offenders, and runs each on a small made-up package so that a
check that finds nothing is known to be able to find something.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "docs" / "draw_architecture.py"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("draw_architecture", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


arch = _load_script()


@pytest.fixture(scope="module")
def package():
    return arch.read_package()


def _assert_none(name: str, offenders: list[str]) -> None:
    for offender in offenders:
        print(f"{name}: {offender}")
    assert not offenders, f"{name}: {len(offenders)} offender(s):\n  " + "\n  ".join(offenders)


# --------------------------------------------------------------------------------------------------
# The package itself


def test_the_package_root_holds_only_the_headline(package) -> None:
    _assert_none("root", arch.check_root(package))


def test_no_two_modules_share_a_file_name(package) -> None:
    _assert_none("stems", arch.check_stems(package))


def test_no_import_cycle_between_modules(package) -> None:
    _assert_none("cycles", arch.check_cycles(package))


def test_no_import_of_a_higher_layer(package) -> None:
    _assert_none("layers", arch.check_layers(package))


def test_every_internal_import_names_a_module_of_the_package(package) -> None:
    _assert_none("paths", arch.check_paths(package))


def test_every_unit_is_in_one_layer_only() -> None:
    units = [unit for _, members in arch.LAYERS for unit in members]
    assert len(units) == len(set(units)), f"a unit appears in two layers: {sorted(units)}"
    assert arch.LAYERS[-1][1] == ("schema", "utils", "errors"), "utils, errors and schema are the lowest layer"
    assert arch.layer_of("cli") < arch.layer_of("recipe"), "the command line sits above the recipe run"


def test_the_page_names_every_sub_package_and_only_files_that_exist(package) -> None:
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    units = {arch.unit_of(name) for name in package.modules} - {"__init__", "__main__"}
    missing = sorted(unit for unit in units if f"`{unit}/`" not in page and f"`{unit}.py`" not in page)
    assert not missing, f"docs/architecture.md does not describe {missing}"
    # Every `path/to/module.py` or `path/to/folder/` in a code span, read below the package or the repository.
    named = set(re.findall(r"`((?:[\w.]+/)*[\w.]+(?:\.py|/))`", page))
    dead = sorted(name for name in named if not (arch.PACKAGE_DIR / name).exists() and not (REPO / name).exists())
    assert not dead, f"docs/architecture.md names paths that do not exist: {dead}"


def test_the_picture_is_drawn(package, tmp_path: Path) -> None:
    path = arch.draw(package, arch.run_checks(package), tmp_path / "architecture.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------------------------
# The checks on a made-up package with one offender of each rule


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def made_up(tmp_path: Path):
    pkg = _write(
        tmp_path / "pkg",
        {
            "__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.losses import Loss\n",
            "__main__.py": "from pkg.cli.main import main\n",
            "errors.py": "",
            "schema.py": "from pkg import errors\n",
            "stray.py": "",  # rule a
            "cli/__init__.py": "",
            "cli/main.py": "def main():\n    from pkg.recipe import run\n",
            "recipe/__init__.py": "",
            "recipe/run.py": "from ..losses.base import Loss\n",  # a relative import
            "losses/__init__.py": "from pkg.losses.base import Loss\n",
            "losses/base.py": (
                "from typing import TYPE_CHECKING\n"
                "from pkg.losses import helpers\n"  # `from package import module`
                "if TYPE_CHECKING:\n    from pkg.losses.cached import Cache\n"
            ),
            "losses/helpers.py": "def f():\n    from pkg.losses.cached import Cache\n",
            "losses/cached.py": "from pkg.losses.base import Loss\n",  # rule c
            "utils/__init__.py": "",
            "utils/run.py": "from pkg.recipe.run import x\nimport pkg.old_path\n",  # rule b (run.py); rule d; rule e
        },
    )
    return arch.read_package(pkg)


def test_the_imports_are_read_with_their_kind(made_up) -> None:
    kinds = {(i.source, i.target): i.kind for i in made_up.imports}
    assert kinds["pkg", "pkg.losses"] == "type"
    assert kinds["pkg.cli.main", "pkg.recipe.run"] == "function"  # `from package import module`
    assert kinds["pkg.recipe.run", "pkg.losses.base"] == "module"
    assert kinds["pkg.losses.base", "pkg.losses.helpers"] == "module"
    assert kinds["pkg.losses.base", "pkg.losses.cached"] == "type"
    assert kinds["pkg.losses.helpers", "pkg.losses.cached"] == "function"


def test_each_check_finds_its_offender(made_up, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        arch,
        "LAYERS",
        (
            ("top", ("__main__",)),
            ("cli", ("cli",)),
            ("face", ("__init__",)),
            ("run", ("recipe",)),
            ("losses", ("losses",)),
            ("base", ("schema", "utils", "errors")),
        ),
    )
    results = arch.run_checks(made_up)
    assert results["root"] == ["stray.py at the package root"]
    assert results["stems"] == ["run.py: pkg/recipe/run.py, pkg/utils/run.py"]
    # The cycle closes only through a TYPE_CHECKING import and one inside a function: both count.
    assert len(results["cycles"]) == 1 and "losses.base" in results["cycles"][0]
    assert results["cycles"][0].startswith(
        "losses.base -> losses.cached -> losses.base; imports at losses.base:4 (type)"
    )
    layers = results["layers"]
    assert any(o.startswith("utils (base) imports recipe (run), a higher layer") for o in layers), layers
    assert any(o == "stray has no layer in LAYERS" for o in layers), layers
    assert results["paths"] == ["utils.run:2 imports pkg.old_path, which is no module of the package"]


def test_tarjan_finds_every_cycle_and_no_other() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"f"}, "g": {"a"}}
    assert arch.strongly_connected("abcdefg", edges) == [["a", "b", "c"], ["d", "e"], ["f"]]
    assert arch.shortest_cycle(["a", "b", "c"], edges) == ["a", "b", "c", "a"]
    # Deep chains must not hit the recursion limit.
    chain = {str(i): {str(i + 1)} for i in range(5000)} | {"5000": {"0"}}
    assert len(arch.strongly_connected(chain, chain)[0]) == 5001
