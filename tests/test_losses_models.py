"""The losses on a real (tiny, random) SentenceTransformer: forward, backward, intermediate layers, text identity."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from sentence_transformers import SentenceTransformer

import hf_unified_embed
from hf_unified_embed import losses
from hf_unified_embed.losses import (
    AnglEJointLoss,
    CoDiEmbSTSLoss,
    CurriculumInfoNCELoss,
    EmbeddingLoss,
    InstructorLoss,
    MidLayerInfoNCELoss,
    MultiPositiveInfoNCELoss,
    PearsonLoss,
    PROLoss,
    RankKLLoss,
)
from hf_unified_embed.losses.common.text_identity import text_ids_of

QUERIES = ["what is the capital of france", "who wrote hamlet", "how tall is everest", "when did rome fall"]
POSITIVES = ["Paris is the capital.", "Shakespeare wrote it.", "It is 8,849 metres high.", "In 476 AD."]
SECOND_POSITIVES = ["France's capital is Paris.", "Hamlet is by Shakespeare.", "Everest: 8,849 m.", "476 AD."]
NEGATIVES = ["Lyon is a French city.", "Marlowe wrote plays.", "K2 is 8,611 metres.", "Byzantium fell in 1453."]
SENTENCES1 = ["A man plays guitar.", "A woman slices onions.", "Kids play soccer.", "A dog runs."]
SENTENCES2 = ["A man is playing a guitar.", "A man eats pasta.", "Children play football.", "A cat sleeps."]
STS_LABELS = [0.95, 0.05, 0.85, 0.2]

# name -> (loss factory, text columns, labels)
CASES: dict[str, tuple[Any, list[list[str]], list[float] | None]] = {
    "multi_positive": (
        lambda m: MultiPositiveInfoNCELoss(m, positives_per_query=2),
        [QUERIES, POSITIVES, SECOND_POSITIVES, NEGATIVES],
        None,
    ),
    "pearson": (PearsonLoss, [SENTENCES1, SENTENCES2], STS_LABELS),
    "rank_kl": (RankKLLoss, [SENTENCES1, SENTENCES2], STS_LABELS),
    "pro": (PROLoss, [SENTENCES1, SENTENCES2], STS_LABELS),
    "mid_layer": (MidLayerInfoNCELoss, [SENTENCES1, SENTENCES2], STS_LABELS),
    "codiemb_sts": (lambda m: CoDiEmbSTSLoss(m, infonce_weight=1.0), [SENTENCES1, SENTENCES2], STS_LABELS),
    "angle_joint": (AnglEJointLoss, [SENTENCES1, SENTENCES2], STS_LABELS),
    "instructor": (InstructorLoss, [QUERIES, POSITIVES, NEGATIVES], None),
    "curriculum": (
        lambda m: CurriculumInfoNCELoss(m, difficulty_threshold=0.0),
        [QUERIES, POSITIVES, NEGATIVES],
        [0.4, -0.1, 0.3, 0.2],
    ),
}


@pytest.fixture
def tiny_model(tiny_model_path: str) -> SentenceTransformer:
    torch.manual_seed(0)
    return SentenceTransformer(tiny_model_path)


def features_of(model: SentenceTransformer, columns: list[list[str]]) -> list[dict[str, Any]]:
    return [dict(model.preprocess(column)) for column in columns]


def total(output: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
    return sum(output.values()) if isinstance(output, dict) else output  # type: ignore[return-value]


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_backpropagates_into_the_model(tiny_model: SentenceTransformer, name: str) -> None:
    factory, columns, labels = CASES[name]
    loss = factory(tiny_model)
    assert isinstance(loss, EmbeddingLoss) and loss.model is tiny_model
    optimizer = torch.optim.SGD(tiny_model.parameters(), lr=1e-2)
    label_tensor = torch.tensor(labels) if labels is not None else None
    for _ in range(2):
        optimizer.zero_grad()
        value = total(loss(features_of(tiny_model, columns), label_tensor))
        assert value.ndim == 0 and torch.isfinite(value)
        value.backward()
        gradients = [p.grad for p in tiny_model.parameters() if p.grad is not None]
        assert gradients and any(torch.count_nonzero(g) > 0 for g in gradients)
        optimizer.step()


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_and_citation(tiny_model: SentenceTransformer, name: str) -> None:
    loss = CASES[name][0](tiny_model)
    config = loss.get_config_dict()
    assert isinstance(config, dict)
    assert all(isinstance(value, (int, float, bool, str, type(None))) for value in config.values())
    assert loss.citation.strip().startswith("@")
    doc = type(loss).__init__.__doc__ or ""
    for section in ("Args:", "References:", "Requirements:", "Inputs:", "Example:"):
        assert section in doc, f"{type(loss).__name__} docstring lacks {section}"


def test_exports() -> None:
    for name in losses.__all__:
        assert getattr(hf_unified_embed, name, None) is getattr(losses, name) or name == "GURLoss"


def manual_mean_pool(model: SentenceTransformer, texts: list[str], layer: int) -> torch.Tensor:
    features = model.preprocess(texts)
    output = model[0].auto_model(
        input_ids=features["input_ids"],
        attention_mask=features["attention_mask"],
        token_type_ids=features["token_type_ids"],
        output_hidden_states=True,
    )
    mask = features["attention_mask"].unsqueeze(-1).float()
    return (output.hidden_states[layer] * mask).sum(1) / mask.sum(1)


def test_mid_layer_embeddings_are_the_pooled_middle_hidden_state(tiny_model: SentenceTransformer) -> None:
    from hf_unified_embed.losses.common.hidden_states import embed_columns_with_layer

    tiny_model.eval()
    config = tiny_model[0].auto_model.config
    assert not config.output_hidden_states
    with torch.no_grad():
        final, middle = embed_columns_with_layer(tiny_model, features_of(tiny_model, [SENTENCES1, SENTENCES2]), None)
        # 2 layers -> 3 hidden states -> index 3 // 2 = 1, as `hidden_states[n // 2]` in the CoDiEmb code
        torch.testing.assert_close(middle[0], manual_mean_pool(tiny_model, SENTENCES1, 1))
        torch.testing.assert_close(middle[1], manual_mean_pool(tiny_model, SENTENCES2, 1))
        torch.testing.assert_close(final[1], manual_mean_pool(tiny_model, SENTENCES2, 2))
        torch.testing.assert_close(final[0], tiny_model.encode(SENTENCES1, convert_to_tensor=True))
        _, first_layer = embed_columns_with_layer(tiny_model, features_of(tiny_model, [SENTENCES1]), 0)
        torch.testing.assert_close(first_layer[0], manual_mean_pool(tiny_model, SENTENCES1, 0))
    assert not config.output_hidden_states, "the hidden-states switch must be restored"
    with pytest.raises(ValueError, match="out of range"):
        embed_columns_with_layer(tiny_model, features_of(tiny_model, [SENTENCES1]), 7)


def test_mid_layer_loss_trains_only_the_layers_below_it(tiny_model: SentenceTransformer) -> None:
    loss = CoDiEmbSTSLoss(tiny_model, pearson_weight=0, rank_kl_weight=0, pro_weight=0, mid_layer_weight=1.0)
    parts = loss(features_of(tiny_model, [SENTENCES1, SENTENCES2]), torch.tensor(STS_LABELS))
    assert set(parts) == {"mid_layer_infonce"}
    total(parts).backward()
    encoder = tiny_model[0].auto_model.encoder.layer
    below = [p.grad for p in encoder[0].parameters()]
    above = [p.grad for p in encoder[1].parameters()]
    assert all(g is not None for g in below) and any(torch.count_nonzero(g) > 0 for g in below if g is not None)
    assert all(g is None or torch.count_nonzero(g) == 0 for g in above)


def test_text_ids_detect_identical_texts(tiny_model: SentenceTransformer) -> None:
    first = ["same text", "other", "same text", "A man plays guitar."]
    second = ["A man plays guitar.", "same text", "x", "y"]
    ids = text_ids_of(features_of(tiny_model, [first, second]))
    assert ids is not None
    ids1, ids2 = ids
    assert ids1[0] == ids1[2] == ids2[1]
    assert ids1[3] == ids2[0]
    assert len({int(ids1[0]), int(ids1[1]), int(ids2[2]), int(ids2[3]), int(ids2[0])}) == 5


def test_angle_forward_uses_identical_sentence_detection(tiny_model: SentenceTransformer) -> None:
    tiny_model.eval()  # no dropout: identical texts get identical embeddings
    first = ["A man plays guitar.", "A woman slices onions.", "Kids play soccer."]
    second = ["A man is playing a guitar.", "A man is playing a guitar.", "Children play football."]
    labels = torch.tensor([1.0, 0.9, 0.95])
    loss = AnglEJointLoss(tiny_model, cosine_weight=0, angle_weight=0)
    with torch.no_grad():
        detected = loss(features_of(tiny_model, [first, second]), labels)["ibn"]
        embeddings = [
            tiny_model.encode(first, convert_to_tensor=True),
            tiny_model.encode(second, convert_to_tensor=True),
        ]
        undetected = loss.compute_loss_from_embeddings(embeddings, labels)["ibn"]
        assert detected.item() < undetected.item()


def test_clear_errors_on_wrong_layout(tiny_model: SentenceTransformer) -> None:
    embeddings = [torch.randn(3, 8) for _ in range(2)]
    with pytest.raises(ValueError, match=r"at least 4 input column\(s\)"):
        MultiPositiveInfoNCELoss(tiny_model, positives_per_query=3).compute_loss_from_embeddings(embeddings, None)
    with pytest.raises(ValueError, match="exactly 2 input columns"):
        PearsonLoss(tiny_model).compute_loss_from_embeddings([*embeddings, embeddings[0]], torch.rand(3))
    with pytest.raises(ValueError, match="one label per row"):
        PROLoss(tiny_model).compute_loss_from_embeddings(embeddings, torch.rand(4))
    with pytest.raises(ValueError, match="needs labels"):
        RankKLLoss(tiny_model).compute_loss_from_embeddings(embeddings, None)
    with pytest.raises(ValueError, match="NaN"):
        PearsonLoss(tiny_model).compute_loss_from_embeddings(embeddings, torch.tensor([0.1, float("nan"), 0.3]))
    with pytest.raises(ValueError, match="temperature"):
        InstructorLoss(tiny_model, temperature=0)
    with pytest.raises(ValueError, match="positives_per_query"):
        MultiPositiveInfoNCELoss(tiny_model, positives_per_query=0)


def test_half_precision_embeddings_are_scored_in_float32(tiny_model: SentenceTransformer) -> None:
    embeddings = [torch.randn(6, 8, dtype=torch.bfloat16) for _ in range(2)]
    labels = torch.rand(6)
    for loss in (PROLoss(tiny_model), RankKLLoss(tiny_model), PearsonLoss(tiny_model)):
        assert loss.compute_loss_from_embeddings(embeddings, labels).dtype == torch.float32
