"""Decoder backbones (tiny random Qwen2 / Llama with a real tokenizer): pooling, padding, EOS, LoRA end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from sentence_transformers import SentenceTransformer

from hf_unified_embed.errors import IncompatibleStackError, RecipeError
from hf_unified_embed.training import exclude_instructions_from_pooling
from hf_unified_embed.training.backbones import ModelConfig, append_eos_token, build_model, merge_adapter
from hf_unified_embed.training.prompts import ends_on_token_boundary, prompts_from_unified

REPO = Path(__file__).resolve().parent.parent
INSTRUCTION = "Represent the question for retrieving answers: "
TEXTS = ["what is love", "who wrote the novel war and peace in the nineteenth century", "why"]


def prompt_for(tokenizer: Any, instruction: str = INSTRUCTION) -> str:
    """The prompt the training bridge makes of an instruction for this tokenizer."""
    from datasets import Dataset, DatasetDict

    from tests._training_helpers import unified_row

    row = unified_row("qa", "q", ["d"], query_instruction=instruction, document_instruction="")
    return prompts_from_unified(DatasetDict({"qa": Dataset.from_list([row])}), tokenizer)["qa"]["query"]


def _decoder(request: pytest.FixtureRequest, family: str) -> str:
    return str(request.getfixturevalue(f"tiny_{family}_path"))


def manual_embedding(model: Any, prompt: str, text: str, pooling: str) -> torch.Tensor:
    """One text alone (no padding): hidden states of the tokens from the first text character on."""
    tokenizer = model.tokenizer
    encoded = tokenizer(prompt + text, return_offsets_mapping=True, return_tensors="pt")
    offsets = encoded.pop("offset_mapping")[0].tolist()
    ids = encoded["input_ids"][0].tolist()
    special = set(tokenizer.all_special_ids)
    first_text = next(i for i, (start, _) in enumerate(offsets) if ids[i] not in special and start >= len(prompt))
    with torch.no_grad():
        hidden = model[0].auto_model(**encoded).last_hidden_state[0]
    if pooling == "lasttoken":
        return hidden[-1]
    return hidden[first_text:].mean(dim=0)


@pytest.mark.parametrize("family", ["qwen2", "llama"])
@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("pooling", ["mean", "lasttoken"])
def test_instruction_tokens_are_not_pooled_with_either_padding(
    request: pytest.FixtureRequest, family: str, padding_side: str, pooling: str
) -> None:
    model = build_model(_decoder(request, family), ModelConfig(pooling=pooling, padding_side=padding_side))
    exclude_instructions_from_pooling(model)
    model.eval()
    prompt = prompt_for(model.tokenizer)
    encoded = model.encode(TEXTS, prompt=prompt, convert_to_tensor=True, batch_size=len(TEXTS))
    assert model.tokenizer.padding_side == padding_side
    for text, vector in zip(TEXTS, encoded):
        expected = manual_embedding(model, prompt, text, pooling)
        torch.testing.assert_close(vector, expected, rtol=1e-4, atol=1e-5)
    if pooling == "lasttoken":  # the pooled token is the appended EOS
        assert model.tokenizer(TEXTS[0])["input_ids"][-1] == model.tokenizer.eos_token_id


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_append_eos_keeps_bos_and_survives_save_and_load(
    request: pytest.FixtureRequest, family: str, tmp_path: Path
) -> None:
    model = build_model(_decoder(request, family), ModelConfig(pooling="lasttoken"))
    tokenizer = model.tokenizer
    ids = tokenizer("hello world")["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id
    assert (ids[0] == tokenizer.bos_token_id) == (family == "llama")
    assert tokenizer.pad_token is not None, "Llama has no pad token; padding is masked, so EOS serves"
    append_eos_token(tokenizer)  # idempotent
    assert tokenizer("hello world")["input_ids"] == ids
    model.save(str(tmp_path / "saved"))
    reloaded = SentenceTransformer(str(tmp_path / "saved"))
    assert reloaded.tokenizer("hello world")["input_ids"] == ids
    torch.testing.assert_close(
        reloaded.encode(TEXTS, convert_to_tensor=True),
        model.encode(TEXTS, convert_to_tensor=True),
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_a_trailing_space_becomes_a_newline_where_the_tokenizer_joins_it(
    request: pytest.FixtureRequest, family: str
) -> None:
    """Byte-level BPE and SentencePiece join a trailing space to the next word: the prompt ends on a newline."""
    tokenizer = build_model(_decoder(request, family), None).tokenizer
    assert not ends_on_token_boundary(tokenizer, INSTRUCTION), "the pitfall this guards against"
    prompt = prompt_for(tokenizer)
    assert prompt == INSTRUCTION.rstrip() + "\n" and ends_on_token_boundary(tokenizer, prompt)
    assert prompt_for(None) == INSTRUCTION, "without a tokenizer the instruction is kept"


def test_wordpiece_prompts_are_unchanged(minilm_path: str) -> None:
    tokenizer = SentenceTransformer(minilm_path).tokenizer
    assert ends_on_token_boundary(tokenizer, INSTRUCTION) and prompt_for(tokenizer) == INSTRUCTION


def test_gradient_checkpointing_gives_the_same_gradients(tiny_qwen2_path: str) -> None:
    def gradients(checkpointing: bool) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        model = build_model(tiny_qwen2_path, ModelConfig(pooling="mean", gradient_checkpointing=checkpointing))
        model.train()
        features = model.preprocess(TEXTS)
        model(features)["sentence_embedding"].pow(2).sum().backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    plain, checkpointed = gradients(False), gradients(True)
    assert plain.keys() == checkpointed.keys() and plain
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=1e-4, atol=1e-6)


def test_mid_layer_infonce_on_a_decoder(tiny_llama_path: str) -> None:
    """CoDiEmb's intermediate-layer term reads hidden_states[n // 2] of a decoder, pooled like the final layer."""
    from hf_unified_embed.losses import CoDiEmbSTSLoss
    from hf_unified_embed.losses.common.hidden_states import embed_columns_with_layer

    model = build_model(tiny_llama_path, ModelConfig(pooling="mean", padding_side="left"))
    model.eval()
    columns = [model.preprocess(TEXTS), model.preprocess(list(reversed(TEXTS)))]
    with torch.no_grad():
        final, middle = embed_columns_with_layer(model, columns, None)
        encoded = model.preprocess(TEXTS)
        hidden = (
            model[0]
            .auto_model(
                input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"], output_hidden_states=True
            )
            .hidden_states
        )
        mask = encoded["attention_mask"].unsqueeze(-1).float()
        expected = (hidden[len(hidden) // 2] * mask).sum(1) / mask.sum(1)
    torch.testing.assert_close(middle[0], expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(final[0], model.encode(TEXTS, convert_to_tensor=True), rtol=1e-4, atol=1e-5)
    loss = CoDiEmbSTSLoss(model)
    parts = loss(columns, torch.tensor([0.9, 0.1, 0.5]))
    assert set(parts) == {"pearson", "rank_kl", "pro", "mid_layer_infonce"} and all(
        torch.isfinite(v) for v in parts.values()
    )


def test_merge_adapter_equals_the_adapter_model(tiny_qwen2_path: str) -> None:
    from peft import LoraConfig

    model = build_model(tiny_qwen2_path, ModelConfig(pooling="lasttoken"))
    model.add_adapter(LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    with torch.no_grad():
        with_adapter = model.encode(TEXTS, convert_to_tensor=True)
    merge_adapter(model)
    assert not any("lora" in name for name, _ in model.named_parameters())
    torch.testing.assert_close(model.encode(TEXTS, convert_to_tensor=True), with_adapter, rtol=1e-5, atol=1e-6)


def test_quantization_without_its_backend_is_a_recipe_error(monkeypatch: pytest.MonkeyPatch) -> None:
    config = ModelConfig(quantization="4bit")
    # Here: no bitsandbytes (and no CUDA device), so the package is named first, with the command that fixes it.
    with pytest.raises(
        IncompatibleStackError, match=r"r\.yaml: model.quantization '4bit' \(QLoRA\) needs bitsandbytes"
    ):
        config.check_environment("r.yaml")
    monkeypatch.setattr("hf_unified_embed.utils.stack.quantization_needs", list)  # as if bitsandbytes were installed
    with pytest.raises(RecipeError, match=r"r\.yaml: model.quantization '4bit' \(QLoRA\) needs a CUDA device"):
        config.check_environment("r.yaml")
    with pytest.raises(ValueError, match="pooling must be one of"):
        ModelConfig(pooling="first")


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hf_unified_embed.data import build_unified, save_unified

    return save_unified(
        build_unified(REPO / "examples/recipes/sample.yaml", split="train"), tmp_path_factory.mktemp("u") / "data"
    )


def _lora_recipe(unified_dir: Path, base: str, out: Path, target_modules: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "base_model": base,
        "base_model_id": "org/tiny-base",
        "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa"], "max_rows_per_task": 16},
        "losses": {"retrieval": "MultiPositiveInfoNCELoss", "sts": "CoDiEmbSTSLoss"},
        "negatives_per_query": 1,
        "training_args": {"max_steps": 2, "per_device_train_batch_size": 4, "learning_rate": 1e-2},
        "peft": {"r": 4, "lora_alpha": 8, "target_modules": target_modules},
        "output_dir": str(out),
        **extra,
    }


def test_lora_on_a_decoder_saves_an_adapter_or_a_merged_model(
    unified_dir: Path, tiny_qwen2_path: str, tmp_path: Path
) -> None:
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe

    model_section = {"pooling": "lasttoken", "padding_side": "left"}
    adapter_dir = tmp_path / "adapter"
    raw = _lora_recipe(unified_dir, tiny_qwen2_path, adapter_dir, ["q_proj", "v_proj"], model=model_section)
    train_from_recipe(recipe_from_dict(raw))
    files = {path.name for path in adapter_dir.iterdir()}
    assert {
        "adapter_config.json",
        "adapter_model.safetensors",
        "1_Pooling",
    } <= files and "model.safetensors" not in files
    card = ModelCard.load(adapter_dir / "README.md")
    assert card.data.base_model == "org/tiny-base" and card.data.base_model_relation == "adapter"
    adapter_model = SentenceTransformer(str(adapter_dir))
    base = build_model(tiny_qwen2_path, ModelConfig(pooling="lasttoken", padding_side="left"))
    assert not torch.allclose(
        adapter_model.encode(TEXTS, convert_to_tensor=True), base.encode(TEXTS, convert_to_tensor=True)
    )
    recipe_copy = yaml.safe_load((adapter_dir / "hf_unified_embed_recipe.yaml").read_text())
    assert not Path(recipe_copy["base_model"]).is_absolute(), "no machine path in the recipe copy"

    merged_dir = tmp_path / "merged"
    raw = _lora_recipe(unified_dir, tiny_qwen2_path, merged_dir, ["q_proj", "v_proj"], model=model_section)
    raw["peft"]["merge_adapter"] = True
    train_from_recipe(recipe_from_dict(raw))
    files = {path.name for path in merged_dir.iterdir()}
    assert "model.safetensors" in files and "adapter_config.json" not in files
    card = ModelCard.load(merged_dir / "README.md")
    assert card.data.base_model == "org/tiny-base" and getattr(card.data, "base_model_relation", None) is None
    merged = SentenceTransformer(str(merged_dir))
    torch.testing.assert_close(
        merged.encode(TEXTS, convert_to_tensor=True),
        adapter_model.encode(TEXTS, convert_to_tensor=True),
        rtol=1e-4,
        atol=1e-5,
    )

    # The merge tool takes the adapter as any input, the first (the reference layout) included.
    from hf_unified_embed.merge import merge_models

    souped = merge_models([adapter_dir, merged_dir], "soup", tmp_path / "soup", show_progress=False)
    assert (souped / "1_Pooling" / "config.json").is_file() and (souped / "model.safetensors").is_file()
    torch.testing.assert_close(
        SentenceTransformer(str(souped)).encode(TEXTS, convert_to_tensor=True),
        adapter_model.encode(TEXTS, convert_to_tensor=True),
        rtol=1e-4,
        atol=1e-5,
    )


def test_lora_on_an_encoder(unified_dir: Path, tiny_model_path: str, tmp_path: Path) -> None:
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe

    out = tmp_path / "adapter"
    train_from_recipe(recipe_from_dict(_lora_recipe(unified_dir, tiny_model_path, out, ["query", "value"])))
    assert (out / "adapter_config.json").is_file()
    assert SentenceTransformer(str(out)).encode(TEXTS).shape == (3, 32)


def test_push_of_an_adapter_names_the_hub_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    from hf_unified_embed.hub.publishing import push_folder

    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": str(tmp_path / "base"), "r": 4})
    )
    (folder / "README.md").write_text("---\nbase_model: org/tiny-base\nbase_model_relation: adapter\n---\n# adapter\n")
    sent: dict[str, Any] = {}

    def capture(**kwargs: Any) -> str:
        uploaded = Path(kwargs["folder_path"])
        sent["config"] = json.loads((uploaded / "adapter_config.json").read_text())
        sent["files"] = sorted(path.name for path in uploaded.iterdir())
        return "ok"

    monkeypatch.setattr(huggingface_hub, "create_repo", lambda *args, **kwargs: None)
    monkeypatch.setattr(huggingface_hub, "upload_folder", capture)
    push_folder(folder, "me/adapter")
    assert sent["config"]["base_model_name_or_path"] == "org/tiny-base"
    assert sent["files"] == ["README.md", "adapter_config.json"]
    local = json.loads((folder / "adapter_config.json").read_text())
    assert local["base_model_name_or_path"] == str(tmp_path / "base"), "the local folder keeps its loadable base path"


def test_training_keeps_cudnn_attention_off_and_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cuDNN SDPA kernel (NaN gradients with padding masks, pytorch#196678) is off only while training."""
    import torch

    from hf_unified_embed.training.backbones import without_cudnn_attention

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    with without_cudnn_attention():
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    with pytest.raises(RuntimeError), without_cudnn_attention():
        raise RuntimeError("a failed run restores the setting too")
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
