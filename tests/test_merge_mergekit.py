"""Every mergekit method in the streaming engine equals ``SentenceTransformer.merge(method=...)`` on the same inputs.

Inputs: a very small random BERT with a Dense head (the base) and three noisy fine-tunes of it. Random
methods (DARE, DELLA) draw their masks from ``torch.bernoulli``; both runs get the same masks by
seeding each draw from the tensor's shape (the engine's own per-tensor seeding is what differs from
sentence-transformers' single stream). The SLERP gradient is compared with mergekit's planner.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from _merge_helpers import MERGEKIT_CASES as CASES
from _merge_helpers import fine_tunes, read_weights

from hf_unified_embed.merge import available_merge_methods, merge_models

pytest.importorskip("mergekit")


@pytest.fixture(scope="module")
def family(minilm_path: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """The base (a BERT of hidden size 32 with a 512-token embedding and a Dense head) and three noisy fine-tunes.

    The embedding is cut to 512 rows (the tokenizer is MiniLM's; nothing is encoded) to keep the
    twenty merges, each run twice, quick.
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Pooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    root = tmp_path_factory.mktemp("family")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=512,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(root / "hf")
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(root / "hf")
    transformer = Transformer(str(root / "hf"), max_seq_length=32)
    model = SentenceTransformer(modules=[transformer, Pooling(32, "mean"), Dense(32, 16)])
    base = root / "base"
    model.save(str(base))
    tuned = fine_tunes(base, root)
    return base, tuned


@pytest.fixture(scope="module")
def loaded(family: tuple[Path, list[Path]]) -> dict[Path, Any]:
    """The models loaded once for SentenceTransformer.merge (which leaves caller-owned inputs unchanged)."""
    from sentence_transformers import SentenceTransformer

    base, tuned = family
    return {path: SentenceTransformer(str(path), device="cpu") for path in [base, *tuned]}


def _seeded_bernoulli(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def bernoulli(probabilities: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        generator = torch.Generator().manual_seed(hash(tuple(probabilities.shape)) % 2**31)
        return original(probabilities, generator=generator)

    return bernoulli


def test_every_mergekit_method_is_covered() -> None:
    from mergekit.merge_methods import registered_methods

    native = {"task_arithmetic"}  # streamed natively; compared with ST below
    mergekit_names = {kernel.spec.name for kernel in registered_methods()}
    assert mergekit_names - native - {"passthrough"} == set(CASES)  # passthrough takes one model; ST.merge needs two
    assert mergekit_names <= set(available_merge_methods())


@pytest.mark.parametrize("method", sorted(CASES))
def test_equals_sentence_transformers_merge(
    method: str,
    family: tuple[Path, list[Path]],
    loaded: dict[Path, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sentence_transformers import SentenceTransformer

    monkeypatch.setattr(torch, "bernoulli", _seeded_bernoulli(torch.bernoulli))
    count, with_base, parameters = CASES[method]
    base, tuned = family
    models = tuned[:count] if count > 1 or not with_base else tuned[:1]
    extra = {"base": base} if with_base else {}
    out = merge_models(models, method, tmp_path / "out", show_progress=False, write_card=False, **extra, **parameters)
    theirs = SentenceTransformer.merge(
        [loaded[path] for path in models] if len(models) > 1 else [loaded[models[0]], loaded[base]],
        method=method,
        base_model=loaded[base] if with_base else None,
        parameters=dict(parameters),
        device="cpu",
    )
    ours = SentenceTransformer(str(out), device="cpu").state_dict()
    their_state = theirs.state_dict()
    assert ours.keys() == their_state.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], their_state[name], rtol=1e-5, atol=1e-6, msg=f"{method}: {name}")


def test_native_task_arithmetic_equals_sentence_transformers(
    family: tuple[Path, list[Path]], loaded: dict[Path, Any], tmp_path: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    base, tuned = family
    out = merge_models(
        tuned, "task_arithmetic", tmp_path / "ta", base=base, weights=[0.7, -0.2, 0.4], show_progress=False
    )
    theirs = SentenceTransformer.merge(
        [loaded[path] for path in tuned],
        method="task_arithmetic",
        base_model=loaded[base],
        parameters={"weight": [0.7, -0.2, 0.4]},
        device="cpu",
    ).state_dict()
    for name, tensor in SentenceTransformer(str(out), device="cpu").state_dict().items():
        torch.testing.assert_close(tensor, theirs[name], rtol=1e-5, atol=1e-6, msg=name)


def test_passthrough_copies_its_one_input(family: tuple[Path, list[Path]], tmp_path: Path) -> None:
    _, tuned = family
    out = merge_models([tuned[0]], "passthrough", tmp_path / "p", show_progress=False, write_card=False)
    for name, tensor in read_weights(out).items():
        assert torch.equal(tensor, read_weights(tuned[0])[name]), name


def test_random_methods_are_reproducible_and_seeded(family: tuple[Path, list[Path]], tmp_path: Path) -> None:
    base, tuned = family
    runs = [
        read_weights(
            merge_models(
                tuned,
                "dare_ties",
                tmp_path / f"d{i}",
                base=base,
                density=0.5,
                seed=seed,
                show_progress=False,
                write_card=False,
            )
        )
        for i, seed in enumerate((0, 0, 1))
    ]
    name = "encoder.layer.0.attention.self.query.weight"
    assert torch.equal(runs[0][name], runs[1][name]) and not torch.equal(runs[0][name], runs[2][name])


def test_slerp_gradient_follows_mergekit_schedule(
    minilm_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """t = [0, 0.3, 1] over a 4-block BERT against mergekit's own planner (run_merge)."""
    from conftest import make_tiny_model
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions
    from mergekit.plan import MergePlanner

    a = Path(make_tiny_model(tmp_path / "a", minilm_path, num_layers=4, seed=0))
    b = Path(make_tiny_model(tmp_path / "b", minilm_path, num_layers=4, seed=1))
    original = MergePlanner.plan_tensor

    def skip_optional(self: MergePlanner, weight: Any, *args: Any, **kwargs: Any) -> None:
        # mergekit 0.1.5 crashes on BERT's optional position_ids (list + tuple of aliases); absent here anyway.
        if not weight.optional:
            original(self, weight, *args, **kwargs)

    monkeypatch.setattr(MergePlanner, "plan_tensor", skip_optional)
    schedule = [0.0, 0.3, 1.0]
    config = MergeConfiguration.model_validate(
        {
            "merge_method": "slerp",
            "base_model": str(a),
            "models": [{"model": str(a)}, {"model": str(b)}],
            "parameters": {"t": schedule},
            "dtype": "float32",
        }
    )
    run_merge(config, str(tmp_path / "mergekit"), MergeOptions(copy_tokenizer=False))
    reference = read_weights(tmp_path / "mergekit")
    ours = read_weights(merge_models([a, b], "slerp", tmp_path / "ours", t=schedule, show_progress=False))
    assert set(reference) == set(ours)
    for name in reference:
        torch.testing.assert_close(ours[name], reference[name], rtol=1e-6, atol=1e-7, msg=name)
    # The schedule itself: embeddings and pooler at the list's start (t = 0 here: model a), the last block at its end.
    a_weights, b_weights = read_weights(a), read_weights(b)
    assert torch.equal(ours["embeddings.word_embeddings.weight"], a_weights["embeddings.word_embeddings.weight"])
    assert torch.equal(ours["pooler.dense.weight"], a_weights["pooler.dense.weight"])
    torch.testing.assert_close(
        ours["encoder.layer.3.output.dense.bias"], b_weights["encoder.layer.3.output.dense.bias"]
    )


def test_filters_and_per_input_gradients(family: tuple[Path, list[Path]], tmp_path: Path) -> None:
    """mergekit settings: ``{filter, value}`` conditions and a gradient per input."""
    from hf_unified_embed.merge import get_merge_method

    base, tuned = family
    method = get_merge_method("ties").from_params(
        tuned[:2],
        {
            "base": base,
            "density": [{"filter": "attention", "value": 0.2}, {"value": 0.9}],
            "weight": [[0.0, 1.0], 0.5],
        },
    )
    groups = {"embeddings": ["embeddings.x"], "encoder.layer.0": ["encoder.layer.0.a"], "encoder.layer.1": ["b"]}
    method.prepare({}, groups)
    # Unset parameters are left to mergekit's defaults.
    assert method.resolved_parameters("encoder.layer.1.attention.self.query.weight", "encoder.layer.1") == {
        "weight": [1.0, 0.5],
        "density": [0.2, 0.2],
    }
    assert method.resolved_parameters("embeddings.word_embeddings.weight", "embeddings")["weight"] == [0.0, 0.5]
    assert method.resolved_parameters("encoder.layer.0.output.dense.weight", "encoder.layer.0")["density"] == [
        0.9,
        0.9,
    ]
