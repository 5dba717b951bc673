"""False negatives and in-batch switches against slow transcriptions; the official CoDiEmb STS branch."""

from __future__ import annotations

import pytest
import torch
from sentence_transformers import SentenceTransformer
from torch import Tensor, nn

import tests._loss_references as reference
from hf_unified_embed.losses import (
    CoDiEmbSTSLoss,
    CurriculumInfoNCELoss,
    GURLoss,
    InstructorLoss,
    MidLayerInfoNCELoss,
    MultiPositiveInfoNCELoss,
)
from hf_unified_embed.losses.common.text_identity import text_ids_of
from tests.test_losses_equations import assert_matches, make_columns, make_labels

NO_MODEL = nn.Identity()
POOL = ["alpha", "beta", "gamma", "delta", "epsilon"]


def texts_for(columns: int, batch_size: int) -> list[list[str]]:
    """Texts with duplicates inside every column and across columns (a pool of five)."""
    return [[POOL[(i * (c + 2) + c) % len(POOL)] for i in range(batch_size)] for c in range(columns)]


def ids_for(texts: list[list[str]]) -> list[Tensor]:
    vocabulary: dict[str, int] = {}
    return [torch.tensor([vocabulary.setdefault(text, len(vocabulary)) for text in column]) for column in texts]


@pytest.mark.parametrize("batch_size", [1, 4, 7])
@pytest.mark.parametrize(("positives", "negatives"), [(1, 0), (1, 2), (2, 1)])
@pytest.mark.parametrize("in_batch", [True, False])
def test_multi_positive_infonce(batch_size: int, positives: int, negatives: int, in_batch: bool) -> None:
    texts = texts_for(1 + positives + negatives, batch_size)
    loss = MultiPositiveInfoNCELoss(NO_MODEL, positives_per_query=positives, in_batch_negatives=in_batch)
    assert_matches(
        lambda cols: loss.compute_loss_from_embeddings(cols, None, text_ids=ids_for(texts)),
        lambda cols: reference.multi_positive_infonce(cols, positives, loss.temperature, texts, in_batch),
        make_columns(1 + positives + negatives, batch_size, seed=batch_size + positives),
    )


@pytest.mark.parametrize("batch_size", [1, 4, 7])
@pytest.mark.parametrize("negatives", [1, 2])
@pytest.mark.parametrize(("bidirectional", "in_batch"), [(True, True), (False, True), (False, False)])
def test_instructor(batch_size: int, negatives: int, bidirectional: bool, in_batch: bool) -> None:
    texts = texts_for(2 + negatives, batch_size)
    loss = InstructorLoss(NO_MODEL, bidirectional=bidirectional, in_batch_negatives=in_batch)
    assert_matches(
        lambda cols: loss.compute_loss_from_embeddings(cols, None, text_ids=ids_for(texts)),
        lambda cols: reference.instructor(cols, loss.temperature, bidirectional, texts, in_batch),
        make_columns(2 + negatives, batch_size, seed=batch_size + negatives),
    )


@pytest.mark.parametrize("batch_size", [1, 4, 7])
@pytest.mark.parametrize("negatives", [0, 2])
@pytest.mark.parametrize("in_batch", [True, False])
@pytest.mark.parametrize("threshold", [None, 0.0])
def test_curriculum_infonce(batch_size: int, negatives: int, in_batch: bool, threshold: float | None) -> None:
    texts = texts_for(2 + negatives, batch_size)
    difficulty = torch.randn(batch_size, generator=torch.Generator().manual_seed(batch_size), dtype=torch.float64)
    loss = CurriculumInfoNCELoss(NO_MODEL, difficulty_threshold=threshold, in_batch_negatives=in_batch)
    assert_matches(
        lambda cols: loss.compute_loss_from_embeddings(cols, difficulty, text_ids=ids_for(texts)),
        lambda cols: reference.curriculum_infonce(cols, difficulty, loss.temperature, threshold, texts, in_batch),
        make_columns(2 + negatives, batch_size, seed=batch_size + 7 + negatives),
    )


@pytest.mark.parametrize("batch_size", [2, 5, 9])
def test_thresholded_infonce_terms(batch_size: int) -> None:
    texts = texts_for(2, batch_size)
    labels = make_labels("ties", batch_size, seed=batch_size)
    mid = MidLayerInfoNCELoss(NO_MODEL, positive_threshold=0.4)
    assert_matches(
        lambda cols: mid.compute_loss_from_embeddings(cols, labels, text_ids=ids_for(texts)),
        lambda cols: reference.thresholded_infonce(cols[0], cols[1], labels, 0.02, 0.4, texts[1]),
        make_columns(2, batch_size, seed=batch_size),
    )
    sts = CoDiEmbSTSLoss(NO_MODEL, pearson_weight=0, rank_kl_weight=0, pro_weight=0, infonce_weight=0.5)
    sts.positive_threshold = 0.4
    assert_matches(
        lambda cols: sts.compute_loss_from_embeddings(
            cols[:2], labels, mid_layer_embeddings=cols[2:], text_ids=ids_for(texts)
        ),
        lambda cols: (
            reference.thresholded_infonce(cols[2], cols[3], labels, 0.02, 0.4, texts[1])
            + 0.5 * reference.thresholded_infonce(cols[0], cols[1], labels, 0.02, 0.4, texts[1])
        ),
        make_columns(4, batch_size, seed=batch_size + 1),
    )


@pytest.mark.parametrize("batch_size", [2, 6])
def test_gur_contrastive(tiny_model_path: str, batch_size: int) -> None:
    texts = texts_for(2, batch_size)
    loss = GURLoss(SentenceTransformer(tiny_model_path, device="cpu"))
    assert_matches(
        lambda cols: loss.compute_loss_from_embeddings(cols, None, text_ids=ids_for(texts)),
        lambda cols: reference.gur_contrastive(cols[0], cols[1], loss.temperature, texts),
        make_columns(2, batch_size, seed=batch_size),
    )


