"""Merge methods against direct state-dict computations on a tiny random BERT (with a Dense head)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from _merge_helpers import edited_copy, noisy_copy, read_weights
from safetensors.torch import save_file

from hf_unified_embed.merge import (
    LazyCheckpoint,
    MergeError,
    ShardedSafetensorsWriter,
    TensorInfo,
    fusion_weights,
    group_tensor_names,
    layer_group,
    merge_models,
    parse_size,
)


@pytest.fixture(scope="module")
def dense_model(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with a Dense head (2_Dense/ weights must be merged too)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense

    model = SentenceTransformer(tiny_model_path)
    torch.manual_seed(1)
    model.append(Dense(32, 16))
    path = tmp_path_factory.mktemp("dense") / "model"
    model.save(str(path))
    # An integer buffer as older checkpoints (MiniLM) store it: copied from the reference, never averaged.
    weights = read_weights(path)
    weights["embeddings.position_ids"] = torch.arange(128).unsqueeze(0)
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


@pytest.fixture(scope="module")
def noisy_models(dense_model: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("noisy")
    models = []
    for seed in range(3):
        path = noisy_copy(dense_model, root / f"m{seed}", seed)
        # The head changes too, so that merging it is visible.
        generator = torch.Generator().manual_seed(100 + seed)
        weights = read_weights(path / "2_Dense")
        noisy = {k: v + 0.01 * torch.randn(v.shape, generator=generator) for k, v in weights.items()}
        save_file(noisy, str(path / "2_Dense" / "model.safetensors"), metadata={"format": "pt"})
        models.append(path)
    return models


def all_weights(folder: Path) -> dict[str, torch.Tensor]:
    checkpoint = LazyCheckpoint(folder)
    return {name: checkpoint.get_tensor(name) for name in checkpoint.names}


def test_layer_groups_cover_blocks_embeddings_pooler_and_heads() -> None:
    assert layer_group("encoder.layer.11.attention.self.query.weight") == "encoder.layer.11"
    assert layer_group("model.layers.3.mlp.up_proj.weight") == "model.layers.3"
    assert layer_group("encoder.block.2.layer.0.SelfAttention.q.weight") == "encoder.block.2"
    assert layer_group("h.5.attn.c_attn.weight") == "h.5"
    assert layer_group("embeddings.LayerNorm.weight") == "embeddings"
    assert layer_group("model.norm.weight") == "final_norm"
    assert layer_group("pooler.dense.weight") == "pooler"
    assert layer_group("2_Dense/linear.weight") == "2_Dense"
    groups = group_tensor_names(
        ["2_Dense/linear.weight", "pooler.dense.bias", "encoder.layer.10.x", "encoder.layer.2.x", "embeddings.w"]
    )
    assert list(groups) == ["embeddings", "encoder.layer.2", "encoder.layer.10", "pooler", "2_Dense"]


def test_loader_includes_dense_head(dense_model: Path) -> None:
    checkpoint = LazyCheckpoint(dense_model)
    assert "2_Dense/linear.weight" in checkpoint
    assert checkpoint.info("2_Dense/linear.weight").shape == (16, 32)
    assert checkpoint.info("embeddings.position_ids").dtype == torch.int64


def test_soup_of_copies_is_bitwise_identical_when_precise(dense_model: Path, tmp_path: Path) -> None:
    copies = [edited_copy(dense_model, tmp_path / f"c{i}", lambda _, t: t) for i in range(3)]
    merged = merge_models(copies, "soup", tmp_path / "soup", precise=True, show_progress=False)
    fast = all_weights(merge_models(copies, "soup", tmp_path / "fast", show_progress=False))
    expected, result = all_weights(dense_model), all_weights(merged)
    assert expected.keys() == result.keys()
    for name in expected:
        assert expected[name].dtype == result[name].dtype
        assert torch.equal(expected[name], result[name]), name
        # float32 accumulation: (x/3 + x/3 + x/3) is x to within an ulp or two.
        torch.testing.assert_close(fast[name], expected[name], rtol=3e-7, atol=0)


def test_weighted_soup_equals_direct_computation(noisy_models: list[Path], tmp_path: Path) -> None:
    weights = [0.5, 0.3, 0.2]
    merged = all_weights(merge_models(noisy_models, "soup", tmp_path / "out", weights=weights, show_progress=False))
    inputs = [all_weights(path) for path in noisy_models]
    for name, tensor in merged.items():
        if not tensor.is_floating_point():
            assert torch.equal(tensor, inputs[0][name])  # copied from the reference, never averaged
            continue
        direct = sum(w * state[name].double() for w, state in zip(weights, inputs))
        torch.testing.assert_close(tensor, direct.float(), rtol=3e-7, atol=1e-8)


def test_normalize_rescales_weights(noisy_models: list[Path], tmp_path: Path) -> None:
    a = all_weights(
        merge_models(noisy_models[:2], "soup", tmp_path / "a", weights=[3, 1], normalize=True, show_progress=False)
    )
    b = all_weights(merge_models(noisy_models[:2], "soup", tmp_path / "b", weights=[0.75, 0.25], show_progress=False))
    for name in a:
        assert torch.equal(a[name], b[name])


def test_task_arithmetic_equals_direct_computation(
    dense_model: Path, noisy_models: list[Path], tmp_path: Path
) -> None:
    lambdas = [0.7, -0.2]
    out = merge_models(
        noisy_models[:2], "task_arithmetic", tmp_path / "ta", base=dense_model, weights=lambdas, show_progress=False
    )
    merged, base = all_weights(out), all_weights(dense_model)
    tuned = [all_weights(path) for path in noisy_models[:2]]
    for name, tensor in merged.items():
        if tensor.is_floating_point():
            direct = base[name].double() + sum(
                lam * (s[name].double() - base[name].double()) for lam, s in zip(lambdas, tuned)
            )
            torch.testing.assert_close(tensor, direct.float(), rtol=0, atol=1e-6)


def test_hierarchical_weights_from_hand_made_deltas(
    dense_model: Path, noisy_models: list[Path], tmp_path: Path
) -> None:
    # Specialists that moved exactly one tensor each by a known amount: δ is then hand-computable.
    ir_name, sts_name = "encoder.layer.0.output.dense.bias", "encoder.layer.1.output.dense.bias"

    def shift(target: str, value: float):
        return lambda name, t: t + value if name == target else t

    ir = edited_copy(dense_model, tmp_path / "ir", shift(ir_name, 0.5))  # 32 entries moved by 0.5
    sts = edited_copy(dense_model, tmp_path / "sts", shift(sts_name, 0.25))
    tau = 0.5
    out = merge_models(
        noisy_models,
        "hierarchical",
        tmp_path / "h",
        ir_models=[0, 2],
        sts_models=[1, 2],
        base=dense_model,
        ir_specialist=ir,
        sts_specialist=sts,
        temperature=tau,
        show_progress=False,
    )
    delta_ir, delta_sts = 0.5 * math.sqrt(32), 0.25 * math.sqrt(32)
    w0 = math.exp(delta_ir / tau) / (math.exp(delta_ir / tau) + 1.0)  # layer 0: δ_STS = 0
    w1 = 1.0 / (1.0 + math.exp(delta_sts / tau))  # layer 1: δ_IR = 0
    assert fusion_weights(delta_ir, 0.0, tau) == pytest.approx(w0)
    inputs = [all_weights(path) for path in noisy_models]
    merged = all_weights(out)
    for name, w_ir in (
        ("encoder.layer.0.attention.self.key.weight", w0),
        ("encoder.layer.1.output.dense.bias", w1),
        ("pooler.dense.weight", 0.5),
    ):
        ir_soup = (inputs[0][name].double() + inputs[2][name].double()) / 2
        sts_soup = (inputs[1][name].double() + inputs[2][name].double()) / 2
        torch.testing.assert_close(merged[name], (w_ir * ir_soup + (1 - w_ir) * sts_soup).float(), rtol=0, atol=1e-7)
    recipe = (out / "merge_config.yaml").read_text()
    assert "temperature: 0.5" in recipe
    assert (out / "delta_heatmap.png").stat().st_size > 0
    card = (out / "README.md").read_text()
    assert "| `encoder.layer.0` | 16 | " in card and f"{w0:.4f}" in card


def test_hierarchical_accepts_precomputed_deltas(noisy_models: list[Path], tmp_path: Path) -> None:
    groups = ["embeddings", "encoder.layer.0", "encoder.layer.1", "pooler", "2_Dense"]
    deltas = {"IR": dict.fromkeys(groups, 2.0), "STS": dict.fromkeys(groups, 0.0)}
    out = merge_models(
        noisy_models[:2],
        "hierarchical",
        tmp_path / "h",
        ir_models=[0],
        sts_models=[1],
        deltas=deltas,
        temperature=1.0,
        show_progress=False,
    )
    w = 1 / (1 + math.exp(-2.0))
    a, b, merged = all_weights(noisy_models[0]), all_weights(noisy_models[1]), all_weights(out)
    name = "2_Dense/linear.bias"
    torch.testing.assert_close(
        merged[name], (w * a[name].double() + (1 - w) * b[name].double()).float(), rtol=0, atol=1e-7
    )
    with pytest.raises(MergeError, match="deltas give no value for layer group 'embeddings'"):
        merge_models(
            noisy_models[:2],
            "hierarchical",
            tmp_path / "h2",
            ir_models=[0],
            sts_models=[1],
            deltas={"IR": {}, "STS": {}},
            show_progress=False,
        )


def test_sharded_output_with_index_loads_in_sentence_transformers(noisy_models: list[Path], tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    out = merge_models(noisy_models[:2], "soup", tmp_path / "sharded", max_shard_size="200KB", show_progress=False)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and all((out / shard).is_file() for shard in shards)
    from safetensors import safe_open

    with safe_open(str(out / shards[0]), "pt") as handle:
        metadata = handle.metadata()
    assert metadata["format"] == "pt" and json.loads(metadata["merge_recipe"])["method"] == "soup"
    assert (out / "2_Dense" / "model.safetensors").is_file()
    merged = SentenceTransformer(str(out))
    direct = SentenceTransformer(str(noisy_models[0]))
    states = [SentenceTransformer(str(p)).state_dict() for p in noisy_models[:2]]
    direct.load_state_dict({k: (v + states[1][k]) / 2 if v.is_floating_point() else v for k, v in states[0].items()})
    sentences = ["a cat sits on the mat", "stocks fell sharply today"]
    torch.testing.assert_close(
        merged.encode(sentences, convert_to_tensor=True),
        direct.encode(sentences, convert_to_tensor=True),
        atol=1e-6,
        rtol=0,
    )


def test_writer_gives_oversized_tensor_its_own_shard(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    assert parse_size("2GB") == 2 * 10**9 and parse_size("1KiB") == 1024 and parse_size(10) == 10
    infos = [
        ("small", TensorInfo((4,), torch.float32)),  # 16 bytes
        ("big", TensorInfo((8, 8), torch.float32)),  # 256 bytes > max
        ("ids", TensorInfo((3,), torch.int64)),
        ("tail", TensorInfo((4,), torch.float16)),
    ]
    with ShardedSafetensorsWriter(tmp_path, infos, 100, {"note": "x"}) as writer:
        # int64 first (element size 8), then float32, then float16: each tensor starts aligned.
        assert [name for name, _ in writer.order] == ["ids", "small", "big", "tail"]
        writer.write("ids", torch.arange(3))
        writer.write("small", torch.ones(4))
        writer.write("big", torch.zeros(4, 8))  # in two blocks
        writer.write("big", torch.ones(4, 8))
        writer.write("tail", torch.full((4,), 2.0, dtype=torch.float16))
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == 24 + 16 + 256 + 8
    assert len(set(index["weight_map"].values())) == 3
    loaded = {}
    for shard in sorted(set(index["weight_map"].values())):
        loaded.update(load_file(str(tmp_path / shard)))
    assert torch.equal(loaded["big"], torch.cat([torch.zeros(4, 8), torch.ones(4, 8)]))
    assert torch.equal(loaded["ids"], torch.arange(3)) and loaded["tail"].dtype == torch.float16
    with pytest.raises(ValueError, match="out of order"):
        ShardedSafetensorsWriter(tmp_path / "x", infos, 100).write("tail", torch.zeros(4, dtype=torch.float16))


def test_pytorch_bin_inputs(noisy_models: list[Path], tmp_path: Path) -> None:
    import shutil

    bins = []
    for index, path in enumerate(noisy_models[:2]):
        target = tmp_path / f"bin{index}"
        shutil.copytree(path, target)
        torch.save(read_weights(target), target / "pytorch_model.bin")
        (target / "model.safetensors").unlink()
        bins.append(target)
    from_bin = all_weights(merge_models(bins, "soup", tmp_path / "b", show_progress=False))
    from_st = all_weights(merge_models(noisy_models[:2], "soup", tmp_path / "s", show_progress=False))
    assert from_bin.keys() == from_st.keys()
    for name in from_st:
        assert torch.equal(from_bin[name], from_st[name])


def test_lora_adapter_is_merged_into_its_base_first(tiny_model_path: str, tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModel

    base_dir = Path(tiny_model_path)
    torch.manual_seed(0)
    peft_model = get_peft_model(
        AutoModel.from_pretrained(str(base_dir)),
        LoraConfig(r=4, target_modules=["query", "value"], init_lora_weights=False),
    )
    peft_model.peft_config["default"].base_model_name_or_path = str(base_dir)
    adapter = tmp_path / "adapter"
    peft_model.save_pretrained(str(adapter))
    expected = {k: v.detach() for k, v in peft_model.merge_and_unload().state_dict().items()}

    out = merge_models(
        [adapter, base_dir], "soup", tmp_path / "out", weights=[1.0, 0.0], reference=1, show_progress=False
    )
    merged = all_weights(out)
    name = "encoder.layer.0.attention.self.query.weight"
    torch.testing.assert_close(merged[name], expected[name], rtol=0, atol=1e-6)
    assert not torch.equal(merged[name], read_weights(base_dir)[name])


def test_slerp_of_antiparallel_tensors_is_lerp(noisy_models: list[Path]) -> None:
    """sin θ vanishes at θ = π as well as at 0: anti-parallel inputs must take the lerp fallback."""
    from hf_unified_embed.merge import get_merge_method

    method = get_merge_method("slerp").from_params(noisy_models[:2], {"t": 0.25})
    method.prepare({}, {"g": ["v"]})
    v = torch.randn(64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for other in (-v, 2 * v):
        values = dict(zip(noisy_models[:2], (v, other)))
        result = method.merge_tensor("v", "g", values.__getitem__, torch.float64)
        torch.testing.assert_close(result, torch.lerp(v, other, 0.25))
