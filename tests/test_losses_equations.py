"""Every loss against a slow float64 loop transcription of its paper equation: value and gradient."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

import tests._loss_references as reference
from hf_unified_embed.losses import (
    AnglEJointLoss,
    CoDiEmbSTSLoss,
    CurriculumInfoNCELoss,
    InstructorLoss,
    MidLayerInfoNCELoss,
    MultiPositiveInfoNCELoss,
    PearsonLoss,
    PROLoss,
    RankKLLoss,
)

DIM = 8
BATCH_SIZES = [1, 2, 5, 9]
LABEL_KINDS = ["distinct", "ties", "all_equal"]
NO_MODEL = nn.Identity()  # the maths never touches the model


def make_columns(columns: int, batch_size: int, seed: int) -> list[Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.randn(batch_size, DIM, generator=generator, dtype=torch.float64).requires_grad_() for _ in range(columns)
    ]


def make_labels(kind: str, batch_size: int, seed: int) -> Tensor:
    generator = torch.Generator().manual_seed(seed + 1000)
    if kind == "distinct":
        return torch.rand(batch_size, generator=generator, dtype=torch.float64)
    if kind == "ties":  # STS-style discrete scores 0, 0.2, ..., 1: many ties
        return torch.randint(0, 6, (batch_size,), generator=generator).double() / 5
    return torch.full((batch_size,), 0.6, dtype=torch.float64)


def total(output: Tensor | dict[str, Tensor]) -> Tensor:
    return sum(output.values()) if isinstance(output, dict) else output  # type: ignore[return-value]


def assert_matches(
    compute: Callable[[list[Tensor]], Tensor | dict[str, Tensor]],
    transcription: Callable[[list[Tensor]], Tensor],
    columns: list[Tensor],
) -> None:
    """Same value and same gradient with respect to every input column."""
    fast_inputs = [column.detach().clone().requires_grad_() for column in columns]
    slow_inputs = [column.detach().clone().requires_grad_() for column in columns]
    fast = total(compute(fast_inputs))
    slow = transcription(slow_inputs)
    torch.testing.assert_close(fast, slow, rtol=1e-9, atol=1e-10)
    fast.backward()
    slow.backward()
    for fast_input, slow_input in zip(fast_inputs, slow_inputs):
        fast_grad = fast_input.grad if fast_input.grad is not None else torch.zeros_like(fast_input)
        slow_grad = slow_input.grad if slow_input.grad is not None else torch.zeros_like(slow_input)
        torch.testing.assert_close(fast_grad, slow_grad, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("batch_size", [1, 3, 6])
@pytest.mark.parametrize(("positives", "negatives"), [(1, 0), (1, 2), (3, 0), (3, 2)])
def test_multi_positive_infonce(batch_size: int, positives: int, negatives: int) -> None:
    loss = MultiPositiveInfoNCELoss(NO_MODEL, positives_per_query=positives)
    assert_matches(
        lambda cols: loss.compute_loss_from_embeddings(cols, None),
        lambda cols: reference.multi_positive_infonce(cols, positives, loss.temperature),
        make_columns(1 + positives + negatives, batch_size, seed=batch_size * 10 + positives),
    )


def test_multi_positive_infonce_with_one_positive_is_mnrl() -> None:
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    columns = make_columns(3, 6, seed=3)
    ours = MultiPositiveInfoNCELoss(NO_MODEL, temperature=0.05).compute_loss_from_embeddings(columns, None)
    theirs = MultipleNegativesRankingLoss(NO_MODEL, scale=20.0).compute_loss_from_embeddings(columns, None)  # type: ignore[arg-type]
    torch.testing.assert_close(ours, theirs)


def test_multi_positive_infonce_does_not_count_own_positives_as_negatives() -> None:
    # One query with three positives and nothing else: each positive competes only with itself.
    loss = MultiPositiveInfoNCELoss(NO_MODEL, positives_per_query=3)
    assert loss.compute_loss_from_embeddings(make_columns(4, 1, seed=5), None).item() == 0.0


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
@pytest.mark.parametrize("labels_kind", LABEL_KINDS)
def test_pearson(batch_size: int, labels_kind: str) -> None:
    labels = make_labels(labels_kind, batch_size, seed=batch_size)
    loss = PearsonLoss(NO_MODEL)
    assert_matches(
        lambda cols: loss.compute_loss_from_embeddings(cols, labels),
        lambda cols: reference.pearson(cols[0], cols[1], labels),
        make_columns(2, batch_size, seed=batch_size),
    )


def test_pearson_definitions() -> None:
    first, second = make_columns(2, 5, seed=1)
    loss = PearsonLoss(NO_MODEL)
    equal = loss.compute_loss_from_embeddings([first, second], torch.full((5,), 0.3, dtype=torch.float64))
    assert equal.item() == 0.0
    equal.backward()
    assert first.grad is not None and torch.count_nonzero(first.grad) == 0
    # identical predictions (one embedding for every pair) but varying labels: r is taken as 0
    same = torch.ones(5, DIM, dtype=torch.float64)
    assert loss.compute_loss_from_embeddings([same, same], torch.rand(5, dtype=torch.float64)).item() == pytest.approx(
        1.0
    )
    # perfect agreement gives 0, perfect disagreement 2
    scores = torch.nn.functional.cosine_similarity(first, second).detach()
    assert loss.compute_loss_from_embeddings([first, second], scores * 3 + 1).item() == pytest.approx(0.0, abs=1e-12)
    assert loss.compute_loss_from_embeddings([first, second], -scores).item() == pytest.approx(2.0)


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
@pytest.mark.parametrize("labels_kind", LABEL_KINDS)
@pytest.mark.parametrize("reduction", ["sum", "batchmean"])
def test_rank_kl(batch_size: int, labels_kind: str, reduction: str) -> None:
    labels = make_labels(labels_kind, batch_size, seed=batch_size)
    loss = RankKLLoss(NO_MODEL, reduction=reduction)  # type: ignore[arg-type]
    divisor = batch_size if reduction == "batchmean" else 1
    assert_matches(
        lambda cols: loss.compute_loss_from_embeddings(cols, labels),
        lambda cols: reference.rank_kl(cols[0], cols[1], labels, loss.temperature) / divisor,
        make_columns(2, batch_size, seed=batch_size + 1),
    )


def test_average_ranks_match_scipy() -> None:
    from scipy.stats import rankdata

    from hf_unified_embed.losses.rank_kl import average_descending_ranks

    labels = torch.tensor([0.2, 0.8, 0.2, 1.0, 0.8, 0.8, 0.0], dtype=torch.float64)
    expected = rankdata(-labels.numpy(), method="average") - 1
    torch.testing.assert_close(average_descending_ranks(labels), torch.from_numpy(expected))


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
@pytest.mark.parametrize("labels_kind", LABEL_KINDS)
def test_pro(batch_size: int, labels_kind: str) -> None:
    labels = make_labels(labels_kind, batch_size, seed=batch_size)
    loss = PROLoss(NO_MODEL)
    assert_matches(
        lambda cols: loss.compute_loss_from_embeddings(cols, labels),
        lambda cols: reference.pro(cols[0], cols[1], labels, loss.temperature),
        make_columns(2, batch_size, seed=batch_size + 2),
    )


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
@pytest.mark.parametrize("labels_kind", [*LABEL_KINDS, "none_positive"])
def test_mid_layer_infonce(batch_size: int, labels_kind: str) -> None:
    labels = make_labels("distinct", batch_size, 0) * 0.5 if labels_kind == "none_positive" else None
    labels = make_labels(labels_kind, batch_size, seed=batch_size) if labels is None else labels
    loss = MidLayerInfoNCELoss(NO_MODEL, positive_threshold=0.5)
    assert_matches(
        lambda cols: loss.compute_loss_from_embeddings(cols, labels),
        lambda cols: reference.thresholded_infonce(cols[0], cols[1], labels, loss.temperature, 0.5),
        make_columns(2, batch_size, seed=batch_size + 3),
    )


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
@pytest.mark.parametrize("labels_kind", LABEL_KINDS)
def test_codiemb_sts(batch_size: int, labels_kind: str) -> None:
    labels = make_labels(labels_kind, batch_size, seed=batch_size)
    loss = CoDiEmbSTSLoss(NO_MODEL, infonce_weight=0.7, positive_threshold=0.5)

    def compute(cols: list[Tensor]) -> dict[str, Tensor]:
        parts = loss.compute_loss_from_embeddings(cols[:2], labels, mid_layer_embeddings=cols[2:])
        assert set(parts) == {"pearson", "rank_kl", "pro", "mid_layer_infonce", "infonce"}
        return parts

    def transcription(cols: list[Tensor]) -> Tensor:
        first, second, mid_first, mid_second = cols
        return (
            2.0 * reference.pearson(first, second, labels)
            + 5.0 * reference.rank_kl(first, second, labels, 0.05) / batch_size
            + 0.5 * reference.pro(first, second, labels, 0.05)
            + 1.0 * reference.thresholded_infonce(mid_first, mid_second, labels, 0.02, 0.5)
            + 0.7 * reference.thresholded_infonce(first, second, labels, 0.02, 0.5)
        )

    assert_matches(compute, transcription, make_columns(4, batch_size, seed=batch_size + 4))


def test_codiemb_sts_weights_switch_parts_off() -> None:
    loss = CoDiEmbSTSLoss(NO_MODEL, pearson_weight=0.0, mid_layer_weight=0.0)
    columns = make_columns(2, 4, seed=0)
    parts = loss.compute_loss_from_embeddings(columns, make_labels("distinct", 4, 0))
    assert set(parts) == {"rank_kl", "pro"}
    with pytest.raises(ValueError, match="at least one positive weight"):
        CoDiEmbSTSLoss(NO_MODEL, pearson_weight=0, rank_kl_weight=0, pro_weight=0, mid_layer_weight=0)
    with pytest.raises(ValueError, match="mid_layer_embeddings"):
        CoDiEmbSTSLoss(NO_MODEL).compute_loss_from_embeddings(columns, make_labels("distinct", 4, 0))


def texts_for(batch_size: int) -> tuple[list[str], list[str]]:
    """Sentence texts with duplicates inside and across the two columns."""
    pool = ["a", "b", "c", "d"]
    first = [pool[i % 3] for i in range(batch_size)]
    second = [pool[(i * 2 + 1) % 4] for i in range(batch_size)]
    return first, second


def ids_for(texts: tuple[list[str], list[str]]) -> list[Tensor]:
    vocabulary: dict[str, int] = {}
    return [torch.tensor([vocabulary.setdefault(text, len(vocabulary)) for text in column]) for column in texts]


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
@pytest.mark.parametrize("labels_kind", LABEL_KINDS)
@pytest.mark.parametrize("with_texts", [False, True])
def test_angle_joint(batch_size: int, labels_kind: str, with_texts: bool) -> None:
    labels = make_labels(labels_kind, batch_size, seed=batch_size)
    texts = texts_for(batch_size) if with_texts else None
    loss = AnglEJointLoss(NO_MODEL, cosine_weight=1.0, ibn_weight=0.5, angle_weight=2.0, positive_threshold=0.5)

    def transcription(cols: list[Tensor]) -> Tensor:
        first, second = cols
        cosine = [reference.cos(first[i], second[i]) * 20.0 for i in range(batch_size)]
        angle = [reference.angle_score(first[i], second[i]) * 1.0 for i in range(batch_size)]
        return (
            reference.cosent(cosine, labels)
            + 0.5 * reference.angle_ibn(first, second, labels, 20.0, 0.5, texts)
            + 2.0 * reference.cosent(angle, labels)
        )

    assert_matches(
        lambda cols: loss.compute_loss_from_embeddings(cols, labels, text_ids=ids_for(texts) if texts else None),
        transcription,
        make_columns(2, batch_size, seed=batch_size + 5),
    )


def test_angle_term_matches_sentence_transformers_angle_loss() -> None:
    from sentence_transformers.sentence_transformer.losses import AnglELoss

    columns = make_columns(2, 7, seed=11)
    labels = make_labels("ties", 7, seed=11)
    ours = AnglEJointLoss(NO_MODEL, cosine_weight=0, ibn_weight=0, angle_scale=20.0)
    theirs = AnglELoss(NO_MODEL)  # type: ignore[arg-type]
    torch.testing.assert_close(
        ours.compute_loss_from_embeddings(columns, labels)["angle"],
        theirs.compute_loss_from_embeddings(columns, labels),
    )


def test_angle_ibn_binarises_graded_labels_with_the_threshold() -> None:
    columns = make_columns(2, 4, seed=2)
    graded = torch.tensor([0.95, 0.9, 0.3, 0.1], dtype=torch.float64)
    loss = AnglEJointLoss(NO_MODEL, cosine_weight=0, angle_weight=0, positive_threshold=0.8)
    expected = reference.angle_ibn(columns[0], columns[1], graded, 20.0, 0.8, None)
    torch.testing.assert_close(loss.compute_loss_from_embeddings(columns, graded)["ibn"], expected)
    nothing_positive = loss.compute_loss_from_embeddings(columns, graded * 0.5)["ibn"]
    assert nothing_positive.item() == 0.0


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
@pytest.mark.parametrize("negatives", [0, 1, 3])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_instructor(batch_size: int, negatives: int, bidirectional: bool) -> None:
    loss = InstructorLoss(NO_MODEL, bidirectional=bidirectional)
    assert_matches(
        lambda cols: loss.compute_loss_from_embeddings(cols, None),
        lambda cols: reference.instructor(cols, loss.temperature, bidirectional),
        make_columns(2 + negatives, batch_size, seed=batch_size + 6 + negatives),
    )


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
@pytest.mark.parametrize("negatives", [0, 2])
@pytest.mark.parametrize("threshold", [None, 0.0, 10.0])
def test_curriculum_infonce(batch_size: int, negatives: int, threshold: float | None) -> None:
    generator = torch.Generator().manual_seed(batch_size)
    difficulty = torch.randn(batch_size, generator=generator, dtype=torch.float64)
    loss = CurriculumInfoNCELoss(NO_MODEL, difficulty_threshold=threshold)
    assert_matches(
        lambda cols: loss.compute_loss_from_embeddings(cols, difficulty),
        lambda cols: reference.curriculum_infonce(cols, difficulty, loss.temperature, threshold),
        make_columns(2 + negatives, batch_size, seed=batch_size + 7 + negatives),
    )


def test_curriculum_masked_rows_remain_negatives() -> None:
    columns = make_columns(3, 4, seed=8)
    difficulty = torch.tensor([0.5, -0.2, 0.3, -0.9], dtype=torch.float64)
    masked = CurriculumInfoNCELoss(NO_MODEL, difficulty_threshold=0.0).compute_loss_from_embeddings(
        columns, difficulty
    )
    # Dropping the masked rows from the batch instead would remove their sentences from the denominators.
    kept = [column[[0, 2]] for column in columns]
    dropped = CurriculumInfoNCELoss(NO_MODEL).compute_loss_from_embeddings(kept, None)
    assert masked.item() > dropped.item()
    # The masked rows' sentences receive gradient (as negatives), their queries do not.
    masked.backward()
    assert columns[0].grad is not None and torch.count_nonzero(columns[0].grad[[1, 3]]) == 0
    assert columns[1].grad is not None and torch.count_nonzero(columns[1].grad[[1, 3]]) > 0


def test_curriculum_needs_difficulty_labels_when_masking() -> None:
    with pytest.raises(ValueError, match="difficulty"):
        CurriculumInfoNCELoss(NO_MODEL, difficulty_threshold=0.1).compute_loss_from_embeddings(
            make_columns(2, 3, 0), None
        )
