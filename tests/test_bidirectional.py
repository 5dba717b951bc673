"""Bidirectional decoders (``model.attention``): the mechanism against an independent reference, and every artifact.

* the causal mask is gone exactly from ``first_bidirectional_layer`` on, with eager and sdpa attention;
* hidden states equal a float64 transcription of the layers from their weights (RMSNorm, rotary, grouped-
  query attention without the causal mask from the start layer on, MLP) on Qwen2, Llama, Qwen3, Mistral;
* left and right padding give the same mean-pooled embeddings;
* LoRA training through the recipe, saved as an adapter and merged, reloads in a fresh process with the
  embeddings of the trained model (and a plain load without ``trust_remote_code`` fails, never causal);
  full models are saved self-contained (remote code + ``auto_map``), adapters name the module class;
* the recipe's preflight refuses the option for an encoder or an unsupported family: one line, exit 2.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.errors import InputError, RecipeError
from hf_unified_embed.training.attention import (
    AttentionSetting,
    apply_attention,
    current_attention,
    recorded_attention,
)
from hf_unified_embed.training.backbones import ModelConfig, build_model, merge_adapter
from hf_unified_embed.training.bidirectional_transformer import (
    CLASS_REF,
    TRANSFORMER_REF,
    BidirectionalTransformer,
    bidirectional_adapter_problem,
    load_sentence_transformer,
    needs_trust_remote_code,
)

REPO = Path(__file__).resolve().parent.parent
TEXTS = [
    "what is the capital of france",
    "Paris is the capital and most populous city of France.",
    "A man is playing a guitar.",
    "who",
]
SETTINGS = {
    "causal": AttentionSetting(),
    "bidirectional": AttentionSetting("bidirectional", 0),
    "from layer 2": AttentionSetting("bidirectional", 2),
}


def _config(setting: AttentionSetting, **extra: Any) -> ModelConfig:
    first = setting.first_bidirectional_layer or None
    return ModelConfig(attention=setting.attention, first_bidirectional_layer=first, **extra)


def _tiny_random(family: str, folder: Path) -> str:
    """A random Qwen3 or Mistral (4 layers, grouped-query attention) without a tokenizer: ids are enough here."""
    from transformers import MistralConfig, MistralModel, Qwen3Config, Qwen3Model

    torch.manual_seed(1)
    common = dict(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    model = (
        Qwen3Model(Qwen3Config(head_dim=8, **common)) if family == "qwen3" else MistralModel(MistralConfig(**common))
    )
    model.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def decoders(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("decoders")
    return {
        "qwen2": str(request.getfixturevalue("tiny_qwen2_path")),
        "llama": str(request.getfixturevalue("tiny_llama_path")),
        "qwen3": _tiny_random("qwen3", folder / "qwen3"),
        "mistral": _tiny_random("mistral", folder / "mistral"),
    }


def _transformer(path: str, setting: AttentionSetting, implementation: str) -> Any:
    from transformers import AutoModel

    model = AutoModel.from_pretrained(path, attn_implementation=implementation).eval()
    apply_attention(model, setting)
    return model


def _ids(length: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, 90, (length,), generator=generator)


# ---------------------------------------------------------------- the mechanism


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize("family", ["qwen2", "llama", "qwen3", "mistral"])
def test_a_later_token_reaches_earlier_ones_exactly_from_the_first_bidirectional_layer(
    decoders: dict[str, str], family: str, name: str, implementation: str
) -> None:
    setting = SETTINGS[name]
    model = _transformer(decoders[family], setting, implementation)
    ids = _ids(7, 0)
    changed = ids.clone()
    changed[-1] = (ids[-1] + 1) % 90 + 3
    with torch.no_grad():
        before = model(input_ids=ids[None], output_hidden_states=True).hidden_states
        after = model(input_ids=changed[None], output_hidden_states=True).hidden_states
    first = setting.first_bidirectional_layer if setting.bidirectional else math.inf
    for index in range(1, len(before)):  # hidden_states[i] is the output of layer i - 1 (the last one normed)
        moved = not torch.allclose(before[index][0, :-1], after[index][0, :-1], atol=0, rtol=0)
        assert moved == (index - 1 >= first), f"output of layer {index - 1}: earlier tokens moved={moved}"
    assert current_attention(model) == setting


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def reference_hidden_states(model: Any, ids: torch.Tensor, first_bidirectional_layer: float) -> torch.Tensor:
    """The last hidden state of one unpadded sequence, transcribed from the layer weights in float64.

    Layers before ``first_bidirectional_layer`` keep the causal mask; the others attend to every token.
    """
    config = model.config
    weights = {name: tensor.detach().double() for name, tensor in model.state_dict().items()}
    eps = config.rms_norm_eps
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    length = len(ids)
    inverse = 1.0 / config.rope_parameters["rope_theta"] ** (
        torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
    )
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inverse[None, :]
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    x = weights["embed_tokens.weight"][ids]
    for layer in range(config.num_hidden_layers):
        w = {name.split(f"layers.{layer}.", 1)[1]: t for name, t in weights.items() if f"layers.{layer}." in name}
        h = _rms(x, w["input_layernorm.weight"], eps)
        q = F.linear(h, w["self_attn.q_proj.weight"], w.get("self_attn.q_proj.bias")).view(length, heads, head_dim)
        k = F.linear(h, w["self_attn.k_proj.weight"], w.get("self_attn.k_proj.bias")).view(length, kv_heads, head_dim)
        v = F.linear(h, w["self_attn.v_proj.weight"], w.get("self_attn.v_proj.bias")).view(length, kv_heads, head_dim)
        if "self_attn.q_norm.weight" in w:  # Qwen3 normalises queries and keys per head
            q, k = _rms(q, w["self_attn.q_norm.weight"], eps), _rms(k, w["self_attn.k_norm.weight"], eps)
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # (heads, length, head_dim)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        k, v = k.repeat_interleave(heads // kv_heads, 0), v.repeat_interleave(heads // kv_heads, 0)
        scores = q @ k.transpose(1, 2) / math.sqrt(head_dim)
        if layer < first_bidirectional_layer:
            scores = scores.masked_fill(~causal, -math.inf)
        attended = (scores.softmax(-1) @ v).transpose(0, 1).reshape(length, heads * head_dim)
        x = x + F.linear(attended, w["self_attn.o_proj.weight"], w.get("self_attn.o_proj.bias"))
        h = _rms(x, w["post_attention_layernorm.weight"], eps)
        x = x + F.linear(
            F.silu(F.linear(h, w["mlp.gate_proj.weight"])) * F.linear(h, w["mlp.up_proj.weight"]),
            w["mlp.down_proj.weight"],
        )
    return _rms(x, weights["norm.weight"], eps)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize("family", ["qwen2", "llama", "qwen3", "mistral"])
@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_hidden_states_equal_a_transcription_of_the_layers(
    decoders: dict[str, str], family: str, name: str, implementation: str, padding_side: str
) -> None:
    """A padded batch of three lengths, every real token against the float64 transcription, to 1e-5."""
    setting = SETTINGS[name]
    model = _transformer(decoders[family], setting, implementation)
    sequences = [_ids(length, seed) for seed, length in enumerate((9, 5, 2))]
    width = max(len(ids) for ids in sequences)
    batch = torch.zeros(len(sequences), width, dtype=torch.long)
    mask = torch.zeros_like(batch)
    for row, ids in enumerate(sequences):
        span = slice(width - len(ids), width) if padding_side == "left" else slice(0, len(ids))
        batch[row, span], mask[row, span] = ids, 1
    with torch.no_grad():
        hidden = model(input_ids=batch, attention_mask=mask).last_hidden_state
    first = setting.first_bidirectional_layer if setting.bidirectional else math.inf
    for row, ids in enumerate(sequences):
        expected = reference_hidden_states(model, ids, first)
        torch.testing.assert_close(hidden[row][mask[row].bool()].double(), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_sentence_transformers_runs_the_setting(decoders: dict[str, str], family: str, name: str) -> None:
    """sentence-transformers calls the model's ``forward`` itself (no model-level hooks): its token embeddings
    of a left-padded batch are the transcription's too."""
    setting = SETTINGS[name]
    model = build_model(decoders[family], _config(setting, padding_side="left", pooling="mean")).eval()
    features = model.preprocess(TEXTS)
    with torch.no_grad():
        tokens = model(features)["token_embeddings"]
    first = setting.first_bidirectional_layer if setting.bidirectional else math.inf
    for row in range(len(TEXTS)):
        real = features["attention_mask"][row].bool()
        expected = reference_hidden_states(model[0].auto_model, features["input_ids"][row][real], first)
        torch.testing.assert_close(tokens[row][real].double(), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["bidirectional", "from layer 2"])
