"""The wheel ships the card templates, and a card renders from the installed copy."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

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
    assert "hf_unified_embed/utils/templates/dataset_card.md.j2" in zipfile.ZipFile(wheel).namelist()
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
