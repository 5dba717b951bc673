"""Every writer's artifact reloads as it was written: from disk, in a fresh process (``tests/_roundtrip.py``).

Trained models (full, LoRA adapter, adapter merged by the recipe or from an adapter folder), every merge
method's output, mined and curriculum datasets, and the cards of all of them: embeddings of fixed texts
to 1e-5, rows exactly, card metadata as ``huggingface_hub`` parses it with Hub ids only, and no path of
the machine in any file written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _roundtrip import (
    assert_hub_metadata,
    assert_no_machine_paths,
    assert_same_embeddings,
    assert_same_rows,
    encode,
    reload,
)

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hf_unified_embed.data import build_unified, save_unified

    return save_unified(build_unified(SAMPLE_RECIPE, split="train"), tmp_path_factory.mktemp("unified") / "data")


def _recipe(unified_dir: Path, base: str, output: Path, **extra: Any) -> dict[str, Any]:
    return {
        "base_model": base,
        "base_model_id": "org/tiny-base",
        "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa"], "max_rows_per_task": 24},
        "losses": {"retrieval": "MultiPositiveInfoNCELoss", "sts": "CoDiEmbSTSLoss"},
        "negatives_per_query": 1,
        "training_args": {"max_steps": 2, "per_device_train_batch_size": 4, "learning_rate": 1e-2},
        "output_dir": str(output),
        **extra,
    }


def _train(raw: dict[str, Any]) -> Any:
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.train import train_from_recipe

    return train_from_recipe(recipe_from_dict(raw))


def _lora(target_modules: list[str], **extra: Any) -> dict[str, Any]:
    return {"r": 4, "lora_alpha": 8, "target_modules": target_modules, **extra}


DECODER = {"pooling": "lasttoken", "padding_side": "left"}


def test_trained_model_and_its_card(unified_dir: Path, tiny_model_path: str, tmp_path: Path) -> None:
    from hf_unified_embed.data import load_unified

    raw = _recipe(unified_dir, tiny_model_path, tmp_path / "model")
    raw["data"]["tasks"] = ["stsb", "wikiqa", "trecqa"]
    # A per-task override: wikiqa scores each query against its own hard negatives only.
    raw["losses"]["wikiqa"] = {"name": "MultiPositiveInfoNCELoss", "in_batch_negatives": False}
    outcome = _train(raw)
    assert_same_embeddings(outcome.model_dir, outcome.model)
    card = reload("card", outcome.model_dir / "README.md")
    assert card["type"] == "ModelCard" and card["data"]["base_model"] == "org/tiny-base"
    assert "base_model_relation" not in card["data"]
    assert_hub_metadata(card["data"])

    # Widget examples are texts of the training rows: a query, then its positive and negatives.
    rows = [row for task in load_unified(unified_dir).values() for row in task.to_list()]
    queries = {row["query"] for row in rows}
    texts = queries | {text for row in rows for text in row["positives"] + row["negatives"]}
    widget = card["data"]["widget"]
    assert widget and all(example["source_sentence"] in queries for example in widget)
    assert all(set(example["sentences"]) <= texts and example["sentences"] for example in widget)
    assert not any("Represent the" in sentence for example in widget for sentence in example["sentences"])

    # The loss table shows the override: one row per retrieval setting, naming its tasks.
    body = card["text"]
    assert "| retrieval (wikiqa) | wikiqa | `MultiPositiveInfoNCELoss` |" in body
    assert "| retrieval (trecqa) | trecqa | `MultiPositiveInfoNCELoss` |" in body
    assert "| sts | stsb | `CoDiEmbSTSLoss` |" in body
    wikiqa_row = next(line for line in body.splitlines() if line.startswith("| retrieval (wikiqa)"))
    trecqa_row = next(line for line in body.splitlines() if line.startswith("| retrieval (trecqa)"))
    assert '"in_batch_negatives": false' in wikiqa_row and '"in_batch_negatives": true' in trecqa_row
    assert_no_machine_paths(outcome.model_dir, tmp_path, unified_dir, tiny_model_path)


def test_lora_adapter(unified_dir: Path, tiny_qwen2_path: str, tmp_path: Path) -> None:
    raw = _recipe(unified_dir, tiny_qwen2_path, tmp_path / "adapter", model=DECODER, peft=_lora(["q_proj", "v_proj"]))
    outcome = _train(raw)
    assert (outcome.model_dir / "adapter_model.safetensors").is_file()
    assert_same_embeddings(outcome.model_dir, outcome.model)
    card = reload("card", outcome.model_dir / "README.md")
    assert card["data"]["base_model"] == "org/tiny-base" and card["data"]["base_model_relation"] == "adapter"
    assert_hub_metadata(card["data"])
    assert_no_machine_paths(outcome.model_dir, tmp_path, unified_dir, tiny_qwen2_path)


def test_lora_merged_by_the_recipe(unified_dir: Path, tiny_qwen2_path: str, tmp_path: Path) -> None:
    lora = _lora(["q_proj", "v_proj"], merge_adapter=True)
    outcome = _train(_recipe(unified_dir, tiny_qwen2_path, tmp_path / "merged", model=DECODER, peft=lora))
    assert (outcome.model_dir / "model.safetensors").is_file()
    assert not (outcome.model_dir / "adapter_config.json").exists()
    assert_same_embeddings(outcome.model_dir, outcome.model)
    card = reload("card", outcome.model_dir / "README.md")
    assert card["data"]["base_model"] == "org/tiny-base" and "base_model_relation" not in card["data"]
    assert_hub_metadata(card["data"])
    assert_no_machine_paths(outcome.model_dir, tmp_path, unified_dir, tiny_qwen2_path)


@pytest.mark.parametrize("family", ["qwen2", "bert"])
def test_lora_merged_from_an_adapter_folder(
    family: str, unified_dir: Path, tiny_qwen2_path: str, tiny_model_path: str, tmp_path: Path
) -> None:
    """``merge_adapter`` on a model loaded from an adapter folder (transformers 5 keeps PEFT's key renaming
    on such a model: saved without care, every weight is written as ``base_model.model.*``)."""
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.backbones import merge_adapter

    if family == "qwen2":
        raw = _recipe(unified_dir, tiny_qwen2_path, tmp_path / "adapter", model=DECODER, peft=_lora(["q_proj"]))
    else:
        raw = _recipe(unified_dir, tiny_model_path, tmp_path / "adapter", peft=_lora(["query", "value"]))
    adapter_dir = _train(raw).model_dir
    model = SentenceTransformer(str(adapter_dir), device="cpu")
    with_adapter = encode(model)
    merge_adapter(model)
    merged_dir = tmp_path / "merged"
    model.save(str(merged_dir))
    assert not (merged_dir / "adapter_config.json").exists()
    assert_same_embeddings(merged_dir, with_adapter)
    card = reload("card", merged_dir / "README.md")
    assert card["data"]["base_model"] == "org/tiny-base" and "base_model_relation" not in card["data"]
    assert_hub_metadata(card["data"])


def test_written_files_name_local_paths_by_hub_id_or_folder_name(minilm_path: str, tmp_path: Path) -> None:
    from hf_unified_embed.locations import public_name, without_local_paths

    snapshot = tmp_path / "hub" / "models--org--cached" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (tmp_path / "runs" / "ir-leaning").mkdir(parents=True)
    assert public_name(minilm_path) == "sentence-transformers/all-MiniLM-L6-v2"  # the packaged copy is that model
    assert public_name(snapshot) == "org/cached"
    assert public_name(tmp_path / "runs" / "ir-leaning") == "ir-leaning"
    assert public_name("org/model") == "org/model"
    settings = {
        "output_dir": str(tmp_path / "runs" / "ir-leaning"),
        "nested": [{"path": f"{tmp_path}/runs/../runs/ir-leaning"}],
        "optim": "adamw_torch",
        "hub_model_id": "org/model",
        "url": "https://huggingface.co/org/model",
    }
    assert without_local_paths(settings) == {
        "output_dir": "ir-leaning",
        "nested": [{"path": "ir-leaning"}],
        "optim": "adamw_torch",
        "hub_model_id": "org/model",
        "url": "https://huggingface.co/org/model",
    }