@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_left_and_right_padding_give_the_same_mean_pooled_embeddings(
    decoders: dict[str, str], family: str, name: str
) -> None:
    setting = SETTINGS[name]
    encoded = {}
    for side in ("left", "right"):
        model = build_model(decoders[family], _config(setting, padding_side=side)).eval()
        assert model[1].pooling_mode == "mean", "bidirectional attention pools the mean by default"
        encoded[side] = model.encode(TEXTS, convert_to_tensor=True, batch_size=len(TEXTS))
    difference = (encoded["left"] - encoded["right"]).abs().max().item()
    assert difference <= 5e-7, difference


def test_gradient_checkpointing_gives_the_same_gradients_from_a_start_layer(decoders: dict[str, str]) -> None:
    """The layer hook sees the masks of its own call in the backward recompute too."""

    def gradients(checkpointing: bool) -> dict[str, torch.Tensor]:
        model = build_model(
            decoders["qwen2"],
            _config(SETTINGS["from layer 2"], gradient_checkpointing=checkpointing, padding_side="left"),
        )
        model.train()
        # Two forward passes of different padding before one backward: a recompute must use its own call's masks.
        loss = sum(model(model.preprocess(texts))["sentence_embedding"].pow(2).sum() for texts in (TEXTS, TEXTS[:2]))
        loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    plain, checkpointed = gradients(False), gradients(True)
    assert plain.keys() == checkpointed.keys() and plain
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- configuration, recording, loading


