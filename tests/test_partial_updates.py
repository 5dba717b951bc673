"""Which weights move: ``model.freeze_layers``, ``model.layerwise_lr_decay`` and LoRA on an encoder, as recipe keys.

A frozen weight is bit-equal after training (read back from the saved folder in a fresh process); each weight's
optimizer learning rate is the decay formula's, computed here from its name alone; a LoRA run on a BERT encoder
with ``merge_adapter`` reloads as a plain folder with the trained embeddings; the keys are refused before any data
loads when they cannot do what they say.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments

from hf_unified_embed.errors import RecipeError
from hf_unified_embed.losses import CoDiEmbSTSLoss
from hf_unified_embed.recipe import recipe_from_dict, train_from_recipe
from hf_unified_embed.recipe.preflight import preflight
from hf_unified_embed.training.partial_updates import freeze_lower_layers, layerwise_lr_mapping, model_depths
from tests._roundtrip import TEXTS, reload
from tests._training_helpers import unified_dataset, unified_row


@pytest.fixture(scope="module")
def unified_dir(sample_unified_dir: Path) -> Path:
    return sample_unified_dir


def _recipe(unified_dir: Path, base: str, output: Path, **extra: object) -> dict:
    recipe = {
        "base_model": base,
        "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa"], "max_rows_per_task": 24},
        "losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss"}, "sts": "CoDiEmbSTSLoss"},
        "negatives_per_query": 1,
        "training_args": {"max_steps": 3, "per_device_train_batch_size": 4, "learning_rate": 1e-3},
        "output_dir": str(output),
    }
    recipe.update(extra)
    return recipe


def _weights(folder: Path) -> dict[str, np.ndarray]:
    return load_file(str(folder / "model.safetensors"))


def _expected_depth(name: str, layers: int) -> int:
    """An independent reading of BERT's names: embeddings 0, ``encoder.layer.i`` at i + 1, the rest on top."""
    if ".embeddings." in f".{name}":
        return 0
    match = re.search(r"encoder\.layer\.(\d+)\.", name)
    return int(match[1]) + 1 if match else layers + 1


def test_frozen_layers_are_bit_equal_after_training_and_the_rest_moved(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    out = tmp_path / "model"
    train_from_recipe(recipe_from_dict(_recipe(unified_dir, tiny_model_path, out, model={"freeze_layers": 1})))
    before, after = _weights(Path(tiny_model_path)), _weights(out)
    assert before.keys() == after.keys()
    layers = 2
    frozen = [name for name in before if _expected_depth(name, layers) <= 1]
    moved = [name for name in before if _expected_depth(name, layers) == 2 and name.endswith("weight")]
    assert frozen and moved
    for name in frozen:
        assert np.array_equal(before[name], after[name]), f"{name} is frozen but changed"
    assert all(not np.array_equal(before[name], after[name]) for name in moved), "the top layer did not train"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(decay=st.floats(0.05, 1.0), learning_rate=st.floats(1e-6, 1e-2), frozen=st.sampled_from([None, 0, 1]))
def test_each_weight_trains_at_the_decayed_rate_of_its_depth(
    tiny_model_path: str, tmp_path: Path, decay: float, learning_rate: float, frozen: int | None
) -> None:
    model = SentenceTransformer(tiny_model_path, device="cpu")
    if frozen is not None:
        freeze_lower_layers(model, frozen)
    args = SentenceTransformerTrainingArguments(
        str(tmp_path / "out"),
        learning_rate=learning_rate,
        learning_rate_mapping=layerwise_lr_mapping(model, learning_rate, decay),
        report_to="none",
        use_cpu=True,
    )
    rows = [unified_row("sts", f"q {i}", [f"d {i}"], [], task_type="sts", positive_scores=[0.5]) for i in range(4)]
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=unified_dataset(rows).select_columns(["query"]),
        loss=CoDiEmbSTSLoss(model),
    )
    optimizer = trainer.create_optimizer()
    rate = {id(p): group["lr"] for group in optimizer.param_groups for p in group["params"]}
    layers = model_depths(model).layers
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        expected = learning_rate * decay ** (layers + 1 - _expected_depth(name, layers))
        assert rate[id(parameter)] == pytest.approx(expected, rel=1e-9), name


def test_freezing_names_what_it_froze_and_refuses_every_layer(tiny_model_path: str) -> None:
    model = SentenceTransformer(tiny_model_path, device="cpu")
    frozen = freeze_lower_layers(model, 0)
    assert frozen and all(".embeddings." in name for name in frozen)
    with pytest.raises(ValueError, match="from 0 to 1"):
        freeze_lower_layers(model, 2)
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        layerwise_lr_mapping(model, 1e-3, 0.0)


@pytest.mark.parametrize(
    ("model", "extra", "message"),
    [
        ({"freeze_layers": 2}, {}, "freezes every layer of the base model, which has 2"),
        ({"freeze_layers": -1}, {}, "freeze_layers must be an integer >= 0"),
        ({"freeze_layers": True}, {}, "'model.freeze_layers': input should be an integer"),
        ({"layerwise_lr_decay": 1.5}, {}, r"layerwise_lr_decay must be a number in \(0, 1\]"),
        ({"freeze_layers": 1}, {"peft": {"r": 4}}, "with peft the base weights stay frozen"),
        (
            {"layerwise_lr_decay": 0.8},
            {"training_args": {"max_steps": 1, "learning_rate_mapping": {"pooler": 1e-3}}},
            "give one of the two",
        ),
    ],
)
def test_the_keys_are_refused_before_any_data_loads(
    tiny_model_path: str, tmp_path: Path, model: dict, extra: dict, message: str
) -> None:
    # The data folder is empty: the refusal comes before anything reads it.
    (tmp_path / "data").mkdir()
    raw = _recipe(tmp_path / "data", tiny_model_path, tmp_path / "out", model=model, **extra)
    with pytest.raises((RecipeError, ValueError), match=message):
        preflight(recipe_from_dict(raw))


def test_lora_on_a_bert_encoder_merges_into_a_plain_folder_with_the_trained_embeddings(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    out = tmp_path / "model"
    outcome = train_from_recipe(
        recipe_from_dict(_recipe(unified_dir, tiny_model_path, out, peft={"r": 4, "merge_adapter": True}))
    )
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    reloaded = np.asarray(reload("embeddings", out))  # a fresh process, plain sentence-transformers
    base = SentenceTransformer(tiny_model_path, device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert not np.allclose(reloaded, base, atol=1e-5), "the LoRA update was lost in the merge"
    assert outcome.model_dir == out
