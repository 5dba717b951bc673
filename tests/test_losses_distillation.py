"""Distillation losses: equations against slow transcriptions, the collator's teacher-score labels, training."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from _training_helpers import train_steps, unified_dataset, unified_row
from conftest import make_tiny_model
from datasets import DatasetDict
from sentence_transformers import SentenceTransformer

from hf_unified_embed import DistillKLLoss, DistillMarginMSELoss, HardNegativeConfig, mine_hard_negatives
from hf_unified_embed.errors import UnifiedSchemaError
from hf_unified_embed.losses import ColumnLayout
from hf_unified_embed.training import UnifiedDataCollator, losses_for_tasks


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a @ b) / (a.norm() * b.norm())


def slow_kl(embeddings: list[torch.Tensor], teacher: torch.Tensor, tau_s: float, tau_t: float) -> torch.Tensor:
    """Σ_i Σ_j p_ij log(p_ij / q_ij) / B, one query and one document at a time."""
    total = torch.zeros((), dtype=torch.float64)
    batch, documents = embeddings[0].size(0), len(embeddings) - 1
    for i in range(batch):
        student = [cosine(embeddings[0][i], embeddings[1 + j][i]) / tau_s for j in range(documents)]
        target = [teacher[i, j] / tau_t for j in range(documents)]
        z_s = sum(torch.exp(s) for s in student)
        z_t = sum(torch.exp(t) for t in target)
        for j in range(documents):
            p, q = torch.exp(target[j]) / z_t, torch.exp(student[j]) / z_s
            total = total + p * torch.log(p / q)
    return total / batch


def slow_margin_mse(
    embeddings: list[torch.Tensor], teacher: torch.Tensor, positives: int, scale: float
) -> torch.Tensor:
    terms = []
    for i in range(embeddings[0].size(0)):
        for c in range(positives):
            for j in range(positives, len(embeddings) - 1):
                student = cosine(embeddings[0][i], embeddings[1 + c][i]) - cosine(
                    embeddings[0][i], embeddings[1 + j][i]
                )
                terms.append((student - scale * (teacher[i, c] - teacher[i, j])) ** 2)
    return sum(terms) / len(terms)


def random_batch(seed: int, batch: int = 5, columns: int = 6, dim: int = 7) -> tuple[list[torch.Tensor], torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    embeddings = [
        torch.randn(batch, dim, generator=generator, dtype=torch.float64, requires_grad=True) for _ in range(columns)
    ]
    teacher = torch.rand(batch, columns - 1, generator=generator, dtype=torch.float64)
    return embeddings, teacher


@pytest.mark.parametrize(("tau_s", "tau_t", "positives"), [(0.02, 0.01, 1), (0.05, 0.3, 2), (1.0, 1.0, 3)])
def test_kl_equals_the_slow_transcription_in_value_and_gradient(tau_s, tau_t, positives):
    embeddings, teacher = random_batch(seed=positives)
    loss = DistillKLLoss(
        torch.nn.Identity(), positives_per_query=positives, student_temperature=tau_s, teacher_temperature=tau_t
    )
    fast = loss.compute_loss_from_embeddings(embeddings, teacher)
    slow = slow_kl(embeddings, teacher, tau_s, tau_t) * tau_s**2  # sentence-transformers' τ_s² scaling
    torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-12)
    for got, expected in zip(torch.autograd.grad(fast, embeddings), torch.autograd.grad(slow, embeddings)):
        torch.testing.assert_close(got, expected, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize(("positives", "scale"), [(1, 2.0), (2, 1.0), (4, 3.5)])
def test_margin_mse_equals_the_slow_transcription_in_value_and_gradient(positives, scale):
    embeddings, teacher = random_batch(seed=10 + positives)
    loss = DistillMarginMSELoss(torch.nn.Identity(), positives_per_query=positives, teacher_scale=scale)
    fast = loss.compute_loss_from_embeddings(embeddings, teacher)
    slow = slow_margin_mse(embeddings, teacher, positives, scale)
    torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-12)
    for got, expected in zip(torch.autograd.grad(fast, embeddings), torch.autograd.grad(slow, embeddings)):
        torch.testing.assert_close(got, expected, rtol=1e-8, atol=1e-10)


def test_a_student_equal_to_its_bi_encoder_teacher_has_zero_loss():
    embeddings, _ = random_batch(seed=3)
    query = torch.nn.functional.normalize(embeddings[0], dim=1)
    cosines = torch.stack([(query * torch.nn.functional.normalize(e, dim=1)).sum(1) for e in embeddings[1:]], dim=1)
    stored = (cosines + 1) / 2  # how mine-negatives stores a bi-encoder teacher's scores
    for loss in (DistillKLLoss(torch.nn.Identity()), DistillMarginMSELoss(torch.nn.Identity())):
        assert loss.compute_loss_from_embeddings(embeddings, stored.detach()).item() == pytest.approx(0.0, abs=1e-12)


def test_inputs_are_checked():
    embeddings, teacher = random_batch(seed=4)
    kl = DistillKLLoss(torch.nn.Identity())
    with pytest.raises(
        ValueError, match=r"needs the teacher's score of every document column as labels, shape \(5, 5\)"
    ):
        kl.compute_loss_from_embeddings(embeddings, teacher[:, :3])
    with pytest.raises(ValueError, match="non-finite"):
        kl.compute_loss_from_embeddings(embeddings, teacher.masked_fill(teacher > 0.5, math.nan))
    with pytest.raises(ValueError, match="at least one hard negative"):
        DistillMarginMSELoss(torch.nn.Identity(), positives_per_query=5).compute_loss_from_embeddings(
            embeddings, teacher
        )
    with pytest.raises(ValueError, match="negatives_per_query >= 1"):
        DistillMarginMSELoss(torch.nn.Identity()).column_layout("retrieval", 0)
    layout = DistillKLLoss(torch.nn.Identity(), positives_per_query=2).column_layout("retrieval", 3)
    assert layout == ColumnLayout(positives=2, negatives=3, label="teacher_scores")
    assert layout.describe() == "query, positive_1..2, negative_1..3 + label: teacher_scores"


# --- the collator passes the teacher's scores of the drawn texts ---------------------------------


def scored_row(query: str, positives: int, negatives: int, **extra):
    return unified_row(
        "qa",
        query,
        [f"{query} positive {i}" for i in range(positives)],
        [f"{query} negative {i}" for i in range(negatives)],
        positive_scores=[0.9 - 0.01 * i for i in range(positives)],
        negative_scores=[0.5 - 0.01 * i for i in range(negatives)],
        **extra,
    )


def test_collator_labels_are_the_scores_of_the_drawn_columns():
    rows = [scored_row(f"q{i}", positives=1 + i % 3, negatives=1 + i % 4) for i in range(8)]
    collator = UnifiedDataCollator(
        preprocess_fn=lambda texts, **kwargs: {"input_ids": torch.zeros(len(texts), 1)},
        layouts={"qa": ColumnLayout(positives=2, negatives=3, label="teacher_scores")},
    )
    for epoch in range(3):
        collator.set_epoch(epoch)
        for source, columns in zip(rows, collator.to_columns(rows)):
            score_of = dict(
                zip(source["positives"] + source["negatives"], source["positive_scores"] + source["negative_scores"])
            )
            texts = [columns[name] for name in ("positive_1", "positive_2", "negative_1", "negative_2", "negative_3")]
            assert columns["label"] == pytest.approx([score_of[text] for text in texts])


def test_collator_refuses_rows_without_teacher_scores():
    layouts = {"qa": ColumnLayout(positives=1, negatives=2, label="teacher_scores")}
    collator = UnifiedDataCollator(preprocess_fn=lambda texts, **kwargs: {}, layouts=layouts)
    with pytest.raises(UnifiedSchemaError, match="field 'negatives': query 'q1' has no hard negatives"):
        collator.to_columns([scored_row("q0", 1, 2), scored_row("q1", 1, 0)])
    unscored = {**scored_row("q2", 1, 2), "negative_scores": []}
    with pytest.raises(UnifiedSchemaError, match="field 'negative_scores': is empty"):
        collator.to_columns([unscored])


# --- mine with a teacher, then distil it ----------------------------------------------------------


@pytest.fixture(scope="module")
def mined(tmp_path_factory: pytest.TempPathFactory, minilm_path: str) -> DatasetDict:
    teacher = SentenceTransformer(
        make_tiny_model(tmp_path_factory.mktemp("teacher"), minilm_path, seed=1), device="cpu"
    )
    topics = ["river", "castle", "engine", "violin", "glacier", "market", "orbit", "harvest"]
    rows = [
        unified_row("qa", f"what about the {topics[i % 8]} number {i}", [f"the {topics[i % 8]} fact {i}"])
        for i in range(48)
    ]
    corpus = [f"a {topics[i % 8]} and a {topics[(i * 3) % 8]} note {i}" for i in range(200)]
    config = HardNegativeConfig(num_negatives=3, relative_margin=None)
    result = mine_hard_negatives(
        {"qa": unified_dataset(rows)}, teacher, config, corpus=corpus, show_progress_bar=False
    )
    assert all(len(row["negatives"]) == 3 for row in result.tasks["qa"])
    return result.tasks


@pytest.mark.parametrize(
    ("loss_class", "kwargs"),
    [(DistillKLLoss, {"student_temperature": 0.05, "teacher_temperature": 0.025}), (DistillMarginMSELoss, {})],
)
def test_distilling_the_mining_teacher_lowers_the_loss(
    mined, tiny_model_path: str, tmp_path: Path, loss_class, kwargs
):
    model = SentenceTransformer(tiny_model_path, device="cpu")
    losses = losses_for_tasks(model, mined, {"retrieval": (loss_class, kwargs)})
    _, step_losses = train_steps(
        model, mined, losses, tmp_path, max_steps=12, batch_size=8, learning_rate=2e-3, negatives_per_query=3
    )
    assert len(step_losses) == 12 and np.all(np.isfinite(step_losses))
    assert np.mean(step_losses[-3:]) < np.mean(step_losses[:3]), step_losses


def test_distillation_losses_are_selectable_by_name_in_a_training_recipe(mined, tiny_model_path: str, tmp_path: Path):
    from hf_unified_embed.data import save_unified
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe

    data = save_unified(mined, tmp_path / "mined")
    recipe = recipe_from_dict(
        {
            "base_model": tiny_model_path,
            "data": {"path": str(data)},
            "losses": {"retrieval": {"name": "DistillMarginMSELoss", "teacher_scale": 2.0}},
            "negatives_per_query": 2,
            "training_args": {"max_steps": 2, "per_device_train_batch_size": 4},
            "output_dir": str(tmp_path / "model"),
        }
    )
    outcome = train_from_recipe(recipe)
    assert outcome.train_loss is not None and math.isfinite(outcome.train_loss)
    assert "DistillMarginMSELoss" in (tmp_path / "model" / "README.md").read_text()
