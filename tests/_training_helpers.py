"""Fixtures-by-function for the training-bridge tests: unified rows and a tiny trainer run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from datasets import Dataset, DatasetDict
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from torch import nn

from hf_unified_embed.schema import unified_features
from hf_unified_embed.training import UnifiedDataCollator


def unified_row(
    task: str,
    query: str,
    positives: Sequence[str],
    negatives: Sequence[str] = (),
    *,
    task_type: str = "retrieval",
    positive_scores: Sequence[float] = (),
    query_instruction: str = "",
    document_instruction: str = "",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "task": task,
        "task_type": task_type,
        "query_instruction": query_instruction,
        "document_instruction": document_instruction,
        "query": query,
        "positives": list(positives),
        "negatives": list(negatives),
        "positive_scores": list(positive_scores),
        "negative_scores": [],
        **extra,
    }


def unified_dataset(rows: Sequence[Mapping[str, Any]]) -> Dataset:
    with_difficulty = "difficulty" in rows[0]
    return Dataset.from_list(list(rows), features=unified_features(with_difficulty=with_difficulty))


def train_steps(
    model: SentenceTransformer,
    train: DatasetDict,
    losses: Mapping[str, nn.Module],
    output_dir: Path,
    *,
    max_steps: int,
    batch_size: int = 8,
    learning_rate: float = 1e-3,
    negatives_per_query: int = 2,
    seed: int = 7,
) -> tuple[SentenceTransformerTrainer, list[float]]:
    """Train ``max_steps`` with an ordinary trainer and the bridge; return it and the per-step losses."""
    collator = UnifiedDataCollator.for_losses(model, train, losses, negatives_per_query=negatives_per_query, seed=seed)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir),
        max_steps=max_steps,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        warmup_steps=0,
        lr_scheduler_type="constant",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=seed,
        data_seed=seed,
        use_cpu=True,
        dataloader_drop_last=True,
        prompts=collator.prompts,
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=train,
        loss=dict(losses),
        data_collator=collator,
        callbacks=[collator.epoch_callback()],
    )
    trainer.train()
    return trainer, [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
