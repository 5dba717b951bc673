"""``KeepBaseLoss``: self-distillation from the frozen base, and ``DistillKLLoss`` against sentence-transformers'."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from torch import nn

from hf_unified_embed import (
    CoDiEmbSTSLoss,
    DistillKLLoss,
    DistillMarginMSELoss,
    KeepBaseLoss,
    MultiPositiveInfoNCELoss,
)
from hf_unified_embed.losses.gradcache.minibatches import plan_minibatches
from hf_unified_embed.losses.parts import total_loss


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum() / (a.norm() * b.norm())


def slow_candidates(columns: list[torch.Tensor], i: int) -> list[torch.Tensor]:
    """Query i's documents: its own (in column order), then every other row's, row by row."""
    documents = len(columns) - 1
    own = [columns[1 + k][i] for k in range(documents)]
    others = [columns[1 + k][j] for j in range(columns[0].size(0)) if j != i for k in range(documents)]
    return own + others


def slow_keep_base_kl(
    student: list[torch.Tensor], base: list[torch.Tensor], tau_s: float, tau_t: float
) -> torch.Tensor:
    total = torch.zeros((), dtype=torch.float64)
    batch = student[0].size(0)
    for i in range(batch):
        s = [cosine(student[0][i], d) / tau_s for d in slow_candidates(student, i)]
        t = [((cosine(base[0][i], d) + 1) / 2) / tau_t for d in slow_candidates(base, i)]
        z_s, z_t = sum(torch.exp(x) for x in s), sum(torch.exp(x) for x in t)
        for a, b in zip(s, t):
            p, q = torch.exp(b) / z_t, torch.exp(a) / z_s
            total = total + p * torch.log(p / q)
    return total / batch


def slow_keep_base_margin(student: list[torch.Tensor], base: list[torch.Tensor], positives: int) -> torch.Tensor:
    terms = []
    for i in range(student[0].size(0)):
        s = [cosine(student[0][i], d) for d in slow_candidates(student, i)]
        t = [2 * (cosine(base[0][i], d) + 1) / 2 for d in slow_candidates(base, i)]
        for c in range(positives):
            for j in range(positives, len(s)):
                terms.append(((s[c] - s[j]) - (t[c] - t[j])) ** 2)
    return sum(terms) / len(terms)


def random_columns(seed: int, columns: int, batch: int = 4, dim: int = 6, grad: bool = True) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.randn(batch, dim, generator=generator, dtype=torch.float64, requires_grad=grad) for _ in range(columns)
    ]


def wrapped(task: nn.Module, **kwargs) -> KeepBaseLoss:
    return KeepBaseLoss(task, base=nn.Identity(), **kwargs)


@pytest.mark.parametrize(("columns", "positives"), [(2, 1), (4, 2)])
def test_kl_term_equals_the_slow_transcription_in_value_and_gradient(columns: int, positives: int) -> None:
    student, base = random_columns(1, columns), random_columns(2, columns, grad=False)
    loss = wrapped(MultiPositiveInfoNCELoss(nn.Identity(), positives_per_query=positives), weight=0.7)
    fast = 0.7 * loss.distillation.loss_from_scores(
        loss._ordered_scores(student, gather=False), (loss._ordered_scores(base, gather=False) + 1) / 2
    )
    parts = loss.compute_loss_from_embeddings(student, None, base_embeddings=base)
    torch.testing.assert_close(parts["keep_base"], fast)
    slow = 0.7 * slow_keep_base_kl(student, base, 0.02, 0.01)
    torch.testing.assert_close(fast, slow, rtol=1e-9, atol=1e-12)
    for got, expected in zip(torch.autograd.grad(fast, student), torch.autograd.grad(slow, student)):
        torch.testing.assert_close(got, expected, rtol=1e-7, atol=1e-10)
    # The task part is the wrapped loss itself.
    torch.testing.assert_close(parts["task"], loss.loss.compute_loss_from_embeddings(student, None))


def test_margin_mse_term_equals_the_slow_transcription() -> None:
    student, base = random_columns(3, 4), random_columns(4, 4, grad=False)
    loss = wrapped(
        MultiPositiveInfoNCELoss(nn.Identity(), positives_per_query=2),
        distillation=DistillMarginMSELoss(nn.Identity()),
    )
    assert loss.distillation.positives_per_query == 2
    fast = loss.distillation_term(student, base)
    slow = slow_keep_base_margin(student, base, positives=2)
    torch.testing.assert_close(fast, slow, rtol=1e-9, atol=1e-12)
    for got, expected in zip(torch.autograd.grad(fast, student), torch.autograd.grad(slow, student)):
        torch.testing.assert_close(got, expected, rtol=1e-7, atol=1e-10)


def test_a_student_equal_to_the_base_has_no_distillation_loss_or_gradient() -> None:
    student = random_columns(5, 3)
    for distillation in (None, DistillMarginMSELoss(nn.Identity())):
        loss = wrapped(CoDiEmbSTSLoss(nn.Identity(), infonce_weight=0.0), distillation=distillation)
        term = loss.distillation_term(student[:2], [column.detach() for column in student[:2]])
        assert term.item() == pytest.approx(0.0, abs=1e-12)
        assert all(g.abs().max() < 1e-9 for g in torch.autograd.grad(term, student[:2]))


def test_refuses_what_it_cannot_wrap() -> None:
    with pytest.raises(ValueError, match="standard forward"):
        KeepBaseLoss(nn.Identity(), base=nn.Identity())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="weight"):
        KeepBaseLoss(MultiPositiveInfoNCELoss(nn.Identity()), weight=-1.0, base=nn.Identity())


def test_distill_kl_equals_sentence_transformers_distill_kl_div_loss() -> None:
    from sentence_transformers.sentence_transformer.losses import DistillKLDivLoss
    from sentence_transformers.util import pairwise_cos_sim

    for tau_s, tau_t, columns in ((0.02, 0.01, 4), (0.05, 0.3, 3), (1.0, 2.0, 5)):
        embeddings = random_columns(7, columns, batch=5)
        teacher = torch.rand(5, columns - 1, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
        ours = DistillKLLoss(nn.Identity(), student_temperature=tau_s, teacher_temperature=tau_t)
        theirs = DistillKLDivLoss(
            nn.Identity(), similarity_fct=pairwise_cos_sim, student_temperature=tau_s, teacher_temperature=tau_t
        )
        mine, st = (
            ours.compute_loss_from_embeddings(embeddings, teacher),
            theirs.compute_loss_from_embeddings(embeddings, teacher),
        )
        torch.testing.assert_close(mine, st, rtol=1e-10, atol=1e-14)
        for got, expected in zip(torch.autograd.grad(mine, embeddings), torch.autograd.grad(st, embeddings)):
            torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-14)
        bare = DistillKLLoss(
            nn.Identity(), student_temperature=tau_s, teacher_temperature=tau_t, scale_by_student_temperature=False
        )
        torch.testing.assert_close(bare.compute_loss_from_embeddings(embeddings, teacher) * tau_s**2, mine)


@pytest.mark.real_model
def test_gradient_cached_keep_base_equals_uncached(tiny_model_path: str) -> None:
    from sentence_transformers import SentenceTransformer

    texts = [
        ["capital of france", "who wrote hamlet", "tallest mountain", "panda food", "fall of rome"],
        ["Paris.", "Shakespeare wrote Hamlet.", "Everest.", "Bamboo.", "476 AD."],
        ["Lyon.", "Marlowe.", "K2.", "Eucalyptus.", "1453."],
    ]
    results = []
    base = SentenceTransformer(tiny_model_path).eval()
    with torch.no_grad():
        for parameter in base.parameters():  # a base that differs from the student: a non-zero term
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(0)))
    # Uncached; 2 rows per mini-batch; a token budget (2 of the 5 rows of 3 columns per mini-batch, the rows
    # sorted by length); "auto" from a byte budget (about 60 tokens of the tiny BERT's activations).
    options: list[dict[str, Any]] = [
        {},
        {"mini_batch_size": 2},
        {"mini_batch_num_tokens": 48},
        {"mini_batch_num_tokens": "auto", "mini_batch_memory_budget": 300_000},
    ]
    for cache in options:
        model = SentenceTransformer(tiny_model_path).eval()
        loss = KeepBaseLoss(MultiPositiveInfoNCELoss(model, **cache), base=base)
        assert loss.uses_gradient_cache == bool(cache)
        assert {key: getattr(loss, key) for key in cache} == cache
        features = [dict(model.preprocess(column)) for column in texts]
        parts = loss(features, None)
        total_loss(parts).backward()
        if cache:
            assert len(plan_minibatches(features, *loss.mini_batch_sizes(features, None))) > 1
        gradient = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results.append((parts["task"].item(), parts["keep_base"].item(), gradient))
    (task, keep, gradient), *cached = results
    assert keep > 0
    for cached_task, cached_keep, cached_gradient in cached:
        assert cached_task == pytest.approx(task, rel=1e-5)
        assert cached_keep == pytest.approx(keep, rel=1e-5)
        # float32: equal up to rounding, relative to the largest gradient
        assert (cached_gradient - gradient).abs().max() < 1e-4 * gradient.abs().max()
    assert all(parameter.grad is None for parameter in base.parameters())
    assert "mini_batch_chosen" in loss.get_config_dict()  # the "auto" loss says what it chose


@pytest.mark.real_model
def test_in_the_trainer_the_base_stays_frozen_and_out_of_the_checkpoint(tiny_model_path: str, tmp_path: Path) -> None:
    from safetensors import safe_open
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    rows = Dataset.from_dict(
        {
            "query": [f"question {i} about topic {i % 5}" for i in range(16)],
            "positive": [f"answer {i} on topic {i % 5}" for i in range(16)],
            "negative": [f"unrelated text number {i}" for i in range(16)],
        }
    )
    model = SentenceTransformer(tiny_model_path)
    loss = KeepBaseLoss(MultiPositiveInfoNCELoss(model), weight=1.0)
    before = {name: value.clone() for name, value in loss.base.state_dict().items()}
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=4,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        logging_steps=1,
        save_steps=4,
        report_to="none",
        use_cpu=True,
        dataloader_pin_memory=False,
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=rows, loss=loss)
    trainer.train()
    # The base did not move, and is no trainable parameter of the optimizer.
    for name, value in loss.base.state_dict().items():
        torch.testing.assert_close(value, before[name], msg=name)
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert not optimized & {id(p) for p in loss.base.parameters()}
    assert not loss.base.training
    # The student moved; both parts were logged.
    moved = any(not torch.equal(value, before[name]) for name, value in model.state_dict().items() if name in before)
    assert moved
    logged = [entry for entry in trainer.state.log_history if "keep_base" in entry]
    assert logged and all("task" in entry for entry in logged)
    # The checkpoint holds the trained model's tensors only, the same names as a saved plain model.
    checkpoint = tmp_path / "run" / "checkpoint-4"
    with safe_open(str(checkpoint / "model.safetensors"), "pt") as handle:
        saved = set(handle.keys())
    model.save(str(tmp_path / "plain"))
    with safe_open(str(tmp_path / "plain" / "model.safetensors"), "pt") as handle:
        assert saved == set(handle.keys())
    assert not list(checkpoint.rglob("*base*"))
    config = json.loads((checkpoint / "config_sentence_transformers.json").read_text())
    assert "keep_base" not in json.dumps(config)
