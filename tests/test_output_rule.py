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

import contextlib
import hashlib
import io
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.utils.outputs import MARKER, StagedOutput

STS = [
    ("A man is playing a guitar.", "A man plays the guitar.", 1.0),
    ("A woman is slicing onions.", "A woman cuts an onion.", 0.84),
    ("Two dogs run in a field.", "Dogs are running outside.", 0.6),
    ("A man is playing a flute.", "A child is eating cake.", 0.1),
    ("The stock market fell today.", "A cat sleeps on the sofa.", 0.0),
    ("A woman is cooking onions.", "A woman is cooking.", 0.5),
    ("A plane is taking off.", "An air plane is taking off.", 1.0),
    ("A man is riding a bike.", "A man rides a horse.", 0.3),
]
PAIRS = [
    ("how do plants make food", "Plants make food from light by photosynthesis."),
    ("what is the capital of france", "Paris is the capital of France."),
    ("who wrote hamlet", "Hamlet was written by William Shakespeare."),
    ("how tall is mount everest", "Everest is 8,849 metres high."),
    ("what do bees make", "Bees make honey from nectar."),
    ("when did the war end", "The war ended in 1945."),
    ("what is the largest ocean", "The Pacific is the largest ocean."),
    ("how many legs does a spider have", "A spider has eight legs."),
    ("what gas do we breathe", "People breathe oxygen."),
    ("where is the sahara", "The Sahara is in northern Africa."),
]


