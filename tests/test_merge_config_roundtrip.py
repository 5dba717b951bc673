"""The ``merge_config.yaml`` a merge writes is a merge config: merged again from it, it gives the same tensors.

Each merge below is made in this process; one fresh process then merges every written config again
— copied beside the inputs, since its folder names are relative to the file's folder as in every config
(``cp outputs/soup/merge_config.yaml outputs/soup.yaml; hf-unified-embed merge outputs/soup.yaml -o
outputs/soup-again``) — and the safetensors must be equal, tensor by tensor. The written configs name each
input by what it is: a local fine-tune by its own folder name (``run-0``), never by its base's Hub id; a
copy of a Hub model (here a Hub cache snapshot) by its Hub id, which the second merge finds in the cache.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from _merge_helpers import edited_copy, noisy_copy
from _processes import Expected, failure, run
from huggingface_hub import ModelCard
from safetensors import safe_open
from safetensors.torch import load_file

from hf_unified_embed.merge import MergeConfig, merge_models

BASE_ID = "sentence-transformers/all-MiniLM-L6-v2"
HUB_BASE = "org/tiny-base"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def workspace(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``outputs/`` with three local runs of one Hub base and two specialists; a Hub cache holding ``org/tiny-base``."""
    root = tmp_path_factory.mktemp("roundtrip")
    outputs = root / "outputs"
    runs = []
    for seed in range(3):
        path = noisy_copy(tiny_model_path, outputs / f"run-{seed}", seed)
        # A training run of this package: its recipe copy names the base it was trained from.
        (path / "hf_unified_embed_recipe.yaml").write_text(yaml.safe_dump({"base_model_id": BASE_ID}))
        runs.append(path)
    specialists = {
        name: edited_copy(tiny_model_path, outputs / name, lambda n, t, f=factor: t * f if "layer" in n else t)
        for name, factor in (("ir-only", 1.02), ("sts-only", 0.98))
    }
    cache = root / "hub"
    repo = cache / f"models--{HUB_BASE.replace('/', '--')}"
    snapshot = edited_copy(tiny_model_path, repo / "snapshots" / COMMIT, lambda _, t: t)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return {"outputs": outputs, "runs": runs, "snapshot": snapshot, "cache": cache, **specialists}


def cases(ws: dict[str, Any]) -> dict[str, tuple[list[Path], str, dict[str, Any]]]:
    runs, snapshot = ws["runs"], ws["snapshot"]
    return {
        "soup": (runs[:2], "soup", {"weights": [1.0, 3.0], "normalize": True}),
        "soup-negative": (runs[:2], "soup", {"weights": [-0.5, 1.5], "allow_negative_weights": True}),
        "task-arithmetic": (runs[:2], "task_arithmetic", {"base": snapshot, "weights": [0.7, -0.2]}),
        "hierarchical": (
            runs,
            "hierarchical",
            {
                "ir_models": [0, 2],
                "sts_models": [1, 2],
                "base": snapshot,
                "ir_specialist": ws["ir-only"],
                "sts_specialist": ws["sts-only"],
                "temperature": 0.5,
            },
        ),
        "dare-ties": (runs[:2], "dare_ties", {"base": snapshot, "weight": [0.6, 0.4], "density": 0.7, "seed": 3}),
        "sharded-precise": (runs[:2], "soup", {"precise": True, "max_shard_size": "100KB"}),
    }


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    return {
        f"{file.relative_to(folder)}:{name}": tensor
        for file in sorted(folder.rglob("*.safetensors"))
        for name, tensor in load_file(str(file)).items()
    }


@pytest.fixture(scope="module")
def merged(workspace: dict[str, Any]) -> dict[str, Path]:
    return {
        name: merge_models(models, method, workspace["outputs"] / name, show_progress=False, **params)
        for name, (models, method, params) in cases(workspace).items()
    }


