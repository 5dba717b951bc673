"""Every writer's artifact reloads as it was written: from disk, in a fresh process (``tests/_roundtrip.py``).

Trained models (full, LoRA adapter, adapter merged by the recipe or from an adapter folder), every merge
method's output, mined and curriculum datasets, and the cards of all of them: embeddings of fixed texts
to 1e-5, rows exactly, card metadata as ``huggingface_hub`` parses it with Hub ids only, and no path of
the machine in any file written.
"""

from __future__ import annotations

import json
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
    reload_all,
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
    from hf_unified_embed.recipe.run import train_from_recipe

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
    stsb = {
        "name": "stsb",
        "kind": "sts",
        "source": "stsb",
        "data_files": str(REPO / "examples/data/eval/stsb-dev.tsv"),
    }
    raw["evaluation"] = {"evaluations": [stsb], "max_rows": 32, "diagnostics": False}
    outcome = _train(raw)
    assert_same_embeddings(outcome.model_dir, outcome.model)
    card = reload("card", outcome.model_dir / "README.md")
    assert card["type"] == "ModelCard" and card["data"]["base_model"] == "org/tiny-base"
    assert "base_model_relation" not in card["data"]
    assert card["data"]["model-index"][0]["results"][0]["dataset"]["name"] == "stsb"
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

    from hf_unified_embed.training.backbones import merge_adapter

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
    from hf_unified_embed.utils.locations import public_name, without_local_paths

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


# --- merges ---------------------------------------------------------------------------------------------

#: The native methods and mergekit's passthrough: ``method → (number of fine-tunes, base given, parameters)``;
#: mergekit's other methods are ``MERGEKIT_CASES``. ``hierarchical`` takes fine-tunes 0 and 1 as specialists.
OTHER_CASES: dict[str, tuple[int, bool, dict[str, Any]]] = {
    "soup": (3, False, {"weights": [0.2, 0.3, 0.5]}),
    "task_arithmetic": (2, True, {"weights": [0.6, 0.4]}),
    "hierarchical": (2, True, {"ir_models": [0], "sts_models": [1]}),
    "passthrough": (1, False, {}),
}
BASE_ID = "org/tiny-base"