def test_pooling_follows_the_attention_unless_set() -> None:
    assert ModelConfig(attention="bidirectional").resolved_pooling == "mean"
    assert not ModelConfig(attention="bidirectional").wants_eos
    causal = ModelConfig(attention="causal")
    assert causal.resolved_pooling == "lasttoken" and causal.wants_eos
    assert ModelConfig(attention="bidirectional", pooling="lasttoken").resolved_pooling == "lasttoken"
    assert ModelConfig().resolved_pooling is None, "no attention asked: the base model's pooling"
    with pytest.raises(ValueError, match="first_bidirectional_layer needs attention: bidirectional"):
        ModelConfig(first_bidirectional_layer=2)
    with pytest.raises(ValueError, match="integer >= 0"):
        ModelConfig(attention="bidirectional", first_bidirectional_layer=-1)
    with pytest.raises(ValueError, match="attention must be one of"):
        ModelConfig(attention="full")


@pytest.mark.parametrize("name", ["bidirectional", "from layer 2"])
def test_a_transformers_folder_that_records_bidirectional_attention_is_never_loaded_causal(
    decoders: dict[str, str], name: str, tmp_path: Path
) -> None:
    """A merged or exported transformers folder: ``build_model`` re-applies what its ``config.json`` records."""
    setting = SETTINGS[name]
    model = build_model(decoders["qwen2"], _config(setting))
    model[0].auto_model.save_pretrained(tmp_path / "hf")
    model.tokenizer.save_pretrained(tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["model_type"], config["first_bidirectional_layer"]) == (
        "bidirectional_qwen2",
        setting.first_bidirectional_layer,
    )
    assert config.get("is_causal", True) is (setting.first_bidirectional_layer != 0), "transformers' flag for layer 0"
    reloaded = build_model(str(tmp_path / "hf"), ModelConfig(pooling="mean"))
    assert isinstance(reloaded[0], BidirectionalTransformer)
    assert current_attention(reloaded[0].auto_model) == setting
    torch.testing.assert_close(
        reloaded.encode(TEXTS, convert_to_tensor=True), model.encode(TEXTS, convert_to_tensor=True)
    )
    # ``attention: causal`` is the one way to switch it off again; the module is then sentence-transformers' own.
    causal = build_model(str(tmp_path / "hf"), ModelConfig(attention="causal", pooling="mean"))
    assert type(causal[0]).__name__ == "Transformer" and current_attention(causal[0].auto_model) == SETTINGS["causal"]
    assert recorded_attention(causal[0].auto_model.config) is None
    assert type(causal[0].auto_model.config).__name__ == "Qwen2Config", "back to the family's own config"