# --- the project: every input of every command, an output of the tool's and files of the user's ---------------


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> Iterator[Path]:
    """A project folder, copied for every example; the datasets cache lives outside it."""
    import datasets

    from hf_unified_embed.data import build_unified, save_unified

    root = tmp_path_factory.mktemp("output-rule")
    cache = root / "datasets-cache"
    patch = pytest.MonkeyPatch()
    patch.setenv("HF_DATASETS_CACHE", str(cache))
    patch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    project = root / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "stsb.jsonl").write_text(  # unified rows: the sts task
        "".join(
            json.dumps({"query": a, "positives": [b], "negatives": [], "positive_scores": [s]}) + "\n"
            for a, b, s in STS
        )
    )
    (project / "data" / "pairs.jsonl").write_text(
        "".join(json.dumps({"anchor": q, "positive": p}) + "\n" for q, p in PAIRS)
    )
    build = {
        "sources": [
            {"name": "stsb", "format": "unified", "data_files": "data/stsb.jsonl", "task_type": "sts"},
            {"name": "qa", "format": "pairs", "data_files": "data/pairs.jsonl", "task_type": "retrieval"},
        ]
    }
    (project / "build.yaml").write_text(yaml.safe_dump(build))
    save_unified(build_unified(project / "build.yaml", split="train"), project / "unified")  # the tool's
    shutil.copytree(tiny_model_path, project / "model")
    shutil.copytree(tiny_model_path, project / "model2")
    suite = {
        "name": "rule",
        "batch_size": 8,
        "diagnostics": False,
        "evaluations": [
            {"name": "stsb", "kind": "sts", "source": "unified", "data_files": "data/stsb.jsonl"},
            {"name": "qa", "kind": "retrieval", "unified": "unified", "split": "train", "max_rows": 6},
        ],
    }
    (project / "suite.yaml").write_text(yaml.safe_dump(suite))
    recipe = {
        "base_model": "model",
        "data": {"path": "unified", "tasks": ["stsb", "qa"], "max_rows_per_task": 8},
        "losses": {"retrieval": "MultiPositiveInfoNCELoss", "sts": "CoDiEmbSTSLoss"},
        "max_seq_length": 32,
        "training_args": {"max_steps": 1, "per_device_train_batch_size": 4},
        "evaluation": "suite.yaml",
        "output_dir": "trained",
    }
    (project / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    with StagedOutput(project / "prior") as stage:  # an earlier output of the tool
        (stage.path / "old.txt").write_text("an earlier output")
    (project / "prior.json").write_text(json.dumps({"written_by": "hf-unified-embed", "results": {}}))
    (project / "notes").mkdir()  # the user's
    (project / "notes" / "mine.txt").write_text("the user's notes")
    (project / "notes.txt").write_text("the user's notes")
    with StagedOutput(project / "shared") as stage:  # an output of the tool's to which the user then added files
        (stage.path / "old.txt").write_text("an earlier output")
    (project / "shared" / "thesis.txt").write_text("the user's thesis")
    (project / "shared" / "photos").mkdir()
    (project / "shared" / "photos" / "cat.jpg").write_bytes(b"\xff\xd8 the user's cat")
    (project / "legacy").mkdir()  # marked by an older version: no manifest of what the tool wrote
    (project / "legacy" / MARKER).write_text("This folder was written by hf-unified-embed.\n")
    (project / "legacy" / "old.txt").write_text("an earlier output")
    (project / "dangling").symlink_to("nowhere")  # links: replacing one would replace the link, not its target
    (project / "link-data").symlink_to("data")
    (project / "link-prior").symlink_to("prior")
    yield project
    patch.undo()


# --- the commands, and the inputs each reads --------------------------------------------------------------------

FAST_CURRICULUM = ["--iterations", "200", "--n-samples", "4", "--batch-size", "8", "--negative-pool", "8"]


COMMANDS: dict[str, tuple[Callable[[str], list[str]], list[str], str]] = {
    # name: (argv for an output, the inputs it reads, what it writes)
    "build": (
        lambda out: ["build", "build.yaml", "-o", out],
        ["build.yaml", "data/stsb.jsonl", "data/pairs.jsonl"],
        "folder",
    ),
    "mine-negatives": (
        lambda out: [
            "mine-negatives",
            "unified",
            "-o",
            out,
            "--model",
            "model",
            "--num-negatives",
            "1",
            "--batch-size",
            "8",
        ],
        ["unified", "model"],
        "folder",
    ),
    "curriculum": (
        lambda out: ["curriculum", "unified", "--teacher", "model", "-o", out, *FAST_CURRICULUM],
        ["unified", "model"],
        "folder",
    ),
    "train": (
        lambda out: ["train", "recipe.yaml", "-o", out],
        ["recipe.yaml", "unified", "model", "suite.yaml", "data/stsb.jsonl"],
        "folder",
    ),
    "merge": (
        lambda out: ["merge", "--method", "soup", "--models", "model", "model2", "-o", out, "--no-progress"],
        ["model", "model2"],
        "folder",
    ),
    "evaluate": (
        lambda out: ["evaluate", "model", "suite.yaml", "-o", out, "--no-diagnostics"],
        ["model", "suite.yaml", "data/stsb.jsonl", "unified"],
        "file",
    ),
}

CWD = "<the current folder>"  # drawn as the project folder's absolute path
#: Every output drawn: inputs, their parents and children, "", ".", the current folder, outputs of the tool's,
#: files of the user's and fresh paths.
OUTPUTS = [
    # inputs
    "build.yaml", "recipe.yaml", "suite.yaml", "data/stsb.jsonl", "data/pairs.jsonl", "unified", "model", "model2",
    # their parents
    "", ".", CWD, "..", "data",
    # their children
    "model/config.json", "model/sub", "unified/README.md", "unified/data/new", "data/stsb.jsonl/x", "data/new",
    # written by the tool before; the user's
    "prior", "prior.json", "notes", "notes.txt", "notes/new",
    # a file the tool wrote in its folder; a tool's folder holding the user's files, and one of the user's there;
    # a folder marked by an older version; links
    "prior/old.txt", "shared", "shared/thesis.txt", "legacy", "dangling", "link-data", "link-prior",
    # fresh
    "out", "new/deep/out", "out.json",
]  # fmt: skip


def _tool_wrote(path: Path) -> bool:
    """Only what the tool wrote and nobody changed: not ``shared`` (the user's files in it), not ``legacy``."""
    if path.is_dir():
        return (path / MARKER).is_file() and path.name not in ("shared", "legacy")
    return path.name == "prior.json" or (path.parent.name, path.name) == ("prior", "old.txt")


def allowed(command: str, output: str, overwrite: bool, project: Path) -> bool:
    """The rule, written out for the project: does ``command`` write ``output``?"""
    if output in ("", ".") or (project / output).is_symlink():
        return False
    path = (project / output).resolve()
    if path == project or path in project.parents:
        return False
    for name in COMMANDS[command][1]:
        source = (project / name).resolve()
        if path == source or source in path.parents or path in source.parents:
            return False
    if any(parent.is_file() for parent in path.parents):
        return False  # its folder cannot be made
    kind = COMMANDS[command][2]
    if path.exists():
        if (kind == "folder") != path.is_dir():
            return False
        if (path.is_file() and path.stat().st_size == 0) or (path.is_dir() and not any(path.iterdir())):
            return True
        return overwrite and _tool_wrote(path)
    return True


# --- running a command ------------------------------------------------------------------------------------------


def run_in(project: Path, argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.chdir(project), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def hashes(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"
        for path in sorted(root.rglob("*"))
    }


@contextlib.contextmanager
def fresh_project(template: Path) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(dir=template.parent) as folder:
        yield Path(shutil.copytree(template, Path(folder) / "project", symlinks=True))


def one_error_line(code: int, err: str, what: str) -> str:
    assert code == 2, f"{what}: exit code {code}\n{err[-3000:]}"
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), f"{what}: stderr is not one error line:\n{err[-3000:]}"
    return lines[0]


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
    always = [("", True), (".", True), (CWD, True), ("notes", True), (own, True), ("shared", True), ("dangling", True)]
    for output, overwrite in always + ([("out", False)] if command != "train" else []):
        check_property = example(output, overwrite)(check_property)
    PROPERTY(check_property)()