def test_merging_again_from_the_written_config_gives_the_same_tensors(
    workspace: dict[str, Any], merged: dict[str, Path]
) -> None:
    configs = []
    for name, folder in merged.items():
        config = shutil.copy(folder / "merge_config.yaml", workspace["outputs"] / f"{name}.yaml")
        MergeConfig.from_yaml(config)  # accepted as it is written
        configs.append(config)
    # One fresh process merges every config again, from an unrelated working folder (the names are
    # relative to the file's folder, not to the working one).
    script = (
        "import sys\n"
        "from hf_unified_embed.cli.main import main\n"
        "for config in sys.argv[1:]:\n"
        "    code = main(['merge', config, '-o', config[: -len('.yaml')] + '-again', '--no-progress'])\n"
        "    if code:\n"
        "        sys.exit(f'{config}: exit {code}')\n"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(workspace["cache"]), "HF_HUB_OFFLINE": "1"}
    completed = run(
        [sys.executable, "-c", script, *map(str, configs)],
        expected=Expected(steps=len(merged)),
        env=env,
        cwd=workspace["cache"],
    )
    assert completed.returncode == 0, failure(completed)
    for name, folder in merged.items():
        again = folder.with_name(f"{name}-again")
        first, second = tensors(folder), tensors(again)
        assert first.keys() == second.keys(), name
        for key, tensor in first.items():
            assert torch.equal(tensor, second[key]), f"{name}: {key} differs"
        written = yaml.safe_load((again / "merge_config.yaml").read_text())
        assert written == {
            **yaml.safe_load((folder / "merge_config.yaml").read_text()),
            "output_dir": again.name,
        }


def test_written_config_names_inputs_by_their_own_name_or_hub_id(merged: dict[str, Path]) -> None:
    soup = yaml.safe_load((merged["soup"] / "merge_config.yaml").read_text())
    # A local fine-tune is its folder (a sibling of the merged one), never its base's Hub id.
    assert soup == {
        "method": "soup",
        "models": ["run-0", "run-1"],
        "parameters": {"weights": [0.25, 0.75]},  # as used: after normalize
        "reference": 0,
        "output_dir": "soup",
    }
    assert "normalize" not in (merged["soup"] / "merge_config.yaml").read_text()
    hierarchical = yaml.safe_load((merged["hierarchical"] / "merge_config.yaml").read_text())
    assert hierarchical["models"] == ["run-0", "run-1", "run-2"]
    assert {key: hierarchical["parameters"][key] for key in ("ir_models", "sts_models")} == {
        "ir_models": [0, 2],
        "sts_models": [1, 2],
    }
    # The base is a copy of a Hub model (a cache snapshot): named by its Hub id.
    assert hierarchical["parameters"]["base"] == HUB_BASE
    assert hierarchical["parameters"]["ir_specialist"] == "ir-only"
    ties = yaml.safe_load((merged["dare-ties"] / "merge_config.yaml").read_text())
    assert ties["parameters"] == {"base": HUB_BASE, "seed": 3, "weight": [0.6, 0.4], "density": 0.7}
    negative = yaml.safe_load((merged["soup-negative"] / "merge_config.yaml").read_text())
    assert negative["allow_negative_weights"] is True
    sharded = yaml.safe_load((merged["sharded-precise"] / "merge_config.yaml").read_text())
    assert sharded["precise"] is True and sharded["max_shard_size"] == "100KB"
    # The card still says what each run was trained from; the safetensors metadata is the same config.
    card = ModelCard.load(merged["task-arithmetic"] / "README.md")
    assert card.data.base_model == [BASE_ID, HUB_BASE]
    with safe_open(str(merged["soup"] / "model.safetensors"), "pt") as handle:
        assert json.loads(handle.metadata()["merge_recipe"]) == soup


def test_a_hub_id_given_for_a_local_input_stays_beside_its_folder(workspace: dict[str, Any], tmp_path: Path) -> None:
    runs = workspace["runs"]
    out = merge_models(
        runs[:2],
        "task_arithmetic",
        workspace["outputs"] / "given-ids",
        base=workspace["ir-only"],
        model_ids={runs[0]: "me/run-0", workspace["ir-only"]: "me/ir-only"},
        show_progress=False,
    )
    written = yaml.safe_load((out / "merge_config.yaml").read_text())
    assert written["models"] == [{"path": "run-0", "id": "me/run-0"}, "run-1"]
    assert written["parameters"]["base"] == "ir-only" and written["model_ids"] == {"ir-only": "me/ir-only"}
    config = MergeConfig.from_yaml(shutil.copy(out / "merge_config.yaml", workspace["outputs"] / "given-ids.yaml"))
    assert config.given_ids() == {
        workspace["outputs"] / "run-0": "me/run-0",
        workspace["outputs"] / "ir-only": "me/ir-only",
    }
    assert ModelCard.load(out / "README.md").data.base_model == ["me/run-0", BASE_ID, "me/ir-only"]


def test_the_packaged_minilm_is_found_by_its_hub_id(minilm_path: str) -> None:
    from hf_unified_embed.utils.model_loading import model_folder

    assert model_folder(BASE_ID, "base").resolve() == Path(minilm_path).resolve()
