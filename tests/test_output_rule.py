"""The tool deletes only what it wrote: every writing command resolves its output through ``check_output``.

One test per bug of issue 31, rule 1, then a property over every writing command: hypothesis draws the
output among the command's inputs, their parents, their children, ``""``, ``"."``, the current folder, a
folder and a file the tool wrote before, a folder and a file of the user's, and fresh paths, with and
without ``--overwrite``, and checks that

* the command succeeds exactly when the rule allows the output (a fresh path, or with ``--overwrite`` an
  output the tool wrote), and every refusal is exit code 2 with exactly one line on standard error;
* no file of the project changed, except below an output that was written (content hashes of every
  file below the temporary project folder, before and after), and no staging folder is left.

Commands run in-process (``hf_unified_embed.cli.main.main``) in the project folder on tiny inputs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _output_project import (
    COMMANDS,
    CWD,
    OUTPUTS,
    allowed,
    fresh_project,
    hashes,
    one_error_line,
    project_template,
    run_in,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hf_unified_embed.utils.outputs import MARKER, written_by_tool


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> Iterator[Path]:
    with project_template(tmp_path_factory.mktemp("output-rule"), tiny_model_path) as project:
        yield project


# --- one test per bug -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["build", "mine-negatives"])
def test_an_empty_output_with_overwrite_never_replaces_the_current_folder(
    command: str, template: Path, tmp_path: Path
) -> None:
    """Bug 1: ``cd project && build recipe.yaml -o "$OUT" --overwrite`` with OUT unset replaced the project."""
    # The inputs lie outside the current folder, as in the report: nothing else protects it.
    elsewhere = Path(shutil.copytree(template, tmp_path / "elsewhere", symlinks=True))
    project = tmp_path / "project"
    project.mkdir()
    (project / "thesis.tex").write_text("years of work")
    recipe = yaml.safe_load((elsewhere / "build.yaml").read_text())
    for source in recipe["sources"]:
        source["data_files"] = str(elsewhere / source["data_files"])
    (elsewhere / "build.yaml").write_text(yaml.safe_dump(recipe))
    argv = {
        "build": ["build", str(elsewhere / "build.yaml"), "-o", ""],
        "mine-negatives": [
            "mine-negatives",
            str(elsewhere / "unified"),
            "-o",
            "",
            "--model",
            str(elsewhere / "model"),
        ],
    }[command] + ["--overwrite"]
    before = hashes(project)
    code, err = run_in(project, argv)
    line = one_error_line(code, err, command)
    assert line == "error: output path '' is empty; give the folder or file to write (is a shell variable unset?)"
    assert hashes(project) == before


def test_train_refuses_an_empty_output_instead_of_ignoring_it(template: Path) -> None:
    with fresh_project(template) as project:
        code, err = run_in(project, ["train", "recipe.yaml", "-o", "", "--overwrite"])
        assert "output path '' is empty" in one_error_line(code, err, "train -o ''")
        assert not (project / "trained").exists()


@pytest.mark.parametrize(
    ("output", "input_"), [("model/config.json", "model"), ("data/stsb.jsonl", "data/stsb.jsonl")]
)
def test_evaluate_never_overwrites_its_model_or_the_suite_data(output: str, input_: str, template: Path) -> None:
    """Bug 2: ``evaluate out/runA SUITE -o out/runA/config.json --overwrite`` destroyed the model, and ``-o`` on a
    suite data file replaced the gold data with JSON."""
    with fresh_project(template) as project:
        before = hashes(project)
        code, err = run_in(project, ["evaluate", "model", "suite.yaml", "-o", output, "--overwrite"])
        line = one_error_line(code, err, output)
        assert f"output {project / output} overlaps the input {input_}" in line or (
            f"overlaps the input {project / input_}" in line
        ), line
        assert hashes(project) == before


def test_a_rerun_removes_the_empty_checkpoint_folder_a_killed_run_left(template: Path) -> None:
    """Bug 8: after kill -9 during ``train`` (the trainer had made ``<output>-checkpoints``) and a successful
    rerun, the empty folder stayed."""
    with fresh_project(template) as project:
        (project / "run-checkpoints").mkdir()  # what the killed run left (its staging folder goes with the rerun)
        code, err = run_in(project, ["train", "recipe.yaml", "-o", "run"])
        assert code == 0, err[-3000:]
        assert (project / "run" / "model.safetensors").is_file()
        assert not (project / "run-checkpoints").exists()


def test_only_the_runs_own_empty_checkpoint_folder_is_removed_when_found(tmp_path: Path) -> None:
    from hf_unified_embed.training.checkpoints import default_checkpoint_folder, no_empty_folder

    own, users = default_checkpoint_folder(tmp_path / "run"), tmp_path / "mine"
    for folder in (own, users):
        folder.mkdir()
    with no_empty_folder(own, own=True), no_empty_folder(users):
        pass
    assert not own.exists() and users.is_dir(), "a folder the user named stays, even empty"
    own.mkdir()
    with no_empty_folder(own, own=True):
        (own / "checkpoint-1").mkdir()
    assert (own / "checkpoint-1").is_dir(), "a checkpoint is kept"


@pytest.mark.parametrize("command", list(COMMANDS))
def test_ctrl_c_is_one_line_exit_130_and_leaves_no_staging(
    command: str, template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C inside the work of every writing command: ``interrupted``, exit code 130, nothing left behind."""
    import hf_unified_embed.utils.outputs as outputs

    def interrupt(self: Any, *args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    # The staging folder exists and the work is under way when the commit (the last step) is interrupted;
    # train is interrupted while it trains (the trainer has made its checkpoint folder).
    if command == "train":
        from sentence_transformers import SentenceTransformerTrainer

        monkeypatch.setattr(SentenceTransformerTrainer, "train", interrupt)
    else:
        monkeypatch.setattr(outputs.StagedOutput, "commit", interrupt)
    with fresh_project(template) as project:
        before = hashes(project)
        code, err = run_in(project, COMMANDS[command][0]("out.json" if command == "evaluate" else "out"))
        messages = [line for line in err.split("\n") if line and "\r" not in line]  # progress bars aside
        assert (code, messages) == (130, ["interrupted"]), err[-3000:]
        assert hashes(project) == before, "no output, no staging folder, no checkpoint folder"


# --- the property -----------------------------------------------------------------------------------------------

PROPERTY = settings(
    max_examples=5,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_input_changes_and_every_refusal_is_one_line_exit_2(command: str, template: Path) -> None:
    argv_for, _, kind = COMMANDS[command]

    def check(output: str, overwrite: bool) -> None:
        what = f"{command} -o {output!r}" + (" --overwrite" if overwrite else "")
        with fresh_project(template) as project:
            target = str(project) if output == CWD else output
            ok = allowed(command, target, overwrite, project)
            before = hashes(project)
            code, err = run_in(project, [*argv_for(target), *(["--overwrite"] if overwrite else [])])
            after = hashes(project)
            assert not [name for name in after if ".staging-" in name], f"{what}: a staging folder is left"
            if not ok:
                line = one_error_line(code, err, what)
                assert after == before, f"{what}: refused, yet the project changed"
                assert "output" in line, line
                return
            assert code == 0, f"{what}: exit code {code}\n{err[-3000:]}"
            written = (project / target).resolve().relative_to(project)
            below = {name for name in {*before, *after} if Path(name) == written or written in Path(name).parents}
            # The folders a fresh nested output needs are made for it, as ``mkdir -p`` would: nothing else in them.
            below |= {name for name in after if name not in before and Path(name) in written.parents}
            manifest = written.parent / MARKER
            if kind == "file" and str(manifest) in before:
                # A file written into one of the tool's folders is added to that folder's manifest at its size,
                # so the folder stays the tool's: the one change allowed beside the output.
                below.add(str(manifest))
                assert written_by_tool(project / written.parent), f"{what}: its folder is no longer the tool's"
            assert {k: v for k, v in after.items() if k not in below} == {
                k: v for k, v in before.items() if k not in below
            }, f"{what}: something besides the output changed"
            if kind == "folder":
                assert (project / target / MARKER).is_file(), f"{what}: the output folder is not marked"
            else:
                assert json.loads((project / target).read_text())["written_by"] == "hf-unified-embed"

    check_property = given(st.sampled_from(OUTPUTS), st.booleans())(check)
    # Besides the drawn examples, always: the tool's own output replaced, a fresh one (train, the slowest
    # command, trains once), and the bugs.
    own = "prior.json" if kind == "file" else "prior"
    always = [
        ("", True),
        (".", True),
        (CWD, True),
        ("notes", True),
        (own, True),
        ("shared", True),
        ("dangling", True),
        ("link-cwd", True),
    ]
    if kind == "file":
        always.append(("prior/old.txt", True))  # a file the tool wrote in its folder: the folder's manifest follows
    for output, overwrite in always + ([("new/deep/out", False)] if command != "train" else []):
        check_property = example(output, overwrite)(check_property)
    PROPERTY(check_property)()
