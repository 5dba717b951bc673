"""Faults at any moment of a writing command end in one line, not in orphans, tracebacks or half-written outputs.

For each command that writes (``build`` in one and in two processes, ``train`` with its data loaded and
streamed, ``merge``, ``mine-negatives``, ``curriculum``, ``evaluate -o``), hypothesis draws a fault and a
moment: Ctrl-C (to the whole process group, as a terminal sends it), ``kill`` (``SIGTERM``), ``kill -9`` of the main process, a file-size limit
(``ulimit -f``) of a drawn size, or the output's parent folder removed or made read-only (not as root, whom
permissions do not stop). A moment counts from when the command's own code begins (it then catches
``SIGTERM``): a Ctrl-C within the interpreter's start-up, before that, is Python's, as for any program. Then:

* the command ended with 0, 2 (one ``error:`` line), 130 / 143 (``interrupted``) or was killed, and printed
  no traceback;
* no process of its session is alive (workers included);
* the inputs are byte for byte as they were;
* the output is complete (a stop after it was in place may leave it, whole) or absent, and nothing the command staged is left beside it (after a
  ``kill -9``: until the next run, which removes it);
* a rerun succeeds and leaves nothing beside its output.

CI runs one example per command (about two minutes in all); ``FAULT_EXAMPLES=N`` runs N per command.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from _fault_runs import EXIT_CODES, Fault, beside, check_one_line_end, run_command
from _output_project import COMMANDS, hashes, project_template
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.utils.outputs import not_written_by_tool, written_by_tool

#: ``FAULT_EXAMPLES=N``: N examples per command (CI: one).
SCALE = max(1, int(os.environ.get("FAULT_EXAMPLES", "1")))
#: Seconds within which a fault is drawn, per command, from when its code begins: about its run on a quiet
#: two-core machine (build 1.1 s, in two processes 1.3 s, train 10 s, streaming 7.5 s, merge 1.9 s,
#: mine-negatives 6 s, curriculum 8 s, evaluate 5.5 s, start-up included); a moment past the end draws no fault.
WINDOW_S = {
    "build": 1.5,
    "build-2": 2.0,
    "train": 10.0,
    "train-stream": 10.0,
    "merge": 2.5,
    "mine-negatives": 6.0,
    "curriculum": 8.0,
    "evaluate": 6.0,
}
#: root writes into a read-only folder: that fault is drawn only for other users.
ROOT_IGNORES_PERMISSIONS = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> Iterator[Path]:
    with project_template(tmp_path_factory.mktemp("faults"), tiny_model_path) as project:
        # The training recipe reading its tasks as streams (a stream trains for max_steps, not a row cap).
        recipe = yaml.safe_load((project / "recipe.yaml").read_text())
        recipe["data"]["streaming"] = True
        del recipe["data"]["max_rows_per_task"]
        (project / "recipe-stream.yaml").write_text(yaml.safe_dump(recipe))
        yield project


def argv_of(command: str, output: str) -> list[str]:
    if command == "build-2":
        return [*COMMANDS["build"][0](output), "--num-proc", "2"]
    if command == "train-stream":
        return ["train", "recipe-stream.yaml", "-o", output]
    return COMMANDS[command][0](output)


def inputs_of(command: str) -> list[str]:
    if command == "train-stream":
        return ["recipe-stream.yaml", *COMMANDS["train"][1]]
    return COMMANDS["build" if command == "build-2" else command][1]


def faults(window: float) -> st.SearchStrategy[Fault]:
    moment = st.floats(0.0, window)
    kinds = ["SIGINT", "SIGTERM", "SIGKILL", "vanish"] + ([] if ROOT_IGNORES_PERMISSIONS else ["readonly"])
    return st.one_of(
        st.builds(Fault, st.sampled_from(kinds), moment),
        # Below a few kB every write fails (the lock file's, the first shard's); up to a few MB some finish.
        st.builds(Fault, st.just("fsize"), st.just(0.0), st.integers(0, 5 * 2**20)),
    )


def _input_hashes(project: Path, command: str) -> dict[str, dict[str, str] | str]:
    found: dict[str, dict[str, str] | str] = {}
    for name in inputs_of(command):
        path = project / name
        found[name] = hashes(path) if path.is_dir() else path.read_bytes().hex()
    return found


def check_fault(template: Path, command: str, fault: Fault) -> None:
    with tempfile.TemporaryDirectory(dir=template.parent) as folder:
        project = Path(shutil.copytree(template, Path(folder) / "project", symlinks=True))
        cache = Path(folder) / "cache"
        name = "out.json" if command == "evaluate" else "out"
        relative = f"new/deep/{name}" if fault.kind in ("vanish", "readonly") else name
        output = project / relative
        output.parent.mkdir(parents=True, exist_ok=True)
        before = _input_hashes(project, command)
        what = f"{command} with {fault}"

        outcome = run_command(project, argv_of(command, relative), cache, fault)
        check_one_line_end(outcome, EXIT_CODES[fault.kind], what)
        assert _input_hashes(project, command) == before, f"{what}: an input changed"
        if outcome.code == 0 and fault.kind != "vanish":  # a folder removed after the output was written
            assert output.exists(), f"{what}: exit 0 and no output"
        if output.exists():  # a stop that came after the output was in place leaves it whole
            assert written_by_tool(output), f"{what}: a half-written output: {not_written_by_tool(output)}"
        if outcome.code != -9:  # a killed process cannot clean up: the next run removes its stage
            assert beside(output) == [], f"{what}: left {beside(output)}"

        if output.parent.is_dir():
            output.parent.chmod(0o755)
        output.parent.mkdir(parents=True, exist_ok=True)
        rerun = argv_of(command, relative) + (["--overwrite"] if output.exists() else [])
        again = run_command(project, rerun, cache)
        check_one_line_end(again, {0}, f"the rerun after {what}")
        assert output.exists() and beside(output) == [], f"the rerun after {what}: left {beside(output)}"
        assert _input_hashes(project, command) == before, f"the rerun after {what}: an input changed"


@pytest.mark.slow
@pytest.mark.parametrize("command", list(WINDOW_S))
def test_a_fault_at_any_moment_ends_in_one_line(template: Path, command: str):
    @settings(
        max_examples=SCALE,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(fault=faults(WINDOW_S[command]))
    def search(fault: Fault) -> None:
        check_fault(template, command, fault)

    search()