def test_a_folder_of_an_earlier_version_still_loads_with_its_setting(decoders: dict[str, str], tmp_path: Path) -> None:
    """Folders written before the self-contained form record the setting under ``hf_unified_embed_attention``."""
    model = build_model(decoders["llama"], _config(SETTINGS["from layer 2"]))
    model[0].auto_model.save_pretrained(tmp_path / "old")
    model.tokenizer.save_pretrained(tmp_path / "old")
    config = json.loads((tmp_path / "old" / "config.json").read_text())
    config.update(model_type="llama", architectures=["LlamaModel"])
    del config["first_bidirectional_layer"]
    config.pop("auto_map", None)
    config["hf_unified_embed_attention"] = SETTINGS["from layer 2"].to_dict()
    (tmp_path / "old" / "config.json").write_text(json.dumps(config))
    reloaded = build_model(str(tmp_path / "old"), ModelConfig(pooling="mean"))
    assert current_attention(reloaded[0].auto_model) == SETTINGS["from layer 2"]
    torch.testing.assert_close(
        reloaded.encode(TEXTS, convert_to_tensor=True), model.encode(TEXTS, convert_to_tensor=True)
    )


def _adapter_model(decoders: dict[str, str], setting: AttentionSetting) -> Any:
    from peft import LoraConfig

    model = build_model(decoders["llama"], _config(setting))
    model.add_adapter(LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    return model


def test_loading_refuses_a_setting_it_cannot_apply_in_one_line(decoders: dict[str, str], tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    _adapter_model(decoders, SETTINGS["from layer 2"]).save(str(folder))
    assert json.loads((folder / "modules.json").read_text())[0]["type"] == CLASS_REF
    module_config = folder / "sentence_bert_config.json"
    saved = json.loads(module_config.read_text())
    assert (saved["attention"], saved["first_bidirectional_layer"]) == ("bidirectional", 2)

    module_config.write_text(json.dumps({**saved, "first_bidirectional_layer": 9}))
    with pytest.raises(InputError) as error:
        load_sentence_transformer(str(folder))
    assert "\n" not in str(error.value) and "first_bidirectional_layer 9 is past the last layer" in str(error.value)

    (folder / "modeling_extra.py").write_text("raise SystemExit('never run')\n")
    with pytest.raises(InputError, match=r"loads only with trust_remote_code=True .* because it holds Python code"):
        load_sentence_transformer(str(folder))
    (folder / "modeling_extra.py").unlink()


def test_a_self_contained_folder_refuses_a_start_layer_past_the_model(
    decoders: dict[str, str], tmp_path: Path
) -> None:
    """An edited ``config.json`` never leaves the model causal: the remote code itself refuses the layer."""
    folder = tmp_path / "saved"
    build_model(decoders["qwen2"], _config(SETTINGS["from layer 2"])).save(str(folder))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "first_bidirectional_layer": 9}))
    with pytest.raises(ValueError, match=r"first_bidirectional_layer must be a layer of this 4-layer model .* got 9"):
        load_sentence_transformer(str(folder))


