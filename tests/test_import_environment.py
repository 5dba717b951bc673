"""Importing the package changes nothing in the process and leans on no private sentence-transformers name.

* Every module of the installed package (``pkgutil.walk_packages``, ``__main__`` aside) is imported in
  a fresh process whose environment holds none of the variables the test session sets: ``os.environ``
  must be the same afterwards. A library module that set ``HF_HUB_OFFLINE`` (even with ``setdefault``)
  would take the Hub away from the application that imports it; the scripts that want offline mode
  set it themselves (``examples/example_cli.py``).
* No module imports a ``sentence_transformers`` name that starts with ``_`` (``from
  sentence_transformers.x import _y``, a private module in the path) or reaches one through a name it
  imported (``gradcache._y``): those change without notice between releases.

* Nor does importing the command line change the garbage collector's thresholds: only the console
  script's own process (``cli.main.run``) collects less often.

``tests/test_wheel.py`` runs the same import check on the installed wheel.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import hf_unified_embed
from hf_unified_embed.cli.main import YOUNG_GENERATION_THRESHOLD

PACKAGE_DIR = Path(hf_unified_embed.__file__).resolve().parent
#: Variables the test session sets (tests/conftest.py): removed, so that a ``setdefault`` at import shows.
SESSION_VARIABLES = (
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TOKENIZERS_PARALLELISM",
    "WANDB_DISABLED",
)

#: Run in a fresh process: import every module of the package and report what changed in os.environ.
#: The libraries the package imports are imported first, and the comparison starts after them: some
#: change the environment themselves when imported (scikit-learn sets ``KMP_DUPLICATE_LIB_OK``, torch's
#: compiler ``TORCHINDUCTOR_CACHE_DIR``), which is not this package's doing. Each change made while the
#: package's modules are imported is reported with the file and line that made it.
IMPORT_EVERY_MODULE = """
import ast, importlib, importlib.util, json, os, pkgutil, sys, traceback
from pathlib import Path

PACKAGE = "hf_unified_embed"
folder = Path(importlib.util.find_spec(PACKAGE).submodule_search_locations[0])  # without running __init__
dependencies = set()
for path in sorted(folder.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        dependencies.update(n for n in names if n.split(".")[0] not in (PACKAGE, *sys.stdlib_module_names))
for name in sorted(dependencies):
    try:
        importlib.import_module(name)
    except Exception:
        pass  # an optional dependency or a name that is not a module; the package's import reports it

before = dict(os.environ)
setters = {}
set_item, del_item = os._Environ.__setitem__, os._Environ.__delitem__
def where():
    frames = [f for f in traceback.extract_stack()[:-2] if not f.filename.startswith("<frozen")]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
def recorded_set(self, key, value):
    setters[key] = where()
    set_item(self, key, value)
def recorded_del(self, key):
    setters[key] = where()
    del_item(self, key)
os._Environ.__setitem__, os._Environ.__delitem__ = recorded_set, recorded_del

import hf_unified_embed

modules, failed = [], {}
def walk_error(name):
    failed.setdefault(name, "walk_packages could not import it")

for info in pkgutil.walk_packages(hf_unified_embed.__path__, PACKAGE + ".", onerror=walk_error):
    if info.name.rsplit(".", 1)[-1] == "__main__":
        continue
    modules.append(info.name)
    try:
        importlib.import_module(info.name)
    except Exception as error:
        failed[info.name] = f"{type(error).__name__}: {error}"
after = dict(os.environ)
changed = {
    key: {"before": before.get(key), "after": after.get(key), "set by": setters.get(key)}
    for key in sorted(before.keys() | after.keys())
    if before.get(key) != after.get(key)
}
report = {"package": hf_unified_embed.__file__, "dependencies": len(dependencies), "modules": modules}
print(json.dumps({**report, "failed": failed, "changed": changed}))
"""


def environment_without_session_variables(**extra: str) -> dict[str, str]:
    """``os.environ`` without :data:`SESSION_VARIABLES`, plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if key not in SESSION_VARIABLES}
    return {**env, **extra}


