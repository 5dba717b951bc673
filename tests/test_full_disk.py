"""A full storage is one line: the output, the cause, and what was kept; never a traceback, never the kill of
``SIGXFSZ``.

Libraries report a full disk (``ENOSPC``), a file-size limit (``EFBIG``) or a quota (``EDQUOT``) each their
own way; :func:`storage_full` finds it behind each. The commands then run under a real file-size limit
(``RLIMIT_FSIZE``, as ``ulimit -f`` sets it), where every write past the limit fails.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from _fault_runs import Fault, beside, check_one_line_end, run_command
from _output_project import COMMANDS, project_template
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_unified_embed.errors import OutputError
from hf_unified_embed.utils.outputs import StagedOutput
from hf_unified_embed.utils.write_failures import FULL_ERRNOS, storage_full

FULL = sorted(FULL_ERRNOS)
OTHERS = [errno.EACCES, errno.ENOENT, errno.EIO, errno.EROFS, errno.EPERM]


def as_libraries_raise(number: int, style: str) -> BaseException:
    """An error of ``number`` as one library or another raises it."""
    text = os.strerror(number)
    if style == "python":
        return OSError(number, text, "/data/out/model.safetensors")
    if style == "pyarrow":
        return OSError(f"[Errno {number}] Error writing bytes to file. Detail: [errno {number}] {text}")
    if style == "rust":
        kind = {errno.ENOSPC: "StorageFull", errno.EFBIG: "FileTooLarge", errno.EDQUOT: "QuotaExceeded"}.get(
            number, "Other"
        )
        return RuntimeError(
            f'Error while serializing: IoError(Os {{ code: {number}, kind: {kind}, message: "{text}" }})'
        )
    # datasets re-raises a worker's error as the cause of its own
    wrapped = RuntimeError("An error occurred while generating the dataset")
    wrapped.__cause__ = OSError(number, text)
    return wrapped


@settings(max_examples=40, deadline=None)
@given(number=st.sampled_from(FULL + OTHERS), style=st.sampled_from(["python", "pyarrow", "rust", "datasets"]))
def test_a_full_storage_is_found_behind_what_each_library_raises(number: int, style: str):
    found = storage_full(as_libraries_raise(number, style))
    if number in FULL_ERRNOS:
        assert found is not None and found.errno == number and found.cause == os.strerror(number)
    else:
        assert found is None


def test_torch_s_unnamed_write_failure_counts_as_a_full_storage():
    error = RuntimeError(
        "[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file data/0: file write failed"
    )
    found = storage_full(error)
    assert found is not None and "disk full" in found.cause


@settings(max_examples=10, deadline=None)
@given(number=st.sampled_from(FULL), kind=st.sampled_from(["folder", "file"]))
def test_a_full_storage_inside_a_staged_output_is_one_line_and_nothing_kept(
    tmp_path_factory: pytest.TempPathFactory, number: int, kind: str
):
    folder = tmp_path_factory.mktemp("full")
    target = folder / "out"
    with pytest.raises(OutputError) as caught, StagedOutput(target, kind=kind) as stage:  # type: ignore[arg-type]
        stage.kept_note = "the model was trained"
        raise OSError(number, os.strerror(number), str(stage.path))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"cannot write the output {target}: {os.strerror(number)}")
    assert message.endswith("nothing of it was kept; the model was trained")
    assert not target.exists() and beside(target) == []


# --- the commands under a file-size limit -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> Iterator[Path]:
    with project_template(tmp_path_factory.mktemp("full-disk"), tiny_model_path) as project:
        yield project


#: Per command, a limit that its output's largest file exceeds: a shard (build), the weights (merge, train).
LIMITS = {"build": 3_000, "build-2": 3_000, "merge": 200_000, "train": 300_000}


@pytest.mark.slow
@pytest.mark.parametrize("command", list(LIMITS))
def test_a_command_past_the_file_size_limit_ends_in_one_line(template: Path, tmp_path: Path, command: str):
    project = Path(shutil.copytree(template, tmp_path / "project", symlinks=True))
    argv = COMMANDS["build" if command == "build-2" else command][0]("out")
    if command == "build-2":
        argv += ["--num-proc", "2"]
    outcome = run_command(project, argv, tmp_path / "cache", Fault("fsize", size=LIMITS[command]))
    # Exit 2, not the kill of SIGXFSZ (-25) nor a traceback (1).
    check_one_line_end(outcome, {2}, command)
    line = outcome.err.splitlines()[-1]
    assert line.startswith(f"error: cannot write the output {project / 'out'}: File too large"), line
    if command == "train":
        assert "the model was trained" in line, line
    assert not (project / "out").exists() and beside(project / "out") == []
