"""Cards that publish: base_model holds Hub ids only, no written file holds an absolute local path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from _merge_helpers import edited_copy, noisy_copy
from huggingface_hub import ModelCard, ModelCardData
from huggingface_hub.utils import validate_repo_id
from safetensors import safe_open

from hf_unified_embed.merge import merge_models

BASE_ID = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def runs(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two local training runs of one Hub base (their recipe copies name it, with local paths around it)."""
    root = tmp_path_factory.mktemp("publish")
    paths = []
    for seed in range(2):
        path = noisy_copy(tiny_model_path, root / "outputs" / f"run-{seed}", seed)
        recipe = {
            "base_model": str(Path(tiny_model_path).resolve()),
            "base_model_id": BASE_ID,
            "output_dir": str(path),
        }
        (path / "hf_unified_embed_recipe.yaml").write_text(yaml.safe_dump(recipe))
        paths.append(path)
    return paths


def assert_publishable(card_path: Path) -> ModelCard:
    """What the Hub checks of the metadata, offline: it parses, rebuilds, names valid ids, has parseable results."""
    card = ModelCard.load(card_path)
    data = card.data.to_dict()
    ModelCardData(**data)  # validates eval results / model-index
    for model_id in data.get("base_model") or []:
        validate_repo_id(model_id)
    assert data.get("base_model_relation", "merge") == "merge"
    return card


def assert_no_local_paths(folder: Path, *local: Path) -> None:
    needles = {str(path.resolve()).encode() for path in local} | {str(path).encode() for path in local}
    for file in folder.rglob("*"):
        if file.is_file():
            data = file.read_bytes()
            for needle in needles:
                assert needle not in data, f"{file.name} holds the local path {needle.decode()}"


def test_local_runs_of_one_base_list_that_base(runs: list[Path], tmp_path: Path) -> None:
    results = [
        {
            "task_type": "sentence-similarity",
            "dataset_type": "sentence-transformers/stsb",
            "dataset_name": "stsb",
            "metric_type": "spearman",
            "metric_value": 0.876543219,
        }
    ]
    out = merge_models(
        runs, "soup", tmp_path / "merged", model_name="org/merged", evaluation_results=results, show_progress=False
    )
    card = assert_publishable(out / "README.md")
    assert card.data.base_model == [BASE_ID]
    assert card.data.eval_results[0].metric_value == 0.8765
    assert f"[{BASE_ID}](https://huggingface.co/{BASE_ID})" in card.text
    assert_no_local_paths(out, tmp_path, runs[0].parent)
    recipe = yaml.safe_load((out / "merge_config.yaml").read_text())
    # Each run by its own folder name, never by its base's Hub id.
    assert recipe["models"] == [path.name for path in runs]
    with safe_open(str(out / "model.safetensors"), "pt") as handle:
        metadata = json.loads(handle.metadata()["merge_recipe"])
    assert metadata["models"] == [path.name for path in runs]


def test_ids_from_config_cards_and_hub_cache(runs: list[Path], tiny_model_path: str, tmp_path: Path) -> None:
    carded = shutil.copytree(runs[0], tmp_path / "carded")
    (carded / "hf_unified_embed_recipe.yaml").unlink()
    (carded / "README.md").write_text("---\nbase_model: org/some-base\nlicense: mit\n---\n# a fine-tune\n")
    snapshot = shutil.copytree(runs[1], tmp_path / "hub" / "models--org--cached" / "snapshots" / "0123abcd")
    (snapshot / "hf_unified_embed_recipe.yaml").unlink()
    plain = edited_copy(tiny_model_path, tmp_path / "plain", lambda _, t: t)
    out = merge_models(
        [carded, snapshot, plain, runs[0]],
        "soup",
        tmp_path / "merged",
        model_ids=[None, None, "org/plain", None],
        show_progress=False,
    )
    card = assert_publishable(out / "README.md")
    assert card.data.base_model == ["org/some-base", "org/cached", "org/plain", BASE_ID]
    assert_no_local_paths(out, tmp_path)


def test_hierarchical_and_mergekit_recipes_name_inputs_without_paths(
    runs: list[Path], tiny_model_path: str, tmp_path: Path
) -> None:
    specialists = [edited_copy(tiny_model_path, tmp_path / name, lambda _, t: t * 1.01) for name in ("ir", "sts")]
    out = merge_models(
        runs,
        "hierarchical",
        tmp_path / "h",
        ir_models=[0],
        sts_models=[1],
        base=tiny_model_path,
        ir_specialist=specialists[0],
        sts_specialist=specialists[1],
        show_progress=False,
    )
    assert_publishable(out / "README.md")
    assert_no_local_paths(out, tmp_path, Path(tiny_model_path))
    recipe = yaml.safe_load((out / "merge_config.yaml").read_text())
    assert recipe["parameters"]["ir_specialist"] == specialists[0].name
    ties = merge_models(
        runs,
        "ties",
        tmp_path / "t",
        base=tiny_model_path,
        density=0.5,
        model_ids={tiny_model_path: "org/tiny-base"},  # a base in parameters gets its id by path
        show_progress=False,
    )
    card = assert_publishable(ties / "README.md")
    assert card.data.base_model == [BASE_ID, "org/tiny-base"]  # the runs' base, then the TIES base
    written = yaml.safe_load((ties / "merge_config.yaml").read_text())
    # A local base is named by its folder (so the config merges again), its given Hub id beside it.
    tiny = Path(tiny_model_path).name
    assert written["parameters"]["base"] == tiny and written["model_ids"] == {tiny: "org/tiny-base"}
    assert_no_local_paths(ties, tmp_path, Path(tiny_model_path))
    assert "| `encoder.layer.0` |" in card.text and "density[0]" in card.text