def import_every_module(python: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """Run :data:`IMPORT_EVERY_MODULE` with ``python``; its report (package file, modules, failures, changes)."""
    done = subprocess.run(
        [python, "-c", IMPORT_EVERY_MODULE], env=env, cwd=cwd, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_imports_leave_environment_alone(report: dict[str, Any]) -> None:
    assert len(report["modules"]) > 50, report["modules"]  # the walk really found the package's modules
    assert report["failed"] == {}, report["failed"]
    assert report["dependencies"] > 10, report["dependencies"]
    assert report["changed"] == {}, f"importing the package changed os.environ: {report['changed']}"


def test_importing_every_module_leaves_the_environment_alone(tmp_path: Path) -> None:
    report = import_every_module(sys.executable, environment_without_session_variables(), tmp_path)
    assert Path(report["package"]).resolve().parent == PACKAGE_DIR
    assert_imports_leave_environment_alone(report)


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def private_sentence_transformers_uses(source: str, filename: str = "<source>") -> list[str]:
    """``line: what`` for each private sentence-transformers name the source imports or reaches."""
    tree = ast.parse(source, filename)
    bound: set[str] = set()  # local names of sentence-transformers modules and objects
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] != "sentence_transformers":
                    continue
                if any(_private(part) for part in parts):
                    found.append(f"{node.lineno}: import {alias.name}")
                bound.add(alias.asname or parts[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != "sentence_transformers":
                continue
            if any(_private(part) for part in parts):
                found.append(f"{node.lineno}: from {node.module} import ...")
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                bound.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(found, key=lambda line: int(line.split(":")[0]))


def test_the_scan_finds_private_names() -> None:
    source = (
        "from sentence_transformers.base.losses.gradcache import _create_minibatch, _get_batch_size\n"
        "from sentence_transformers.base.losses import gradcache\n"
        "import sentence_transformers.util as st_util\n"
        "from sentence_transformers.losses._private_module import Public\n"
        "from sentence_transformers.util import all_gather_with_grad as _renamed\n"  # a public name: fine
        "gradcache._get_batch_size(x)\n"
        "st_util._helper\n"
        "sentence_transformers.__version__\n"  # not bound here, and a dunder anyway
        "other._private\n"  # not a sentence-transformers name
    )
    assert private_sentence_transformers_uses(source) == [
        "1: from sentence_transformers.base.losses.gradcache import _create_minibatch",
        "1: from sentence_transformers.base.losses.gradcache import _get_batch_size",
        "4: from sentence_transformers.losses._private_module import ...",
        "6: gradcache._get_batch_size",
        "7: st_util._helper",
    ]


def test_no_module_uses_a_private_sentence_transformers_name() -> None:
    found = {
        str(path.relative_to(PACKAGE_DIR.parent)): uses
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        if (uses := private_sentence_transformers_uses(path.read_text(encoding="utf-8"), str(path)))
    }
    assert found == {}, f"private sentence-transformers names (they change without notice): {found}"


def _sentence_transformers_imports() -> list[tuple[str, str, str]]:
    """``(file:line, module, name)`` of every ``from sentence_transformers... import name`` in the package."""
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sentence_transformers":
                where = f"{path.relative_to(PACKAGE_DIR.parent)}:{node.lineno}"
                found += [(where, str(node.module), alias.name) for alias in node.names]
    return found


def test_every_sentence_transformers_name_the_package_takes_exists() -> None:
    """A release of sentence-transformers that moves or renames a name this package uses fails here, with
    the file and line that need it, instead of at a user's first training step."""
    import importlib

    imports = _sentence_transformers_imports()
    assert len(imports) > 20
    missing = []
    for where, module, name in imports:
        try:
            owner = importlib.import_module(module)
        except ImportError as error:
            missing.append(f"{where}: module {module} is gone ({error})")
            continue
        if not hasattr(owner, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{where}: {module} has no {name!r}")
    import sentence_transformers

    assert not missing, (
        f"sentence-transformers {sentence_transformers.__version__} lacks names this package imports:\n"
        + "\n".join(missing)
    )


#: Run in a fresh process: the collector's thresholds after importing the command line, then in the console
#: script (``run``: ``--version`` exits from argparse, after the script has set up its process).
CONSOLE_SCRIPT_THRESHOLDS = """
import gc, json, sys
default = gc.get_threshold()
import hf_unified_embed.cli.main as cli
imported = gc.get_threshold()
sys.argv = ["hf-unified-embed", "--version"]
try:
    cli.run()
except SystemExit:
    pass
print(json.dumps({"default": default, "imported": imported, "running": gc.get_threshold()}), file=sys.stderr)
"""


def test_only_the_console_script_collects_garbage_less_often() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CONSOLE_SCRIPT_THRESHOLDS], capture_output=True, text=True, timeout=300, check=True
    )
    thresholds = json.loads(result.stderr.strip().splitlines()[-1])
    assert thresholds["imported"] == thresholds["default"]  # a library import leaves the caller's collector
    assert thresholds["running"] == [YOUNG_GENERATION_THRESHOLD, *thresholds["default"][1:]]
