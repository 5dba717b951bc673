"""Every loss inside sentence-transformers' MatryoshkaLoss, Matryoshka2dLoss and AdaptiveLayerLoss."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.sentence_transformer.losses import AdaptiveLayerLoss, Matryoshka2dLoss, MatryoshkaLoss
from torch import Tensor, nn

from hf_unified_embed.losses import AnglEJointLoss, CoDiEmbSTSLoss, GURLoss, InstructorLoss
from hf_unified_embed.losses.parts import OTHER, LossParts, total_loss
from tests.test_losses_cached import CASES, PAIRS, QUERIES, RETRIEVAL, STS_LABELS, features_of

WRAPPERS: dict[str, Callable[[SentenceTransformer, nn.Module], nn.Module]] = {
    "matryoshka": lambda model, loss: MatryoshkaLoss(model, loss, [32, 16, 8], matryoshka_weights=[1.0, 0.5, 0.25]),
    "matryoshka_2d": lambda model, loss: Matryoshka2dLoss(model, loss, [32, 16]),
    "adaptive_layer": lambda model, loss: AdaptiveLayerLoss(model, loss, prior_layers_weight=0.7),
}


class Summed(nn.Module):
    """The loss as one tensor: what a wrapper computes for a loss that never returned parts."""

    def __init__(self, loss: nn.Module) -> None:
        super().__init__()
        self.loss = loss
        self.model = loss.model

    def forward(self, sentence_features: list[dict[str, Any]], labels: Tensor | None) -> Tensor:
        return total_loss(self.loss(sentence_features, labels))


@pytest.fixture
def tiny_model(tiny_model_path: str) -> SentenceTransformer:
    torch.manual_seed(0)
    return SentenceTransformer(tiny_model_path, device="cpu")


def wrapped_output(
    wrapper: Callable[[SentenceTransformer, nn.Module], nn.Module],
    model: SentenceTransformer,
    loss: nn.Module,
    columns: list[list[str]],
    labels: list[float] | None,
) -> Tensor | dict[str, Tensor]:
    random.seed(0)  # AdaptiveLayerLoss samples its layer with `random`
    torch.manual_seed(0)  # GURLoss draws its masks from torch's generator
    return wrapper(model, loss)(features_of(model, columns), torch.tensor(labels) if labels is not None else None)


# Losses returning parts, and the intermediate-layer loss (hidden states under the layer wrappers), in every
# wrapper; the single-tensor losses in Matryoshka2dLoss, which is both wrappers at once.
THOROUGH = ("angle_joint", "codiemb_sts", "gur", "instructor", "mid_layer")
COMBINATIONS = [(name, wrapper) for name in THOROUGH for wrapper in sorted(WRAPPERS)] + [
    (name, "matryoshka_2d") for name in sorted(set(CASES) - set(THOROUGH))
]


@pytest.mark.parametrize(("name", "wrapper_name"), COMBINATIONS)
def test_every_loss_inside_the_wrappers(tiny_model: SentenceTransformer, name: str, wrapper_name: str) -> None:
    factory, columns, labels = CASES[name]
    wrapper = WRAPPERS[wrapper_name]
    tiny_model.eval()
    torch.manual_seed(0)
    loss = factory(tiny_model)
    plain = loss(features_of(tiny_model, columns), torch.tensor(labels) if labels is not None else None)
    output = wrapped_output(wrapper, tiny_model, loss, columns, labels)
    expected = wrapped_output(wrapper, tiny_model, Summed(loss), columns, labels)
    # The parts, weighted by the wrapper part by part, add up to what the wrapper makes of the total.
    torch.testing.assert_close(total_loss(output), expected, rtol=1e-5, atol=1e-6)
    if isinstance(output, dict):
        assert isinstance(output, LossParts)
        assert set(output) >= set(plain)
        assert (OTHER in output) == (wrapper_name != "matryoshka")  # the KL term of the layer wrappers
    total_loss(output).backward()
    assert any(p.grad is not None and torch.count_nonzero(p.grad) for p in tiny_model.parameters())


def test_loss_parts_arithmetic() -> None:
    parts = LossParts({"a": torch.tensor(1.0), "b": torch.tensor(2.0)})
    weighted = 0.0 + 3 * parts  # a wrapper's `loss = 0.0; loss += weight * inner(...)`
    assert isinstance(weighted, LossParts) and weighted["a"].item() == 3.0 and weighted["b"].item() == 6.0
    assert (parts * torch.tensor(2.0))["b"].item() == 4.0 and (parts / 4)["b"].item() == 0.5
    union = parts + LossParts({"b": torch.tensor(1.0), "c": torch.tensor(5.0)})
    assert {k: v.item() for k, v in union.items()} == {"a": 1.0, "b": 3.0, "c": 5.0}
    with_term = parts + torch.tensor(0.25)
    assert with_term[OTHER].item() == 0.25 and (torch.tensor(0.5) + with_term)[OTHER].item() == 0.75
    assert (parts + 1)[OTHER].item() == 1.0 and set(parts + 0) == {"a", "b"}
    assert parts.total().item() == 3.0
    with pytest.raises(TypeError):
        parts * "x"  # type: ignore[operator]


def train(model: SentenceTransformer, dataset: Dataset, loss: nn.Module, output_dir: Path) -> list[dict[str, float]]:
    args = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir),
        max_steps=3,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        use_cpu=True,
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    trainer.train()
    return [entry for entry in trainer.state.log_history if "loss" in entry]


def assert_trained_and_logged(
    model: SentenceTransformer, before: Tensor, logs: list[dict[str, float]], parts: set[str]
) -> None:
    assert len(logs) == 3 and all(math.isfinite(entry["loss"]) for entry in logs)
    assert all(parts <= set(entry) for entry in logs), logs[0]
    for entry in logs:  # the logged parts add up to the logged loss
        assert sum(entry[part] for part in parts) == pytest.approx(entry["loss"], rel=1e-4)
    assert not torch.equal(model[0].auto_model.embeddings.word_embeddings.weight, before)


STS_DATASET = {"sentence1": PAIRS[0], "sentence2": PAIRS[1], "score": STS_LABELS}


def test_trainer_matryoshka_codiemb(tiny_model: SentenceTransformer, tmp_path: Path) -> None:
    before = tiny_model[0].auto_model.embeddings.word_embeddings.weight.detach().clone()
    loss = MatryoshkaLoss(tiny_model, CoDiEmbSTSLoss(tiny_model, infonce_weight=0.5), [32, 16, 8])
    logs = train(tiny_model, Dataset.from_dict(STS_DATASET), loss, tmp_path)
    assert_trained_and_logged(tiny_model, before, logs, {"pearson", "rank_kl", "pro", "mid_layer_infonce", "infonce"})


def test_trainer_matryoshka_2d_angle(tiny_model: SentenceTransformer, tmp_path: Path) -> None:
    before = tiny_model[0].auto_model.embeddings.word_embeddings.weight.detach().clone()
    loss = Matryoshka2dLoss(tiny_model, AnglEJointLoss(tiny_model), [32, 16])
    logs = train(tiny_model, Dataset.from_dict(STS_DATASET), loss, tmp_path)
    assert_trained_and_logged(tiny_model, before, logs, {"cosine", "ibn", "angle", OTHER})


def test_trainer_adaptive_layer_instructor_and_gur(tiny_model: SentenceTransformer, tmp_path: Path) -> None:
    before = tiny_model[0].auto_model.embeddings.word_embeddings.weight.detach().clone()
    retrieval = Dataset.from_dict({"query": RETRIEVAL[0], "positive": RETRIEVAL[1], "negative": RETRIEVAL[2]})
    logs = train(tiny_model, retrieval, AdaptiveLayerLoss(tiny_model, InstructorLoss(tiny_model)), tmp_path / "i")
    assert_trained_and_logged(tiny_model, before, logs, {"query_to_document", "document_to_query", OTHER})
    # GUR masks once per batch, so every layer reconstructs the same masked tokens.
    pairs = Dataset.from_dict({"anchor": QUERIES, "positive": RETRIEVAL[1]})
    logs = train(tiny_model, pairs, AdaptiveLayerLoss(tiny_model, GURLoss(tiny_model)), tmp_path / "g")
    assert_trained_and_logged(tiny_model, before, logs, {"mlm", "contrastive", OTHER})
