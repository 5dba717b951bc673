"""The streaming engine: block boundaries, half-precision inputs, zero-weight inputs, sinks, files opened once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from _merge_helpers import edited_copy, noisy_copy, read_weights

from hf_unified_embed.merge import (
    LazyCheckpoint,
    MemorySink,
    MergeError,
    get_merge_method,
    group_tensor_names,
    merge_models,
    stream_merge,
)
from hf_unified_embed.merge import engine as engine_module


@pytest.fixture(scope="module")
def trio(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("trio")
    return [noisy_copy(tiny_model_path, root / f"m{seed}", seed) for seed in range(3)]


def _direct(paths: list[Path], weights: list[float]) -> dict[str, torch.Tensor]:
    states = [read_weights(path) for path in paths]
    return {
        name: sum(w * state[name].double() for w, state in zip(weights, states))
        if tensor.is_floating_point()
        else tensor
        for name, tensor in states[0].items()
    }


def test_blocks_that_do_not_divide_the_tensors(
    trio: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "BLOCK", 1000)  # 32 × 30522 embedding = 977 blocks, the last one short
    weights = [0.5, 0.3, 0.2]
    merged = read_weights(merge_models(trio, "soup", tmp_path / "out", weights=weights, show_progress=False))
    for name, expected in _direct(trio, weights).items():
        torch.testing.assert_close(merged[name], expected.to(merged[name].dtype), rtol=3e-7, atol=1e-8)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_inputs_of_other_dtypes(trio: list[Path], tmp_path: Path, dtype: torch.dtype) -> None:
    """Half precision is summed in float32; float64 in float64 (not rounded through float32)."""
    halves = [edited_copy(path, tmp_path / f"h{index}", lambda _, t: t.to(dtype)) for index, path in enumerate(trio)]
    merged = read_weights(merge_models(halves, "soup", tmp_path / "out", show_progress=False))
    for name, expected in _direct(halves, [1 / 3] * 3).items():
        assert merged[name].dtype == (dtype if expected.is_floating_point() else expected.dtype)
        tolerance = {"rtol": 1e-12, "atol": 1e-15} if dtype == torch.float64 else {}
        torch.testing.assert_close(merged[name], expected.to(merged[name].dtype), **tolerance)


def test_zero_weight_input_is_still_checked(trio: list[Path], tmp_path: Path) -> None:
    name = "encoder.layer.1.output.dense.weight"

    def poison(key: str, tensor: torch.Tensor) -> torch.Tensor:
        if key == name:
            tensor = tensor.clone()
            tensor[3, 4] = float("nan")
        return tensor

    poisoned = edited_copy(trio[2], tmp_path / "poisoned", poison)
    with pytest.raises(MergeError, match=rf"poisoned/model.safetensors: tensor '{name}' holds 1 NaN/inf"):
        merge_models(
            [trio[0], trio[1], poisoned], "soup", tmp_path / "out", weights=[0.5, 0.5, 0.0], show_progress=False
        )
    with pytest.raises(MergeError, match=rf"poisoned/model.safetensors: tensor '{name}' holds 1 NaN/inf"):
        merge_models(
            [poisoned, trio[1]], "ties", tmp_path / "ties", base=trio[0], weight=[0.0, 1.0], show_progress=False
        )
    assert not (tmp_path / "out").exists() and not (tmp_path / "ties").exists()


def test_precise_is_float64_and_recorded(trio: list[Path], tmp_path: Path) -> None:
    weights = [0.1, 0.7, 0.2]
    out = merge_models(trio, "soup", tmp_path / "out", weights=weights, precise=True, show_progress=False)
    merged = read_weights(out)
    for name, expected in _direct(trio, weights).items():
        # A float64 sum rounded once: within half an ulp of float32, give or take the fused multiply-add.
        torch.testing.assert_close(merged[name], expected.to(merged[name].dtype), rtol=1.2e-7, atol=0)
    assert yaml.safe_load((out / "merge_config.yaml").read_text())["precise"] is True


def test_memory_sink_equals_the_written_folder(trio: list[Path], tmp_path: Path) -> None:
    method = get_merge_method("soup").from_params(trio, {"weights": [0.2, 0.3, 0.5]})
    checkpoints = {path: LazyCheckpoint(path) for path in trio}
    groups = group_tensor_names(checkpoints[trio[0]].names)
    sink = MemorySink(checkpoints[trio[0]])
    stream_merge(method, checkpoints, checkpoints[trio[0]], groups, sink, show_progress=False)
    written = read_weights(merge_models(trio, "soup", tmp_path / "out", weights=[0.2, 0.3, 0.5], show_progress=False))
    assert sink.tensors.keys() == written.keys()
    for name, tensor in written.items():
        assert torch.equal(sink.tensors[name], tensor), name


def test_each_input_file_is_opened_once(trio: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hf_unified_embed.merge import loader

    opened: list[str] = []
    original = loader.safe_open

    def counting(path: str, *args: object, **kwargs: object) -> object:
        opened.append(path)
        return original(path, *args, **kwargs)

    monkeypatch.setattr(loader, "safe_open", counting)
    merge_models(trio, "soup", tmp_path / "soup", show_progress=False)
    merge_models(trio[1:], "ties", tmp_path / "ties", base=trio[0], density=0.5, show_progress=False)
    assert sorted(opened) == sorted(str(path / "model.safetensors") for path in [*trio, *trio])
