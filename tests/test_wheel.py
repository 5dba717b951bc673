"""The wheel ships the card templates and nothing of the repository's tests or examples; a card renders
from the installed copy, and importing each of its modules leaves the environment alone."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_import_environment import (
    assert_imports_leave_environment_alone,
    environment_without_session_variables,
    import_every_module,
)

REPO = Path(__file__).resolve().parent.parent
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


@pytest.mark.slow
def test_wheel_contains_templates_and_renders_a_card(tmp_path: Path):
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(REPO)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # Where exactly is the packaging's choice (pyproject.toml); RENDER checks templates_dir() finds them installed.
    assert any(name.startswith("hf_unified_embed/") and name.endswith("/dataset_card.md.j2") for name in names), names
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
