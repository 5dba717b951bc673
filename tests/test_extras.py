"""A plain install leaves out what only some paths use: numba (the curriculum solver, GUR's pair mining) and
matplotlib (figures). Without them every other module imports, and each of those paths stops with one line
naming the extra that installs what it needs; a figure that only illustrates a card is left out with a warning.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_import_environment import IMPORT_EVERY_MODULE, environment_without_session_variables

from hf_unified_embed.errors import IncompatibleStackError
from hf_unified_embed.utils.figures import optional_figure
from hf_unified_embed.utils.stack import require

#: Runs first in a child: the optional packages cannot be imported, as after a plain ``pip install``.
WITHOUT_EXTRAS = "import sys\nsys.modules['numba'] = None\nsys.modules['matplotlib'] = None\n"
#: The sub-packages that need an extra, and which.
NEEDS = {"hf_unified_embed.curriculum": "curriculum", "hf_unified_embed.gur_pairs": "gur"}


def _child(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRAS + code],
        env=environment_without_session_variables(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_without_numba_and_matplotlib_only_the_paths_that_need_them_stop_naming_their_extra(tmp_path: Path) -> None:
    import json

    done = _child(IMPORT_EVERY_MODULE, tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(report["modules"]) > 50
    for module, error in report["failed"].items():
        package = next((name for name in NEEDS if module == name or module.startswith(name + ".")), None)
        assert package is not None, f"{module} needs an optional package: {error}"
        assert error.startswith("IncompatibleStackError: "), error
        assert f"pip install 'hf-unified-embed[{NEEDS[package]}]'" in error, error
        assert "\n" not in error
    assert {name for name in report["failed"] if name in NEEDS} == set(NEEDS), report["failed"]
    assert report["changed"] == {}


def test_a_recipe_with_a_curriculum_stops_before_any_data_loads_naming_the_extra(tmp_path: Path) -> None:
    code = "from hf_unified_embed.cli.main import main\nsys.exit(main(['train', 'recipe.yaml', '--check']))\n"
    (tmp_path / "recipe.yaml").write_text(
        "output_dir: out\ndata: {path: no-such-folder}\nlosses: {sts: {name: CoDiEmbSTSLoss}}\ncurriculum: {teacher: some/model}\n",
        encoding="utf-8",
    )
    done = _child(code, tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "numba" in lines[0] and "pip install 'hf-unified-embed[curriculum]'" in lines[0], lines[0]


@settings(max_examples=25, deadline=None)
@given(module=st.from_regex(r"no_such_[a-z]{1,10}", fullmatch=True), extra=st.sampled_from(["plots", "gur", "x"]))
def test_a_missing_optional_package_is_one_line_naming_its_extra(module: str, extra: str) -> None:
    with pytest.raises(IncompatibleStackError) as raised:
        require(module, extra=extra, feature="this path")
    message = str(raised.value)
    assert "\n" not in message
    assert message == f"this path needs {module}, which is not installed; fix: pip install 'hf-unified-embed[{extra}]'"


def test_an_illustrating_figure_is_left_out_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    def draw() -> Path:
        require("no_such_plotting_library", extra="plots", feature="the figure")
        raise AssertionError("unreachable")

    with caplog.at_level(logging.WARNING):
        assert optional_figure(draw, "the merge search figure") is None
    (record,) = caplog.records
    assert record.getMessage().startswith(
        "the merge search figure left out: the figure needs no_such_plotting_library"
    )
    assert optional_figure(lambda: Path("drawn.png"), "a figure") == Path("drawn.png")
