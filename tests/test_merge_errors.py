"""Every bad input fails before the output exists, with a message naming the input and the tensor."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from _merge_helpers import edited_copy, noisy_copy, read_weights
from safetensors.torch import save_file

from hf_unified_embed.errors import InputError, OutputError
from hf_unified_embed.merge import MergeConfig, MergeError, merge_models


@pytest.fixture(scope="module")
def pair(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pair")
    return noisy_copy(tiny_model_path, root / "a", 0), noisy_copy(tiny_model_path, root / "b", 1)


def rewrite(folder: Path, weights: dict[str, torch.Tensor]) -> None:
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})


def assert_fails(models: list[Path], out: Path, match: str, method: str = "soup", **params) -> None:
    with pytest.raises(MergeError, match=match):
        merge_models(models, method, out, show_progress=False, **params)
    assert not out.exists()
    assert not any(p.name.startswith(f".{out.name}.staging-") for p in out.parent.iterdir()), (
        "staging folder left behind"
    )


def test_different_architecture(pair: tuple[Path, Path], tmp_path: Path) -> None:
    other = shutil.copytree(pair[1], tmp_path / "other")
    config = json.loads((other / "config.json").read_text())
    config["model_type"], config["architectures"] = "roberta", ["RobertaModel"]
    (other / "config.json").write_text(json.dumps(config))
    assert_fails(
        [pair[0], other],
        tmp_path / "out",
        r"other: different architecture .*architectures is \['RobertaModel'\], expected \['BertModel'\]",
    )


def test_missing_and_extra_tensor(pair: tuple[Path, Path], tmp_path: Path) -> None:
    missing = shutil.copytree(pair[1], tmp_path / "missing")
    weights = read_weights(missing)
    del weights["pooler.dense.bias"]
    rewrite(missing, weights)
    assert_fails([pair[0], missing], tmp_path / "out", r"missing: tensor 'pooler.dense.bias' is missing")
    extra = shutil.copytree(pair[1], tmp_path / "extra")
    rewrite(extra, {**read_weights(extra), "classifier.weight": torch.zeros(2, 32)})
    assert_fails([pair[0], extra], tmp_path / "out", r"extra: extra tensor 'classifier.weight'")


def test_shape_and_dtype_mismatch(pair: tuple[Path, Path], tmp_path: Path) -> None:
    name = "encoder.layer.1.output.dense.bias"
    shaped = edited_copy(pair[1], tmp_path / "shaped", lambda n, t: torch.cat([t, t]) if n == name else t)
    assert_fails(
        [pair[0], shaped],
        tmp_path / "out",
        rf"shaped/model.safetensors: tensor '{name}' has shape \[64\], expected \[32\]",
    )
    halved = edited_copy(pair[1], tmp_path / "halved", lambda n, t: t.half() if n == name else t)
    assert_fails(
        [pair[0], halved], tmp_path / "out", rf"tensor '{name}' has dtype torch.float16, expected torch.float32"
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_or_inf_in_an_input(pair: tuple[Path, Path], tmp_path: Path, bad: float) -> None:
    name = "encoder.layer.0.attention.self.key.weight"

    def poison(n: str, t: torch.Tensor) -> torch.Tensor:
        if n == name:
            t = t.clone()
            t[0, 0] = bad
        return t

    poisoned = edited_copy(pair[1], tmp_path / "poisoned", poison)
    assert_fails(
        [pair[0], poisoned], tmp_path / "out", rf"poisoned/model.safetensors: tensor '{name}' holds 1 NaN/inf"
    )


def test_nan_in_the_result(pair: tuple[Path, Path], tmp_path: Path) -> None:
    # Finite in float32 inputs, but the float16 cast of the result overflows.
    big = {n: t.half() for n, t in read_weights(pair[0]).items()}
    first = shutil.copytree(pair[0], tmp_path / "h0")
    second = shutil.copytree(pair[0], tmp_path / "h1")
    rewrite(second, big)
    big["pooler.dense.bias"] = torch.full((32,), 60000.0, dtype=torch.float16)
    rewrite(first, big)  # base + 2·(first − base) = 120000 > float16 max
    assert_fails(
        [first],
        tmp_path / "out",
        r"merged tensor 'pooler.dense.bias' holds NaN/inf values in torch.float16",
        method="task_arithmetic",
        base=second,
        weights=[2.0],
    )


def test_non_float_tensor_is_copied_from_the_reference(pair: tuple[Path, Path], tmp_path: Path) -> None:
    models = []
    for index, source in enumerate(pair):
        target = shutil.copytree(source, tmp_path / f"int{index}")
        rewrite(target, {**read_weights(target), "embeddings.position_ids": torch.arange(64).unsqueeze(0) + index})
        models.append(target)
    out = merge_models(models, "soup", tmp_path / "out", reference=1, show_progress=False)
    assert torch.equal(read_weights(out)["embeddings.position_ids"], torch.arange(64).unsqueeze(0) + 1)


def test_weights_that_do_not_sum_to_one(pair: tuple[Path, Path], tmp_path: Path) -> None:
    assert_fails(list(pair), tmp_path / "out", r"sum to 1.2, not 1 \(pass normalize=True", weights=[0.6, 0.6])
    assert_fails(list(pair), tmp_path / "out", r"got 3 weights for 2 models", weights=[0.2, 0.3, 0.5])
    assert_fails(list(pair), tmp_path / "out", r"weight 1 must be a finite number", weights=[1.0, float("nan")])
    assert_fails(list(pair), tmp_path / "out", r"slerp: invalid t 'x'", method="slerp", t="x")
    assert_fails(
        list(pair),
        tmp_path / "out",
        r"ties: weight has 3 values for 1 non-base inputs",
        method="ties",
        weight=[1, 2, 3],
    )
    assert_fails(list(pair), tmp_path / "out", r"linear does not use a base model", method="linear", base=0)
    assert_fails(list(pair), tmp_path / "out", r"has no parameter 'alpha'", alpha=1.0)
    assert_fails(
        list(pair),
        tmp_path / "out",
        r"temperature must be a positive number",
        method="hierarchical",
        ir_models=[0],
        sts_models=[1],
        deltas={"IR": {}, "STS": {}},
        temperature=0,
    )


def test_output_equal_to_or_inside_an_input(pair: tuple[Path, Path]) -> None:
    with pytest.raises(OutputError, match="overlaps the input"):
        merge_models(list(pair), "soup", pair[0], overwrite=True, show_progress=False)
    with pytest.raises(OutputError, match="overlaps the input"):
        merge_models(list(pair), "soup", pair[1] / "merged", show_progress=False)
    assert not (pair[1] / "merged").exists()


def test_non_empty_output_needs_overwrite(pair: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="not empty"):
        merge_models(list(pair), "soup", out, show_progress=False)
    assert (out / "keep.txt").exists()
    with pytest.raises(OSError, match="not written by hf-unified-embed"):  # overwrite replaces only the tool's
        merge_models(list(pair), "soup", out, overwrite=True, show_progress=False)
    (out / "keep.txt").unlink()
    merge_models(list(pair), "soup", out, show_progress=False)
    merge_models(list(pair), "soup", out, overwrite=True, show_progress=False)
    assert (out / "model.safetensors").exists()


def test_truncated_safetensors(pair: tuple[Path, Path], tmp_path: Path) -> None:
    truncated = shutil.copytree(pair[1], tmp_path / "truncated")
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    # Found when the input folder is checked, as every command checks a model folder (an InputError).
    with pytest.raises(
        InputError, match=r"models\[1\] .*truncated/model.safetensors: not a readable safetensors file"
    ):
        merge_models([pair[0], truncated], "soup", tmp_path / "out", show_progress=False)
    assert not (tmp_path / "out").exists()


def test_missing_shard_of_an_index(pair: tuple[Path, Path], tmp_path: Path) -> None:
    sharded = merge_models(list(pair), "soup", tmp_path / "sharded", max_shard_size="100KB", show_progress=False)
    shard = sorted(sharded.glob("model-*.safetensors"))[-1]
    shard.unlink()
    assert_fails([pair[0], sharded], tmp_path / "out", rf"shard '{shard.name}' is missing")


def test_config_validation(tmp_path: Path) -> None:
    with pytest.raises(MergeError, match=r"unknown merge method 'tiez'; available: hierarchical, soup, .*ties"):
        MergeConfig(models=["a", "b"], method="tiez", output_dir=tmp_path)
    with pytest.raises(MergeError, match="'org/x y' is not a Hugging Face Hub model id"):
        MergeConfig(models=["a", "b"], method="soup", output_dir=tmp_path, model_ids=["org/x y", None])
    with pytest.raises(MergeError, match="unknown key 'modles'"):
        MergeConfig.from_dict({"modles": [], "method": "soup", "output_dir": "x"})
    with pytest.raises(MergeError, match="max_shard_size"):
        MergeConfig(models=["a", "b"], method="soup", output_dir=tmp_path, max_shard_size="lots")
    with pytest.raises(MergeError, match=r"card.evaluation_results\[0\]"):
        MergeConfig.from_dict(
            {
                "models": ["a"],
                "method": "soup",
                "output_dir": "x",
                "card": {"evaluation_results": [{"task_type": "x"}]},
            }
        )


def test_negative_averaging_weights_need_the_option(pair: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    """A soup (or mergekit's linear) with a negative weight extrapolates: refused unless allowed; a task
    vector's λ may be negative (task negation)."""
    from hf_unified_embed.cli.main import main

    assert_fails(
        list(pair), tmp_path / "out", r"soup: weights\[0\] = -1 is negative.*--allow-negative-weights", weights=[-1, 2]
    )
    assert_fails(
        list(pair), tmp_path / "out", r"linear: weight\[1\] = -0.5 is negative", method="linear", weight=[1, -0.5]
    )
    args = ["merge", "--method", "soup", "--models", *map(str, pair), "-o", str(tmp_path / "cli"), "--no-progress"]
    assert main([*args, "--weights", "-1", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: soup: weights[0] = -1 is negative"), err
    assert not (tmp_path / "cli").exists()
    assert main([*args, "--weights", "-1", "2", "--allow-negative-weights"]) == 0
    weights = read_weights(tmp_path / "cli")
    inputs = [read_weights(path) for path in pair]
    name = "encoder.layer.0.output.dense.weight"
    torch.testing.assert_close(weights[name], 2 * inputs[1][name] - inputs[0][name], rtol=0, atol=1e-6)
    merge_models(
        list(pair[:1]), "task_arithmetic", tmp_path / "negated", base=pair[1], weights=[-0.5], show_progress=False
    )


def test_a_missing_input_is_a_missing_folder_naming_its_key(
    pair: tuple[Path, Path], tmp_path: Path, capsys, monkeypatch
) -> None:
    """A local path that does not exist is never looked up on the Hub; a bare name that is neither a folder here
    nor a cached Hub model says both."""
    from hf_unified_embed.cli.main import main

    monkeypatch.chdir(pair[0].parent)
    base = ["merge", "--method", "soup", "-o", str(tmp_path / "out"), "--no-progress"]
    assert main([*base, "--models", "a", "./b-typo"]) == 2
    assert capsys.readouterr().err == "error: --models ./b-typo: no such folder (a local path that does not exist)\n"
    assert main([*base, "--method", "task_arithmetic", "--models", "a", "--base", "/no/such/base"]) == 2
    assert (
        capsys.readouterr().err == "error: --base /no/such/base: no such folder (a local path that does not exist)\n"
    )
    with pytest.raises(FileNotFoundError, match=r"^base /no/such/base: no such folder"):
        merge_models([pair[0]], "task_arithmetic", tmp_path / "out", base="/no/such/base", show_progress=False)
    with pytest.raises(FileNotFoundError, match=r"^models\[1\] .*/nope: no such folder"):
        merge_models([pair[0], pair[0].parent / "nope"], "soup", tmp_path / "out", show_progress=False)
    assert main([*base, "--models", "a", "b-typo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: models[1] b-typo: no local folder of that name, and the Hub model cannot be loaded")
    assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()
