"""A cached retrieval loss on large batches next to an uncached STS loss on small ones, in one trainer run."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import DatasetDict
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from torch import nn

import hf_unified_embed.losses.embedding_loss as loss_base
from hf_unified_embed.losses import CoDiEmbSTSLoss, MultiPositiveInfoNCELoss
from hf_unified_embed.recipe import recipe_from_dict
from hf_unified_embed.sampling import CurriculumBatchSampler
from hf_unified_embed.training import UnifiedDataCollator, losses_for_tasks
from tests._training_helpers import unified_dataset, unified_row

RETRIEVAL_BATCH, STS_BATCH, MINI_BATCH = 12, 4, 5


def tasks() -> DatasetDict:
    retrieval = [
        unified_row("qa", f"question {i} about topic {i % 5}", [f"answer {i}", f"another answer {i}"], [f"wrong {i}"])
        for i in range(24)
    ]
    retrieval[3]["positives"] = ["answer 0"]  # a duplicate answer: a false negative for rows 0 and 3
    sts = [
        unified_row("sts", f"sentence {i}", [f"sentence {i} reworded"], task_type="sts", positive_scores=[i / 11])
        for i in range(12)
    ]
    return DatasetDict({"qa": unified_dataset(retrieval), "sts": unified_dataset(sts)})


def test_recipe_losses_take_the_cache_and_in_batch_options() -> None:
    # The options are plain loss keyword arguments, so a recipe sets them per task (type or name).
    recipe = recipe_from_dict(
        {
            "data": "unified",
            "losses": {
                "retrieval": {"name": "MultiPositiveInfoNCELoss", "mini_batch_size": 32, "in_batch_negatives": False},
                "sts": {"name": "CoDiEmbSTSLoss", "infonce_temperature": 0.02, "mask_false_negatives": False},
            },
            "output_dir": "out",
        }
    )
    model = nn.Identity()
    loss = MultiPositiveInfoNCELoss(model, **{k: v for k, v in recipe.losses["retrieval"].items() if k != "name"})
    assert loss.uses_gradient_cache and loss.get_config_dict()["mini_batch_size"] == 32
    assert not loss.in_batch_negatives
    recipe = recipe_from_dict(
        {
            "data": "unified",
            "losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss", "mini_batch_num_tokens": "auto"}},
            "output_dir": "out",
        }
    )
    options = {k: v for k, v in recipe.losses["retrieval"].items() if k != "name"}
    assert MultiPositiveInfoNCELoss(model, **options).get_config_dict()["mini_batch_num_tokens"] == "auto"


CACHE_OPTIONS: dict[str, dict[str, Any]] = {
    "rows": {"mini_batch_size": MINI_BATCH},
    "tokens": {"mini_batch_num_tokens": 40},
    # About 60 tokens of the tiny BERT's activations: several mini-batches of the 12 rows x 4 columns.
    "auto": {"mini_batch_num_tokens": "auto", "mini_batch_memory_budget": 300_000},
}


@pytest.mark.parametrize("cut", sorted(CACHE_OPTIONS))
def test_cached_and_uncached_tasks_train_together(
    tiny_model_path: str,
    tmp_path: Path,
    cut: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = SentenceTransformer(tiny_model_path, device="cpu")
    train = tasks()
    choices = []
    choose = loss_base.choose_auto
    monkeypatch.setattr(loss_base, "choose_auto", lambda *args: choices.append(choose(*args)) or choices[-1])
    losses = losses_for_tasks(
        model,
        train,
        {
            "retrieval": (MultiPositiveInfoNCELoss, {"positives_per_query": 2, **CACHE_OPTIONS[cut]}),
            "sts": CoDiEmbSTSLoss,
        },
    )
    seen: dict[str, list[int]] = {"qa": [], "sts": []}
    for task, loss in losses.items():
        loss.register_forward_pre_hook(lambda _, args, task=task: seen[task].append(args[0][0]["input_ids"].size(0)))
    collator = UnifiedDataCollator.for_losses(model, train, losses, negatives_per_query=1, seed=0)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path),
        max_steps=4,
        per_device_train_batch_size=STS_BATCH,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        use_cpu=True,
        dataloader_drop_last=True,
        prompts=collator.prompts,
        multi_dataset_batch_sampler=CurriculumBatchSampler.configure(
            interleave="round_robin", batch_sizes={"qa": RETRIEVAL_BATCH}
        ),
    )
    before = model[0].auto_model.embeddings.word_embeddings.weight.detach().clone()
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=train, loss=losses, data_collator=collator
    )
    with caplog.at_level(logging.INFO, logger="hf_unified_embed.losses.gradcache.auto_mini_batch"):
        trainer.train()
    assert seen == {"qa": [RETRIEVAL_BATCH] * 2, "sts": [STS_BATCH] * 2}
    if cut == "auto":  # sized once, at the first retrieval step, logged, and kept for the second
        assert len(choices) == 1 and losses["qa"].auto_mini_batch is choices[0]
        assert [r.getMessage() for r in caplog.records] == [f"MultiPositiveInfoNCELoss: {choices[0].describe()}"]
        assert 1 < choices[0].mini_batch_num_tokens < 12 * 30  # type: ignore[operator]
    else:
        assert not choices
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 4 and all(math.isfinite(entry["loss"]) for entry in logged)
    assert any("pearson" in entry for entry in logged)  # the STS steps log their parts
    assert not torch.equal(model[0].auto_model.embeddings.word_embeddings.weight, before)