def test_switching_the_mask_off_scores_duplicates_as_negatives() -> None:
    texts = texts_for(3, 6)
    columns = make_columns(3, 6, seed=0)
    masked = MultiPositiveInfoNCELoss(NO_MODEL).compute_loss_from_embeddings(columns, None, text_ids=ids_for(texts))
    unmasked = MultiPositiveInfoNCELoss(NO_MODEL, mask_false_negatives=False)
    plain = unmasked.compute_loss_from_embeddings(columns, None, text_ids=ids_for(texts))
    torch.testing.assert_close(plain, reference.multi_positive_infonce(columns, 1, 0.02))
    assert masked.item() < plain.item()  # the duplicates were in the denominators
    assert unmasked.loss_inputs([]) == {}


def test_instructor_masks_a_query_whose_positive_is_shared_in_the_document_to_query_direction() -> None:
    # Two different questions answered by the same passage (rows 0 and 2); no other text repeats.
    texts = [["q0", "q1", "q2", "q3"], ["p", "p1", "p", "p3"], ["n0", "n1", "n2", "n3"]]
    columns = make_columns(3, 4, seed=3)
    masked = InstructorLoss(NO_MODEL).compute_loss_from_embeddings(columns, None, text_ids=ids_for(texts))
    unmasked = InstructorLoss(NO_MODEL, mask_false_negatives=False).compute_loss_from_embeddings(
        columns, None, text_ids=ids_for(texts)
    )
    # Passage "p" answers q2 as well as q0: q2 is not a negative of row 0's positive (nor q0 of row 2's).
    assert masked["document_to_query"].item() < unmasked["document_to_query"].item()
    torch.testing.assert_close(masked["query_to_document"], unmasked["query_to_document"])
    assert_matches(
        lambda cols: InstructorLoss(NO_MODEL).compute_loss_from_embeddings(cols, None, text_ids=ids_for(texts)),
        lambda cols: reference.instructor(cols, 0.01, True, texts),
        columns,
    )
    assert_matches(
        lambda cols: InstructorLoss(NO_MODEL, mask_false_negatives=False).compute_loss_from_embeddings(cols, None),
        lambda cols: reference.instructor(cols, 0.01, True),
        columns,
    )


def test_in_batch_switch_conflicts_are_refused() -> None:
    with pytest.raises(ValueError, match="bidirectional=False"):
        InstructorLoss(NO_MODEL, in_batch_negatives=False)
    with pytest.raises(ValueError, match="nothing to gather"):
        MultiPositiveInfoNCELoss(NO_MODEL, in_batch_negatives=False, gather_across_devices=True)


def test_forward_reads_text_identity_from_the_token_ids(tiny_model_path: str) -> None:
    model = SentenceTransformer(tiny_model_path, device="cpu").eval()
    texts = [
        ["q one", "q two", "q three", "q four"],
        ["same answer", "other", "x", "same answer"],
        ["y", "same answer", "z", "w"],
    ]
    features = [dict(model.preprocess(column)) for column in texts]
    ids = text_ids_of(features)
    assert ids is not None
    assert torch.equal(_same_pairs(ids), _same_pairs(ids_for(texts)))
    loss = MultiPositiveInfoNCELoss(model)
    with torch.no_grad():
        embeddings = [model.encode(column, convert_to_tensor=True) for column in texts]
        expected = loss.compute_loss_from_embeddings(embeddings, None, text_ids=ids_for(texts))
        torch.testing.assert_close(loss(features, None), expected, rtol=1e-5, atol=1e-6)


def _same_pairs(ids: list[Tensor]) -> Tensor:
    """Which (row, column) cells of the batch hold the same text as which others."""
    flat = torch.cat(ids)
    return flat.unsqueeze(0) == flat.unsqueeze(1)


def test_codiemb_sts_defaults_reproduce_the_official_sts_branch() -> None:
    # Labels either exactly 1.0 or below 0.8: the official threshold 1.0 and ours (0.8) pick the same rows.
    labels = torch.tensor([1.0, 0.2, 0.6, 1.0, 0.0, 0.4, 1.0, 0.75, 0.2, 0.5], dtype=torch.float64)
    loss = CoDiEmbSTSLoss(NO_MODEL)
    assert (loss.temperature, loss.infonce_temperature) == (0.05, 0.02)

    def ours(cols: list[Tensor]) -> dict[str, Tensor]:
        parts = loss.compute_loss_from_embeddings(cols[2:], labels, mid_layer_embeddings=cols[:2])
        assert set(parts) == {"pearson", "rank_kl", "pro", "mid_layer_infonce"}
        return parts

    columns = make_columns(4, len(labels), seed=42)
    official_total, official_parts = reference.official_codiemb_sts(*columns, labels)
    for name, value in ours(columns).items():
        torch.testing.assert_close(value, official_parts[name], rtol=1e-9, atol=1e-10)
    assert_matches(ours, lambda cols: reference.official_codiemb_sts(*cols, labels)[0], columns)
    # One temperature for everything (the earlier behaviour) does not reproduce the official InfoNCE.
    single = CoDiEmbSTSLoss(NO_MODEL, infonce_temperature=0.05)
    other = single.compute_loss_from_embeddings(columns[2:], labels, mid_layer_embeddings=columns[:2])
    assert other["mid_layer_infonce"].item() != pytest.approx(official_parts["mid_layer_infonce"].item(), rel=1e-3)
    assert official_total.item() > 0
