"""A path the system cannot take is one line in every command: no ``OSError [Errno 36]`` traceback.

Linux refuses a name over 255 bytes and a path of 4,096 bytes or more (``ENAMETOOLONG``). Hypothesis draws a
command, which of its paths is long (its output, or one of its inputs), and the length: the whole path around
and past 4,096 bytes with every name legal (at most 255 bytes), or one name past 255 bytes. Then:

* a path the system cannot take ends in exit code 2 and one ``error:`` line that says which limit it passed;
* a path well within the limits is written as usual (the tool's own output, whole);
* between the two (the room an output needs below it for its staging folder and its files) either holds;
* the project's files are byte for byte as they were, and a refused command created nothing on the long path.

Commands run in-process (``hf_unified_embed.cli.main.main``) on the tiny project of the output-rule tests.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from _output_project import COMMANDS, fresh_project, hashes, project_template, run_in
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hf_unified_embed.utils.outputs import written_by_tool
from hf_unified_embed.utils.path_limits import PathTooLong, check_name_lengths, path_too_long
from hf_unified_embed.utils.write_failures import failure_line

#: Linux's limits, which the commands meet; the test draws around them.
PATH_MAX, NAME_MAX = 4096, 255
#: Below this many bytes an output path must be written: the room the tool keeps below an output (its staging
#: folder, about 60 bytes, and one name of 255 for the files inside) is less than 400 bytes.
SURE_BYTES = PATH_MAX - 400
#: The commands, the name each writes, and the input a long path may replace (argv index after the command).
WRITERS = {
    "build": ("out", "build.yaml"),
    "train": ("out", "recipe.yaml"),
    "merge": ("out", "model"),
    "sample": ("out", None),
    "evaluate": ("out.json", "suite.yaml"),
}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> Iterator[Path]:
    with project_template(tmp_path_factory.mktemp("path-limits"), tiny_model_path) as project:
        yield project


def long_path(base: Path, total: int, name: str, long_name: int | None) -> Path:
    """A path below ``base`` ending in ``name`` of ``total`` bytes, every folder name at most 255 bytes, or with
    one folder name of ``long_name`` bytes (the rest made up as before)."""
    path = base / ("n" * long_name) if long_name is not None else base
    left = total - len(str(path / name).encode())  # each folder adds its name and a "/"
    while left > 0:
        cost = min(NAME_MAX + 1, left)
        if left - cost == 1:  # a lone byte cannot be a folder: leave two
            cost -= 1
        cost = max(cost, 2)  # (one byte too many when only one was left)
        path /= "d" * (cost - 1)
        left -= cost
    return path / name


def argv_with(command: str, role: str, path: Path) -> list[str]:
    output, source = WRITERS[command]
    argv = COMMANDS[command][0](str(path) if role == "output" else output)
    if role == "input":
        argv[argv.index(source)] = str(path)
    return argv


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, int, int | None]:
    command = draw(st.sampled_from(sorted(WRITERS)))
    role = draw(st.sampled_from(["output", "input"] if WRITERS[command][1] else ["output"]))
    long_name = draw(st.none() | st.integers(NAME_MAX + 1, NAME_MAX + 60))
    low = SURE_BYTES - 200 if role == "output" and long_name is None else PATH_MAX - 300
    total = draw(st.integers(low, PATH_MAX + 400))
    return command, role, total, long_name


def _first_created(base: Path) -> list[str]:
    return sorted(entry.name for entry in base.iterdir()) if base.is_dir() else []


@pytest.mark.slow
@settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases())
@example(case=("build", "output", PATH_MAX + 137, None))
@example(case=("train", "output", PATH_MAX + 1, None))
@example(case=("merge", "output", PATH_MAX, None))
@example(case=("sample", "output", PATH_MAX + 300, None))
@example(case=("evaluate", "output", PATH_MAX + 50, None))
@example(case=("build", "input", PATH_MAX + 20, None))
@example(case=("train", "input", PATH_MAX + 20, None))
@example(case=("merge", "input", PATH_MAX + 20, None))
@example(case=("sample", "output", 300, NAME_MAX + 1))
@example(case=("build", "output", SURE_BYTES - 1, None))
def test_a_path_past_the_system_s_limits_is_one_line_and_nothing_is_written(
    template: Path, tmp_path_factory: pytest.TempPathFactory, case: tuple[str, str, int, int | None]
) -> None:
    command, role, total, long_name = case
    base = tmp_path_factory.mktemp("long")
    name = WRITERS[command][0] if role == "output" else WRITERS[command][1]
    assert name is not None
    path = long_path(base, total, name, long_name)
    size = len(str(path).encode())
    what = f"{command} with its {role} {size:,} bytes long" + (f", a name of {long_name}" if long_name else "")
    with fresh_project(template) as project:
        before = hashes(project)
        code, err = run_in(project, argv_with(command, role, path))
        assert hashes(project) == before, f"{what}: the project changed"
        lines = err.splitlines()
        errors = [line for line in lines if line.startswith("error:")]
        if size >= PATH_MAX or long_name is not None:
            assert code == 2 and len(errors) == 1 and lines[-1] == errors[0], f"{what}: exit {code}\n{err[-3000:]}"
            limit = "bytes in a name" if long_name is not None else "PATH_MAX"
            assert limit in errors[0], f"{what}: the line does not name the limit: {errors[0]}"
            assert _first_created(base) == [], f"{what}: refused, yet {_first_created(base)} was created"
            return
        if role == "input":  # a path the system takes, of nothing: a missing input
            assert code == 2 and len(errors) == 1 and lines[-1] == errors[0], f"{what}: exit {code}\n{err[-3000:]}"
            return
        if size < SURE_BYTES:
            assert code == 0, f"{what}: exit {code}\n{err[-3000:]}"
        if code == 0:
            assert written_by_tool(path), f"{what}: the output is not whole"
        else:
            assert code == 2 and len(errors) == 1 and "PATH_MAX" in errors[0], f"{what}: {err[-3000:]}"
            assert _first_created(base) == [], f"{what}: refused, yet {_first_created(base)} was created"
    shutil.rmtree(base, ignore_errors=True)


# --- the pieces -------------------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    total=st.integers(100, PATH_MAX + 300),
    long_name=st.none() | st.integers(NAME_MAX + 1, 400),
    staging=st.integers(0, 120),
)
def test_an_output_is_refused_exactly_when_it_and_the_room_below_it_pass_a_limit(
    total: int, long_name: int | None, staging: int
) -> None:
    path = long_path(Path("/tmp"), total, "out", long_name)
    size = len(str(path).encode())
    fits = long_name is None and size + staging + NAME_MAX < PATH_MAX
    if fits:
        check_name_lengths(path, staging_bytes=staging)
    else:
        with pytest.raises(OSError, match="bytes in a name" if long_name else "PATH_MAX") as caught:
            check_name_lengths(path, staging_bytes=staging)
        assert "\n" not in str(caught.value) and len(str(caught.value)) < 600


@settings(max_examples=30, deadline=None)
@given(
    total=st.integers(PATH_MAX, PATH_MAX + 2000),
    long_name=st.none() | st.integers(NAME_MAX + 1, 400),
    wrapped=st.booleans(),
)
def test_a_too_long_path_is_found_behind_a_library_s_error_and_named_with_its_limit(
    total: int, long_name: int | None, wrapped: bool
) -> None:
    path = long_path(Path("/tmp"), total, "file", long_name)
    error: BaseException = OSError(errno.ENAMETOOLONG, "File name too long", str(path))
    if wrapped:  # a library re-raising it as the cause of its own error
        outer = RuntimeError("An error occurred while generating the dataset")
        outer.__cause__ = error
        error = outer
    found = path_too_long(error)
    assert found == PathTooLong(str(path))
    line = failure_line(error)
    assert line is not None and "\n" not in line and len(line) < 600
    assert ("bytes in a name" if long_name else "PATH_MAX") in line
    assert str(path)[:40] in line and str(path)[-40:] in line  # where it starts and how it ends
    assert path_too_long(OSError(errno.ENOENT, "No such file or directory", str(path))) is None
