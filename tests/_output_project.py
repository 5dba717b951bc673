"""The project every output-rule test runs commands in: each command's inputs, outputs of the tool's, files of
the user's and links, and the helpers that run a command in-process and compare the project before and after.

Used by ``test_output_rule.py`` (which output each command may write) and ``test_output_lock_rule.py`` (one
writer per output).
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

import pytest
import yaml

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


@contextlib.contextmanager
def project_template(root: Path, tiny_model_path: str) -> Iterator[Path]:
    """A project folder under ``root``, copied for every example; the datasets cache lives outside it."""
    import datasets

    from hf_unified_embed.data import build_unified, save_unified

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
    (project / "link-cwd").symlink_to(".")
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
    "sample": (lambda out: ["sample", out], [], "folder"),  # reads the package's own copy of the sample
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
    "link-cwd",
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
