"""GradCache mode of every loss, by rows (``mini_batch_size``) or by a token budget (``mini_batch_num_tokens``):
same loss parts and parameter gradients as without it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.losses import MatryoshkaLoss

from hf_unified_embed.losses import (
    AnglEJointLoss,
    CoDiEmbSTSLoss,
    CurriculumInfoNCELoss,
    DistillKLLoss,
    DistillMarginMSELoss,
    EmbeddingLoss,
    GURLoss,
    InstructorLoss,
    KeepBaseLoss,
    MidLayerInfoNCELoss,
    MultiPositiveInfoNCELoss,
    PearsonLoss,
    PROLoss,
    RankKLLoss,
)
from hf_unified_embed.losses.embedding_loss import FINAL
from hf_unified_embed.losses.gradcache.minibatches import plan_minibatches
from hf_unified_embed.losses.parts import total_loss, with_means

QUERIES = [
    "what is the capital of france",
    "who wrote hamlet",
    "how tall is everest",
    "when did rome fall",
    "what do pandas eat",
    "who painted the mona lisa",
    "how far is the moon",
    "what is the boiling point of water",
]
POSITIVES = [
    "Paris is the capital.",
    "Shakespeare wrote it.",
    "It is 8,849 metres high.",
    "In 476 AD.",
    "Mostly bamboo.",
    "Leonardo da Vinci painted it.",
    "About 384,400 km away.",
    "100 degrees Celsius at sea level.",
]
SECOND_POSITIVES = [f"Answer: {text}" for text in POSITIVES]
NEGATIVES = [
    "Lyon is a French city.",
    "Marlowe wrote plays.",
    "K2 is 8,611 metres.",
    "Byzantium fell in 1453.",
    "Koalas eat eucalyptus.",
    "Michelangelo painted a ceiling.",
    "Mars is much farther.",
    "Ethanol boils earlier.",
]
SENTENCES1 = [
    "A man plays guitar.",
    "A woman slices onions.",
    "Kids play soccer.",
    "A dog runs.",
    "A bird sings on a branch.",
    "Two men ride horses.",
    "The sun sets over the sea.",
    "A chef cooks pasta.",
]
SENTENCES2 = [
    "A man is playing a guitar.",
    "A man eats pasta.",
    "Children play football.",
    "A cat sleeps.",
    "A bird is singing.",
    "Two people ride horses.",
    "A city at night.",
    "Someone is cooking noodles.",
]
STS_LABELS = [0.95, 0.05, 0.85, 0.2, 1.0, 0.9, 0.1, 0.6]
DIFFICULTY = [0.4, -0.1, 0.3, 0.2, 0.5, -0.3, 0.1, 0.0]
# A teacher's scores of each row's (positive, negative), as mine-negatives stores them.
TEACHER_SCORES = [[0.9, 0.4], [0.8, 0.5], [0.95, 0.3], [0.7, 0.6], [0.85, 0.2], [0.9, 0.45], [0.75, 0.5], [0.8, 0.35]]
RETRIEVAL = [QUERIES, POSITIVES, NEGATIVES]
PAIRS = [SENTENCES1, SENTENCES2]

# name -> (factory(model, **cache_options), text columns, labels)
CASES: dict[str, tuple[Callable[..., EmbeddingLoss], list[list[str]], list[Any] | None]] = {
    "multi_positive": (
        lambda m, **kw: MultiPositiveInfoNCELoss(m, positives_per_query=2, **kw),
        [QUERIES, POSITIVES, SECOND_POSITIVES, NEGATIVES],
        None,
    ),
    "multi_positive_own_group": (
        lambda m, **kw: MultiPositiveInfoNCELoss(m, in_batch_negatives=False, **kw),
        RETRIEVAL,
        None,
    ),
    "instructor": (InstructorLoss, RETRIEVAL, None),
    "curriculum": (lambda m, **kw: CurriculumInfoNCELoss(m, difficulty_threshold=0.0, **kw), RETRIEVAL, DIFFICULTY),
    "pearson": (PearsonLoss, PAIRS, STS_LABELS),
    "rank_kl": (RankKLLoss, PAIRS, STS_LABELS),
    "pro": (PROLoss, PAIRS, STS_LABELS),
    "mid_layer": (MidLayerInfoNCELoss, PAIRS, STS_LABELS),
    "codiemb_sts": (lambda m, **kw: CoDiEmbSTSLoss(m, infonce_weight=1.0, **kw), PAIRS, STS_LABELS),
    "angle_joint": (AnglEJointLoss, PAIRS, STS_LABELS),
    "gur": (GURLoss, PAIRS, None),
    "distill_kl": (DistillKLLoss, RETRIEVAL, TEACHER_SCORES),
    "distill_margin_mse": (DistillMarginMSELoss, RETRIEVAL, TEACHER_SCORES),
    # The wrapper takes the task loss's options and runs the cache itself (the base: a frozen copy, no dropout).
    "keep_base": (lambda m, **kw: KeepBaseLoss(MultiPositiveInfoNCELoss(m, **kw)), RETRIEVAL, None),
}
MINI_BATCH = 3  # 8 rows -> mini-batches of 3, 3 and 2
# Padded tokens of all columns per mini-batch: 2 to 4 of the 8 pairs (12-16 tokens a row), 1 to 2 of the
# retrieval rows (18-41 tokens a row), so mini-batches of different sizes and single rows.
TOKEN_BUDGET = 60
CACHE_OPTIONS = {"rows": {"mini_batch_size": MINI_BATCH}, "tokens": {"mini_batch_num_tokens": TOKEN_BUDGET}}


@pytest.fixture
def tiny_model(tiny_model_path: str) -> SentenceTransformer:
    torch.manual_seed(0)
    return SentenceTransformer(tiny_model_path, device="cpu")


def features_of(model: SentenceTransformer, columns: list[list[str]]) -> list[dict[str, Any]]:
    return [dict(model.preprocess(column)) for column in columns]


def run(
    loss: torch.nn.Module, model: SentenceTransformer, columns: list[list[str]], labels: list[Any] | None, seed: int
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Loss parts and the gradient of every parameter (model and loss) after one backward pass."""
    loss.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    output = loss(features_of(model, columns), torch.tensor(labels) if labels is not None else None)
    total_loss(output).backward()
    parts = dict(output) if isinstance(output, dict) else {"loss": output}
    gradients = {name: p.grad.clone() for name, p in loss.named_parameters() if p.grad is not None}
    return {name: value.detach() for name, value in parts.items()}, gradients