@pytest.fixture(scope="module")
def merge_family(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """A tiny random BERT with a Dense head (the base) and three noisy fine-tunes of it, carded as such."""
    import torch
    from _merge_helpers import fine_tunes
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense

    root = tmp_path_factory.mktemp("merge-family")
    torch.manual_seed(0)
    model = SentenceTransformer(tiny_model_path, device="cpu")
    model.append(Dense(32, 16))
    base = root / "base"
    model.save(str(base))
    (base / "README.md").write_text(f"---\nbase_model: {BASE_ID}\n---\n# a tiny base\n", encoding="utf-8")
    tuned = fine_tunes(base, root)
    return base, tuned


def _merge_cases() -> dict[str, tuple[int, bool, dict[str, Any]]]:
    from _merge_helpers import MERGEKIT_CASES

    return {**OTHER_CASES, **MERGEKIT_CASES}


def _merge_config(method: str, family: tuple[Path, list[Path]], output: Path) -> Any:
    from hf_unified_embed.merge.merge_config import MergeConfig

    base, tuned = family
    count, with_base, parameters = _merge_cases()[method]
    parameters = {**parameters, **({"base": base} if with_base else {})}
    if method == "hierarchical":
        parameters.update(ir_specialist=tuned[0], sts_specialist=tuned[1])
    return MergeConfig(models=list(tuned[:count]), method=method, output_dir=output, parameters=parameters)


def _merged_in_memory(config: Any, scratch: Path) -> Any:
    """The merged model without a file: the method's tensors (``MemorySink``) loaded into the reference model."""
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.merge.api import build_method, open_inputs, reference_input
    from hf_unified_embed.merge.candidate_scoring import load_weights
    from hf_unified_embed.merge.engine import MemorySink

    method = build_method(config)
    reference = reference_input(config, method)
    with open_inputs(method.input_paths(), reference, scratch) as opened:
        method.prepare(opened.checkpoints, opened.groups)
        sink = MemorySink(opened.reference)
        opened.stream(method, sink, precise=config.precise, show_progress=False)
        model = SentenceTransformer(str(reference), device="cpu")
        load_weights(model, sink.tensors, opened.reference.module_paths())
    return encode(model)


@pytest.fixture(scope="module")
def merged(merge_family: tuple[Path, list[Path]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every method's output: its folder, the embeddings in memory, and what one fresh process reloaded."""
    from hf_unified_embed.merge.api import run_merge

    root = tmp_path_factory.mktemp("merged")
    outputs = {}
    for method in _merge_cases():
        config = _merge_config(method, merge_family, root / method)
        in_memory = _merged_in_memory(config, root / f"scratch-{method}")
        outputs[method] = (run_merge(config, show_progress=False), in_memory)
    folders = [folder for folder, _ in outputs.values()]
    embeddings = reload_all("embeddings", folders)
    cards = reload_all("card", [folder / "README.md" for folder in folders])
    return {
        method: {"folder": folder, "in_memory": in_memory, "reloaded": reloaded, "card": card}
        for (method, (folder, in_memory)), reloaded, card in zip(outputs.items(), embeddings, cards)
    }


def test_every_merge_method_is_round_tripped() -> None:
    from hf_unified_embed.merge import available_merge_methods

    assert set(_merge_cases()) == set(available_merge_methods())


@pytest.mark.parametrize("method", sorted(_merge_cases()))
def test_merge_output(method: str, merged: dict[str, Any], merge_family: tuple[Path, list[Path]]) -> None:
    output = merged[method]
    assert_same_embeddings(output["folder"], output["in_memory"], output["reloaded"])
    metadata = output["card"]["data"]
    assert metadata["base_model"] == [BASE_ID] and metadata["base_model_relation"] == "merge"
    assert_hub_metadata(metadata)
    assert_no_machine_paths(output["folder"], merge_family[0].parent)


@pytest.mark.real_model
def test_merge_on_the_packaged_minilm_names_it_by_its_hub_id(minilm_path: str, tmp_path: Path) -> None:
    """A task-vector merge whose base is the packaged all-MiniLM-L6-v2: that model's Hub id, not its base's,
    and no path into the virtualenv in the recipe."""
    from _merge_helpers import noisy_copy

    from hf_unified_embed.merge import merge_models
    from hf_unified_embed.recipe import DEFAULT_BASE_MODEL_ID

    tuned = []
    for seed in range(2):
        path = noisy_copy(minilm_path, tmp_path / f"tuned-{seed}", seed, scale=0.001)
        # As a fine-tune's own card says: its base is all-MiniLM-L6-v2.
        (path / "README.md").write_text(f"---\nbase_model: {DEFAULT_BASE_MODEL_ID}\n---\n# fine-tune\n")
        tuned.append(path)
    out = merge_models(tuned, "task_arithmetic", tmp_path / "merged", base=minilm_path, show_progress=False)
    card = reload("card", out / "README.md")
    assert card["data"]["base_model"] == [DEFAULT_BASE_MODEL_ID]
    assert "nreimers" not in card["text"]
    assert f"base: {DEFAULT_BASE_MODEL_ID}" in card["text"]  # the recipe in the card body
    assert_hub_metadata(card["data"])
    assert_no_machine_paths(out, tmp_path, minilm_path)


# --- datasets -------------------------------------------------------------------------------------------


def test_built_dataset_and_its_card(tmp_path: Path) -> None:
    from hf_unified_embed.cli.main import main
    from hf_unified_embed.data import build_unified

    out = tmp_path / "built"
    assert main(["build", str(SAMPLE_RECIPE), "-o", str(out)]) == 0
    in_memory = {split: build_unified(SAMPLE_RECIPE, split=split) for split in ("train", "test")}
    assert_same_rows(out, in_memory)
    card = reload("card", out / "README.md")
    assert card["type"] == "DatasetCard"
    assert [config["config_name"] for config in card["data"]["configs"]][-1] == "all"
    assert card["data"]["source_notes"]["stsb"]["files"] == ["stsb-train.tsv"]
    assert_hub_metadata(card["data"])
    assert_no_machine_paths(out, tmp_path)


def test_mined_dataset_and_its_card(unified_dir: Path, tiny_model_path: str, tmp_path: Path) -> None:
    from hf_unified_embed.negatives import HardNegativeConfig, mine_negatives_folder

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"extra passage number {i} about nothing in particular" for i in range(40)))
    # The tiny random teacher scores positives barely above the rest: a small margin keeps some negatives.
    config = HardNegativeConfig(num_negatives=2, relative_margin=0.001, query_block=8, corpus_block=32)
    out, result = mine_negatives_folder(
        unified_dir, tmp_path / "mined", tiny_model_path, config, corpus=corpus, tasks=["wikiqa"]
    )
    assert sum(map(len, result.tasks["wikiqa"]["negatives"])) > 0
    assert_same_rows(out, {"train": result.tasks})
    card = reload("card", out / "README.md")
    notes = card["data"]["source_notes"]["wikiqa"]["hard_negatives"]
    assert notes["teacher"] == Path(tiny_model_path).name and notes["settings"]["corpus"] == "corpus.txt"
    assert_hub_metadata(card["data"])
    assert_no_machine_paths(out, tmp_path, unified_dir, tiny_model_path)


def test_curriculum_dataset_and_its_plan(unified_dir: Path, tiny_model_path: str, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.cli.main import main
    from hf_unified_embed.curriculum import plan_curriculum
    from hf_unified_embed.data import load_unified

    out = tmp_path / "curriculum"
    options = ["--iterations", "2000", "--n-samples", "8", "--batch-size", "16", "--seed", "3"]
    assert main(["curriculum", str(unified_dir), "--teacher", tiny_model_path, "-o", str(out), *options]) == 0
    # The same plan in memory, with the command's settings.
    teacher = SentenceTransformer(tiny_model_path, device="cpu")
    expected = plan_curriculum(teacher, load_unified(unified_dir), n_samples=8, iterations=2000, seed=3, batch_size=16)
    assert_same_rows(out, {"train": expected.tasks})
    plan = json.loads((out / "curriculum_plan.json").read_text(encoding="utf-8"))
    assert plan["order"] == expected.plan.order and plan["representation"]["teacher"] == Path(tiny_model_path).name
    card = reload("card", out / "README.md")
    assert_hub_metadata(card["data"])
    assert_no_machine_paths(out, tmp_path, unified_dir, tiny_model_path)