@pytest.mark.parametrize("name", ["bidirectional", "from layer 2"])
def test_a_full_model_saves_self_contained_and_an_adapter_names_the_module_class(
    decoders: dict[str, str], tmp_path: Path, name: str
) -> None:
    from hf_unified_embed.training.remote_code import REMOTE_CODE_DIR

    setting = SETTINGS[name]
    model = _adapter_model(decoders, setting)
    model.save(str(tmp_path / "adapter"))
    assert json.loads((tmp_path / "adapter" / "modules.json").read_text())[0]["type"] == CLASS_REF
    problem = bidirectional_adapter_problem(tmp_path / "adapter")
    assert problem is not None and "\n" not in problem and "peft.merge_adapter: true" in problem
    merge_adapter(model)
    model.save(str(tmp_path / "merged"))
    folder = tmp_path / "merged"
    assert json.loads((folder / "modules.json").read_text())[0]["type"] == TRANSFORMER_REF
    config = json.loads((folder / "config.json").read_text())
    assert (
        config["model_type"] == "bidirectional_llama"
        and config["first_bidirectional_layer"] == setting.first_bidirectional_layer
    )
    assert config["auto_map"] == {
        "AutoConfig": "modeling_bidirectional.BidirectionalLlamaConfig",
        "AutoModel": "modeling_bidirectional.BidirectionalLlamaModel",
    }
    code = (folder / "modeling_bidirectional.py").read_text()
    assert code == (REMOTE_CODE_DIR / "modeling_bidirectional.py").read_text()
    imported = {line.split()[1].split(".")[0] for line in code.splitlines() if line.startswith(("import ", "from "))}
    assert imported == {"__future__", "typing", "torch", "transformers"}, imported
    assert "attention" not in json.loads((folder / "sentence_bert_config.json").read_text())
    assert bidirectional_adapter_problem(folder) is None and needs_trust_remote_code(folder)
    assert not needs_trust_remote_code(tmp_path / "adapter")
    # Saved again after that, in memory it is still bidirectional and saves the same form.
    assert current_attention(model[0].auto_model) == setting
    model.save(str(tmp_path / "again"))
    assert json.loads((tmp_path / "again" / "config.json").read_text()) == config


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(family=st.sampled_from(["qwen2", "llama", "qwen3", "mistral"]), first=st.integers(-1, 5))
def test_any_start_layer_saves_and_reloads_as_it_was_or_is_refused(
    decoders: dict[str, str], tmp_path_factory: pytest.TempPathFactory, family: str, first: int
) -> None:
    """Whatever start layer a user asks for: a layer of the model round-trips through ``config.json`` and the
    Auto classes with the same hidden states; anything else is refused, never run causal."""
    from transformers import AutoModel

    from hf_unified_embed.training.attention import register_bidirectional_classes

    register_bidirectional_classes()
    model = AutoModel.from_pretrained(decoders[family]).eval()
    if not 0 <= first < 4:
        with pytest.raises(ValueError, match="first_bidirectional_layer"):
            apply_attention(model, AttentionSetting("bidirectional", first))
        return
    setting = AttentionSetting("bidirectional", first)
    apply_attention(model, setting)
    folder = tmp_path_factory.mktemp("any-layer")
    model.save_pretrained(folder)
    reloaded = AutoModel.from_pretrained(folder).eval()
    assert current_attention(reloaded) == setting and recorded_attention(reloaded.config) == setting
    ids = _ids(6, first)[None]
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).last_hidden_state, model(input_ids=ids).last_hidden_state)


def test_the_package_knows_the_families_the_remote_code_has() -> None:
    from hf_unified_embed.training import attention
    from hf_unified_embed.training.attention import BIDIRECTIONAL_MODEL_TYPES
    from hf_unified_embed.training.remote_code.modeling_bidirectional import FAMILIES, MODEL_TYPE_PREFIX

    assert set(FAMILIES) == set(BIDIRECTIONAL_MODEL_TYPES) and attention.MODEL_TYPE_PREFIX == MODEL_TYPE_PREFIX


# ---------------------------------------------------------------- training and every artifact, in a fresh process


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hf_unified_embed.data import build_unified, save_unified

    return save_unified(
        build_unified(REPO / "examples/recipes/sample.yaml", split="train"), tmp_path_factory.mktemp("u") / "data"
    )


def _recipe(unified_dir: Path, base: str, out: Path, model: dict[str, Any], **peft: Any) -> dict[str, Any]:
    return {
        "base_model": base,
        "base_model_id": "org/tiny-base",
        "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa"], "max_rows_per_task": 16},
        "losses": {"retrieval": "MultiPositiveInfoNCELoss", "sts": "CoDiEmbSTSLoss"},
        "negatives_per_query": 1,
        "training_args": {"max_steps": 2, "per_device_train_batch_size": 4, "learning_rate": 1e-2},
        "model": model,
        "peft": {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], **peft},
        "output_dir": str(out),
    }


_RELOAD = """
import json, sys
from sentence_transformers import SentenceTransformer
texts, trust, results = json.loads(sys.argv[1]), sys.argv[2] == "trust", {}
for folder in sys.argv[3:]:
    try:
        model = SentenceTransformer(folder, device="cpu", trust_remote_code=trust)
        results[folder] = model.encode(texts).astype("float64").tolist()
    except Exception as error:
        results[folder] = f"{type(error).__name__}: {error}"
print(json.dumps(results))
"""