def assert_same(
    cached: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]],
    reference: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]],
) -> None:
    """Equal parts and gradients up to float32 rounding (different padding widths and summation orders)."""
    cached_parts, cached_grads = cached
    reference_parts, reference_grads = reference
    assert set(cached_parts) == set(reference_parts)
    for name, value in reference_parts.items():
        torch.testing.assert_close(cached_parts[name], value, rtol=1e-5, atol=1e-6)
    assert set(cached_grads) == set(reference_grads) and reference_grads
    scale = max(g.abs().max().item() for g in reference_grads.values())
    assert scale > 0
    for name, gradient in reference_grads.items():
        torch.testing.assert_close(cached_grads[name], gradient, rtol=1e-4, atol=1e-5 * scale, msg=name)


@pytest.mark.parametrize("cut", sorted(CACHE_OPTIONS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_cached_equals_uncached_without_dropout(tiny_model: SentenceTransformer, name: str, cut: str) -> None:
    factory, columns, labels = CASES[name]
    tiny_model.eval()
    torch.manual_seed(0)  # GURLoss draws its MLM head at random: the same one for both
    reference = run(factory(tiny_model), tiny_model, columns, labels, seed=1)
    torch.manual_seed(0)
    cached_loss = factory(tiny_model, **CACHE_OPTIONS[cut])
    assert cached_loss.uses_gradient_cache
    assert_same(run(cached_loss, tiny_model, columns, labels, seed=1), reference)


def partitioned_reference(
    loss: EmbeddingLoss, model: SentenceTransformer, columns: list[list[str]], labels: list[Any] | None, seed: int
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The uncached loss with the forward passes cut into the same mini-batches, run from the same seed.

    The random state then advances exactly as in the cached first pass, so each mini-batch draws the same
    dropout masks: the cached gradients equal these only if the backward pass replays those masks. Each
    row's embedding is put back at its batch position by hand (the cut runs over length-sorted rows).
    """
    loss.zero_grad(set_to_none=True)
    features = features_of(model, columns)
    torch.manual_seed(seed)
    inputs = loss.loss_inputs(features)
    context = None
    if isinstance(loss, GURLoss):
        features, context = loss._masked_columns(features)  # the draw a forward pass makes first
    rows = len(columns[0])
    plan = plan_minibatches(features, loss.mini_batch_size, loss.mini_batch_num_tokens)  # type: ignore[arg-type]
    assert len(plan) > 1
    views: dict[str, list[list[torch.Tensor | None]]] = {}
    sums: dict[str, list[torch.Tensor]] = {}
    counts: dict[str, int] = {}
    for index in range(len(plan)):
        batch_rows = plan.batch_rows(index)
        embedded = loss.embed(plan.features(features, index), context, batch_rows)
        positions = torch.arange(rows)[batch_rows].tolist()
        for view, tensors in embedded.views.items():
            views.setdefault(view, [[None] * rows for _ in tensors])
            for collected, tensor in zip(views[view], tensors):
                for position, row in zip(positions, tensor):
                    collected[position] = row
        for part, (total, count) in embedded.means.items():
            sums.setdefault(part, []).append(total)
            counts[part] = counts.get(part, 0) + count
    joined = {view: [torch.stack(by_row) for by_row in tensors] for view, tensors in views.items()}  # type: ignore[misc]
    # The loss's own entry to its maths: in float32, outside autocast, when autocast is on.
    output = loss._loss_maths(
        joined.pop(FINAL), torch.tensor(labels) if labels is not None else None, **joined, **inputs
    )
    output = with_means(output, {part: torch.stack(values).sum() / counts[part] for part, values in sums.items()})
    total_loss(output).backward()
    parts = dict(output) if isinstance(output, dict) else {"loss": output}
    gradients = {name: p.grad.clone() for name, p in loss.named_parameters() if p.grad is not None}
    return {name: value.detach() for name, value in parts.items()}, gradients


@pytest.mark.parametrize("cut", sorted(CACHE_OPTIONS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_cached_replays_dropout(tiny_model: SentenceTransformer, name: str, cut: str) -> None:
    factory, columns, labels = CASES[name]
    tiny_model.train()
    assert tiny_model[0].auto_model.config.hidden_dropout_prob > 0
    loss = factory(tiny_model, **CACHE_OPTIONS[cut])
    reference = partitioned_reference(loss, tiny_model, columns, labels, seed=3)
    cached = run(loss, tiny_model, columns, labels, seed=3)
    assert_same(cached, reference)
    if name == "multi_positive":  # dropout is really on: another seed draws other masks and another loss
        other = run(loss, tiny_model, columns, labels, seed=4)
        assert not torch.allclose(total_loss(other[0]), total_loss(cached[0]))


@pytest.mark.parametrize("cut", sorted(CACHE_OPTIONS))
def test_cached_replays_autocast(tiny_model: SentenceTransformer, cut: str) -> None:
    tiny_model.train()
    loss = MultiPositiveInfoNCELoss(tiny_model, **CACHE_OPTIONS[cut])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        reference = partitioned_reference(loss, tiny_model, RETRIEVAL, None, seed=5)
        cached = run(loss, tiny_model, RETRIEVAL, None, seed=5)
    # The replay runs in bfloat16 like the first pass: the gradients agree to bfloat16 rounding. (Replayed
    # in float32 they would not: measured relative error 1.5 instead of 0.01.)
    names = sorted(reference[1])
    expected = torch.cat([reference[1][name].flatten().float() for name in names])
    error = torch.cat([cached[1][name].flatten().float() for name in names]) - expected
    assert (error.norm() / expected.norm()).item() < 0.02


def test_cached_loss_without_gradients(tiny_model: SentenceTransformer) -> None:
    tiny_model.eval()
    features = features_of(tiny_model, PAIRS)
    labels = torch.tensor(STS_LABELS)
    with torch.no_grad():
        cached = CoDiEmbSTSLoss(tiny_model, mini_batch_size=2)(features, labels)
        plain = CoDiEmbSTSLoss(tiny_model)(features_of(tiny_model, PAIRS), labels)
    for name, value in plain.items():
        torch.testing.assert_close(cached[name], value, rtol=1e-5, atol=1e-6)


def test_mini_batch_size_is_checked(tiny_model: SentenceTransformer) -> None:
    for wrong in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="mini_batch_size"):
            PearsonLoss(tiny_model, mini_batch_size=wrong)  # type: ignore[arg-type]
    assert not PearsonLoss(tiny_model).uses_gradient_cache
    assert PearsonLoss(tiny_model, mini_batch_size=4).get_config_dict() == {"mini_batch_size": 4}


def test_cached_parts_must_be_summed_with_equal_weights(tiny_model: SentenceTransformer) -> None:
    parts = AnglEJointLoss(tiny_model, mini_batch_size=4)(features_of(tiny_model, PAIRS), torch.tensor(STS_LABELS))
    with pytest.raises(RuntimeError, match="different weights"):
        (parts["cosine"] + 2 * parts["ibn"] + parts["angle"]).backward()


def test_cached_loss_inside_matryoshka(tiny_model: SentenceTransformer) -> None:
    tiny_model.eval()
    dims = [32, 16, 8]
    # Without the intermediate layer: the cached decorator truncates every embedding, the plain wrapper
    # only the final ones.
    options = {"mid_layer_weight": 0.0, "infonce_weight": 1.0}
    plain = MatryoshkaLoss(tiny_model, CoDiEmbSTSLoss(tiny_model, **options), dims)
    reference = run(plain, tiny_model, PAIRS, STS_LABELS, 0)
    wrapped = MatryoshkaLoss(tiny_model, CoDiEmbSTSLoss(tiny_model, mini_batch_size=MINI_BATCH, **options), dims)
    assert_same(run(wrapped, tiny_model, PAIRS, STS_LABELS, 0), reference)
