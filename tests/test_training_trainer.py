"""Every loss trains inside an ordinary SentenceTransformerTrainer on real data converted by the adapters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from datasets import DatasetDict
from huggingface_hub import ModelCard
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments

from hf_unified_embed import losses as hue
from hf_unified_embed.data import build_unified
from hf_unified_embed.training import (
    UnifiedDataCollator,
    exclude_instructions_from_pooling,
    losses_for_tasks,
    prompts_from_unified,
)
from tests._training_helpers import train_steps

RETRIEVAL_INSTRUCTIONS = {
    "query_instruction": "Represent the question for retrieving supporting answers: ",
    "document_instruction": "Represent the answer sentence for retrieval: ",
}


def real_tasks(data: Path, rows: int) -> DatasetDict:
    """STS-B, SICK, WikiQA and TrecQA from ../shared/data through the foundation's adapters."""
    return build_unified(
        {
            "sources": [
                {
                    "name": "stsb",
                    "format": "stsb",
                    "data_files": str(data / "sts/stsbenchmark/sts-train.csv"),
                    "task_type": "sts",
                    "max_rows": rows,
                },
                {
                    "name": "sick",
                    "format": "sick",
                    "data_files": str(data / "sts/sick2014/SICK_train.txt"),
                    "task_type": "sts",
                    "max_rows": rows,
                },
                {
                    "name": "wikiqa",
                    "format": "wikiqa",
                    "data_files": str(data / "ir/wikiqa/train.tsv"),
                    "task_type": "retrieval",
                    "max_rows": rows,
                    **RETRIEVAL_INSTRUCTIONS,
                },
                {
                    "name": "trecqa",
                    "format": "trecqa",
                    "data_files": str(data / "ir/trecqa/train.csv"),
                    "task_type": "retrieval",
                    "max_rows": rows,
                    **RETRIEVAL_INSTRUCTIONS,
                },
            ]
        }
    )


@pytest.fixture(scope="module")
def tasks(shared_data: Path) -> DatasetDict:
    return real_tasks(shared_data, rows=16)


def _with_difficulty(tasks: DatasetDict, task: str) -> DatasetDict:
    # Stand-in for the curriculum planner's φ: a spread that puts some rows under the threshold.
    dataset = tasks[task]
    phi = np.linspace(-0.4, 0.8, len(dataset)).astype(np.float32)
    return DatasetDict({task: dataset.add_column("difficulty", phi.tolist(), feature=None)})


LOSS_CASES: list[tuple[type, str, dict[str, Any]]] = [
    (hue.MultiPositiveInfoNCELoss, "trecqa", {"positives_per_query": 2}),
    (hue.InstructorLoss, "wikiqa", {}),
    (hue.CurriculumInfoNCELoss, "wikiqa", {"difficulty_threshold": 0.0}),
    (hue.PearsonLoss, "stsb", {}),
    (hue.RankKLLoss, "stsb", {}),
    (hue.PROLoss, "stsb", {}),
    (hue.MidLayerInfoNCELoss, "stsb", {"positive_threshold": 0.5}),
    (hue.CoDiEmbSTSLoss, "stsb", {"positive_threshold": 0.5}),
    (hue.AnglEJointLoss, "sick", {}),
]


@pytest.mark.parametrize(("loss_class", "task", "kwargs"), LOSS_CASES, ids=[case[0].__name__ for case in LOSS_CASES])
def test_loss_goes_down_in_the_trainer(tiny_model_path, tasks, tmp_path, loss_class, task, kwargs) -> None:
    train = (
        _with_difficulty(tasks, task) if loss_class is hue.CurriculumInfoNCELoss else DatasetDict({task: tasks[task]})
    )
    model = exclude_instructions_from_pooling(SentenceTransformer(tiny_model_path))
    losses = losses_for_tasks(model, train, {task: (loss_class, kwargs)})
    _, step_losses = train_steps(model, train, losses, tmp_path, max_steps=12, batch_size=8, learning_rate=2e-3)
    assert len(step_losses) == 12 and np.all(np.isfinite(step_losses))
    first, last = np.mean(step_losses[:3]), np.mean(step_losses[-3:])
    assert last < first, f"{loss_class.__name__}: loss went from {first:.4f} to {last:.4f} ({step_losses})"


def test_model_card_names_every_loss_with_its_config(tiny_model_path, tasks, tmp_path) -> None:
    model = exclude_instructions_from_pooling(SentenceTransformer(tiny_model_path))
    losses = losses_for_tasks(
        model,
        tasks,
        {"retrieval": (hue.MultiPositiveInfoNCELoss, {"positives_per_query": 2}), "sts": hue.CoDiEmbSTSLoss},
    )
    train_steps(model, tasks, losses, tmp_path / "run", max_steps=4, batch_size=4)
    model.save(str(tmp_path / "model"))
    card = ModelCard.load(tmp_path / "model" / "README.md")
    tags = card.data.to_dict()["tags"]
    for task, loss in losses.items():
        name = type(loss).__name__
        assert f"loss:{name}" in tags
        # The task's dataset section names its loss with the full config.
        section = card.text.split(f"#### {task}\n", 1)[1].split("####", 1)[0]
        assert f"<code>{type(loss).__module__}.{name}</code> with these parameters" in section
        rendered = section.split("```json", 1)[1].split("```", 1)[0]
        assert json.loads(rendered) == json.loads(json.dumps(loss.get_config_dict()))


@pytest.mark.real_model
def test_minilm_ir_and_sts_in_one_trainer_call(minilm_path, shared_data, tmp_path) -> None:
    tasks = real_tasks(shared_data, rows=16)
    model = exclude_instructions_from_pooling(SentenceTransformer(minilm_path))
    losses = losses_for_tasks(
        model,
        tasks,
        {"retrieval": (hue.MultiPositiveInfoNCELoss, {"positives_per_query": 2}), "sts": hue.CoDiEmbSTSLoss},
    )
    collator = UnifiedDataCollator.for_losses(model, tasks, losses, negatives_per_query=2, seed=11)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path),
        max_steps=8,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        learning_rate=5e-5,
        lr_scheduler_type="constant",
        save_strategy="no",
        report_to="none",
        seed=11,
        use_cpu=True,
        prompts=prompts_from_unified(tasks),
        dataloader_drop_last=True,
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=tasks,
        eval_dataset=tasks,
        loss=losses,
        data_collator=collator,
        callbacks=[collator.epoch_callback()],
    )
    before = trainer.evaluate()
    trainer.train()
    collator.set_epoch(0)  # evaluate on the same draws as before training
    after = trainer.evaluate()
    for task in tasks:
        key = f"eval_{task}_loss"
        assert after[key] < before[key], f"{task}: {before[key]:.4f} -> {after[key]:.4f}"