def fresh_process_embeddings(folders: list[Path], *, trust: bool) -> dict[str, Any]:
    """What ``SentenceTransformer(folder[, trust_remote_code=True])`` encodes in a new interpreter, per folder."""
    from _processes import Expected, failure, run

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, "-c", _RELOAD, json.dumps(TEXTS), "trust" if trust else "plain", *map(str, folders)]
    completed = run(command, expected=Expected(10, steps=len(folders), step_s=1), env=env)
    assert completed.returncode == 0, failure(completed)
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def _encode(model: Any) -> torch.Tensor:
    with torch.no_grad():
        return model.encode(TEXTS, convert_to_tensor=True).double()


def _assert_reloads(reloaded: Any, expected: torch.Tensor, folder: Path) -> None:
    assert not isinstance(reloaded, str), f"{folder}: {reloaded}"
    difference = (torch.tensor(reloaded, dtype=torch.float64) - expected).abs().max().item()
    assert difference <= 1e-5, f"{folder} reloads {difference:.3g} away from the trained model"


@pytest.mark.parametrize("name", ["bidirectional", "from layer 2"])
def test_lora_through_the_recipe_reloads_bidirectional_in_a_fresh_process(
    unified_dir: Path, tiny_qwen2_path: str, tmp_path: Path, name: str
) -> None:
    from hf_unified_embed.merge import merge_models
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe

    setting = SETTINGS[name]
    section = {
        "attention": "bidirectional",
        "first_bidirectional_layer": setting.first_bidirectional_layer,
        "padding_side": "left",
    }
    adapter = train_from_recipe(recipe_from_dict(_recipe(unified_dir, tiny_qwen2_path, tmp_path / "adapter", section)))
    merged = train_from_recipe(
        recipe_from_dict(_recipe(unified_dir, tiny_qwen2_path, tmp_path / "merged", section, merge_adapter=True))
    )
    assert (tmp_path / "adapter" / "adapter_config.json").is_file() and (
        tmp_path / "merged" / "model.safetensors"
    ).is_file()
    for outcome, module_class in ((adapter, CLASS_REF), (merged, TRANSFORMER_REF)):
        assert current_attention(outcome.model[0].auto_model) == setting and outcome.model[1].pooling_mode == "mean"
        assert json.loads((outcome.model_dir / "modules.json").read_text())[0]["type"] == module_class
    merged_config = json.loads((tmp_path / "merged" / "config.json").read_text())
    assert merged_config["model_type"] == "bidirectional_qwen2"
    assert merged_config["first_bidirectional_layer"] == setting.first_bidirectional_layer
    expected = {"adapter": _encode(adapter.model), "merged": _encode(merged.model)}

    # What the reload is checked against is bidirectional: the same trained weights run causally encode otherwise.
    apply_attention(adapter.model[0].auto_model, SETTINGS["causal"])
    assert (_encode(adapter.model) - expected["adapter"]).abs().max() > 1e-3
    apply_attention(adapter.model[0].auto_model, setting)

    soup = merge_models([tmp_path / "adapter", tmp_path / "merged"], "soup", tmp_path / "soup", show_progress=False)
    expected["soup"] = _encode(load_sentence_transformer(str(soup)))
    folders = {key: tmp_path / key for key in ("adapter", "merged", "soup")}
    for key in ("merged", "soup"):  # full models: self-contained, whatever the merge's inputs were
        assert json.loads((folders[key] / "modules.json").read_text())[0]["type"] == TRANSFORMER_REF, key
        assert needs_trust_remote_code(folders[key]), key

    trusted = fresh_process_embeddings(list(folders.values()), trust=True)
    for key, folder in folders.items():
        _assert_reloads(trusted[str(folder)], expected[key], folder)
    plain = fresh_process_embeddings(list(folders.values()), trust=False)
    for folder in folders.values():
        # sentence-transformers refuses the module class, transformers the model_type: an error, never causal
        assert isinstance(plain[str(folder)], str) and "trust_remote_code=True" in plain[str(folder)], plain[
            str(folder)
        ]
    torch.testing.assert_close(expected["merged"], expected["adapter"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(expected["soup"], expected["adapter"], rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- the recipe refuses what cannot be applied


def _tiny_gpt2(folder: Path) -> str:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=97, bos_token_id=0, eos_token_id=0)
    GPT2Model(config).save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize(
    ("base", "section", "says"),
    [
        ("bert", {"attention": "bidirectional"}, "not for a 'bert' model"),
        ("gpt2", {"attention": "bidirectional"}, "not for a 'gpt2' model"),
        ("bert", {"attention": "causal"}, "not for a 'bert' model"),
        (
            "qwen2",
            {"attention": "bidirectional", "first_bidirectional_layer": 4},
            "first_bidirectional_layer 4 is past",
        ),
    ],
)
def test_preflight_refuses_what_cannot_be_applied_in_one_line_and_exit_2(
    unified_dir: Path,
    tiny_model_path: str,
    tiny_qwen2_path: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    base: str,
    section: dict[str, Any],
    says: str,
) -> None:
    from hf_unified_embed.cli.main import main

    path = {"bert": tiny_model_path, "qwen2": tiny_qwen2_path}.get(base) or _tiny_gpt2(tmp_path / "gpt2")
    recipe = tmp_path / "r.yaml"
    raw = _recipe(unified_dir, path, tmp_path / "out", section)
    del raw["peft"]
    recipe.write_text(yaml.safe_dump(raw))
    capsys.readouterr()
    assert main(["train", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {recipe}: model.attention: "), err
    assert says in err[0], err[0]
    assert not (tmp_path / "out").exists()
    # The Python API refuses it the same way.
    with pytest.raises(RecipeError, match=says):
        build_model(path, ModelConfig(**section))


def test_merge_refuses_inputs_whose_attention_differs(decoders: dict[str, str], tmp_path: Path) -> None:
    from hf_unified_embed.errors import MergeError
    from hf_unified_embed.merge import merge_models

    for name in SETTINGS:
        build_model(decoders["qwen2"], _config(SETTINGS[name])).save(str(tmp_path / name))
    with pytest.raises(MergeError, match=r"attention is 'bidirectional', expected 'bidirectional from layer 2'"):
        merge_models(
            [tmp_path / "from layer 2", tmp_path / "bidirectional"], "soup", tmp_path / "out", show_progress=False
        )
    with pytest.raises(MergeError, match=r"attention is 'bidirectional', expected 'causal'"):
        merge_models([tmp_path / "causal", tmp_path / "bidirectional"], "soup", tmp_path / "out", show_progress=False)


def test_the_commands_load_a_bidirectional_model_folder_as_training_saved_it(
    decoders: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``evaluate`` (the model and a ``--reference``), the curriculum teacher and hard-negative mining load through
    ``utils.model_loading.load_model``: a self-contained bidirectional folder loads there with its attention,
    without ``trust_remote_code`` (the package's own classes are registered)."""
    from hf_unified_embed.cli.main import main
    from hf_unified_embed.utils.model_loading import load_model
    from tests._evaluation_helpers import all_kinds_suite, write_evaluation_files

    folder = tmp_path / "bidirectional"
    model = build_model(decoders["qwen2"], _config(SETTINGS["bidirectional"], pooling="mean"))
    model.save(str(folder))
    loaded = load_model(folder, "--teacher", device="cpu", loader=load_sentence_transformer)
    assert current_attention(loaded[0].auto_model) == SETTINGS["bidirectional"]
    torch.testing.assert_close(
        loaded.encode(TEXTS, convert_to_tensor=True), model.encode(TEXTS, convert_to_tensor=True)
    )

    root = write_evaluation_files(tmp_path / "eval")
    suite = all_kinds_suite(root)
    # the reference of a forgetting entry loads through the same rule
    suite["evaluations"] = [
        suite["evaluations"][0],
        {
            "name": "forgetting",
            "kind": "forgetting",
            "source": "semeval-sts",
            "data_files": "sts/*.tsv",
            "evaluator": {"k": 3},
        },
    ]
    path = root / "suite.yaml"
    path.write_text(yaml.safe_dump(suite), encoding="utf-8")
    capsys.readouterr()
    assert main(["evaluate", str(folder), str(path), "--reference", str(folder), "--no-diagnostics"]) == 0, (
        capsys.readouterr().err
    )
    # the model against itself as its reference: nothing forgotten
    assert re.search(r"forgetting\s.*\b1\.0", capsys.readouterr().out)
