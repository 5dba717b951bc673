"""``unified_training`` and the quick start it makes: the stock trainer on unified data in one call.

``examples/quickstart.py`` runs as a user starts it, in a fresh process, and the model it saves is
reloaded in another. ``unified_training``'s kwargs are checked for any mix of task types, options and
instructions a user could give; and a trainer built without the unified collator stops with an error
that names the collator and ``unified_training``, before its first step.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from datasets import DatasetDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.base.sampler import MultiDatasetBatchSamplers

from hf_unified_embed.losses import AnglEJointLoss, CoDiEmbSTSLoss, MultiPositiveInfoNCELoss
from hf_unified_embed.recipe import packaged_minilm_path
from hf_unified_embed.sampling import CurriculumBatchSampler
from hf_unified_embed.training import ResampleEachEpochCallback, UnifiedDataCollator, layout_for_loss, unified_training
from tests import _processes as processes
from tests._roundtrip import TEXTS, reload
from tests._training_helpers import unified_dataset, unified_row

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "examples" / "quickstart.py"
#: The quick start the README shows is at most this many lines.
MAX_LINES = 20
LOSSES = {"retrieval": MultiPositiveInfoNCELoss, "sts": CoDiEmbSTSLoss, "pair_classification": AnglEJointLoss}


def _task(name: str, task_type: str, rows: int, *, negatives: bool, instruction: str) -> list[dict]:
    scored = task_type != "retrieval"
    return [
        unified_row(
            name,
            f"{name} query number {i}",
            [f"{name} answer number {i}", f"{name} other answer {i}"][: 1 if scored else 2],
            [f"{name} wrong answer {i}"] if negatives and not scored else [],
            task_type=task_type,
            positive_scores=[(i % 5) / 4] if scored else [],
            query_instruction=instruction,
            document_instruction=instruction,
        )
        for i in range(rows)
    ]


def _args(tmp_path: Path, **settings: object) -> SentenceTransformerTrainingArguments:
    return SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "checkpoints"),
        max_steps=2,
        per_device_train_batch_size=4,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        **settings,
    )


@pytest.mark.examples
@pytest.mark.real_model
def test_quickstart_runs_verbatim_from_an_empty_folder_and_trains_a_model_that_reloads(tmp_path: Path) -> None:
    """As a user runs it after ``pip install "hf-unified-embed[minilm]"``: the script alone in an empty folder,
    no arguments, the sample and the base model found through the package (offline, as the suite runs)."""
    lines = QUICKSTART.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"examples/quickstart.py has {len(lines)} lines; the README shows it whole"
    script = tmp_path / "quickstart.py"
    script.write_text(QUICKSTART.read_text(encoding="utf-8"), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    done = processes.run(
        [sys.executable, str(script)],
        expected=processes.Expected(steps=20, step_s=processes.MINILM_STEP_S),
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, processes.failure(done)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["outputs", "quickstart.py"], "wrote outside outputs/"
    saved = tmp_path / "outputs" / "quickstart" / "model"
    trained = np.asarray(reload("embeddings", saved))
    base = SentenceTransformer(packaged_minilm_path(), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert trained.shape == base.shape
    assert not np.allclose(trained, base, atol=1e-4), "the saved model is the untrained base"
    # The sample's tasks have instructions: the saved pooling leaves the prompt out, as it was trained.
    pooling = json.loads((saved / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
    assert pooling["include_prompt"] is False
    assert not (tmp_path / "outputs" / "quickstart" / "checkpoint-20").exists(), "the quick start saves no checkpoint"


TASK_TYPES = ("retrieval", "sts", "pair_classification")


@st.composite
def _tasks(draw: st.DrawFn) -> DatasetDict:
    types = draw(st.lists(st.sampled_from(TASK_TYPES), min_size=1, max_size=3))
    instruction = draw(st.sampled_from(["", "Represent the text for retrieval: "]))
    return DatasetDict(
        {
            f"task-{i}": unified_dataset(
                _task(f"task-{i}", task_type, 6, negatives=draw(st.booleans()), instruction=instruction)
            )
            for i, task_type in enumerate(types)
        }
    )


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tasks=_tasks(),
    negatives=st.integers(0, 3),
    instructions=st.booleans(),
    stock_sampler=st.sampled_from([None, MultiDatasetBatchSamplers.ROUND_ROBIN]),
)
def test_unified_training_gives_each_task_its_loss_columns_and_one_task_per_step(
    tiny_model_path: str,
    tmp_path: Path,
    tasks: DatasetDict,
    negatives: int,
    instructions: bool,
    stock_sampler: MultiDatasetBatchSamplers | None,
) -> None:
    model = SentenceTransformer(tiny_model_path, device="cpu")
    args = _args(tmp_path, **({"multi_dataset_batch_sampler": stock_sampler} if stock_sampler else {}))
    before = args.to_dict()
    kwargs = unified_training(model, tasks, LOSSES, args, negatives_per_query=negatives, instructions=instructions)

    assert set(kwargs) == {"model", "args", "train_dataset", "loss", "data_collator", "callbacks"}
    assert args.to_dict() == before, "unified_training changed the caller's training arguments"
    assert set(kwargs["loss"]) == set(tasks)
    collator = kwargs["data_collator"]
    assert isinstance(collator, UnifiedDataCollator)
    for name, dataset in tasks.items():
        task_type = dataset[0]["task_type"]
        assert type(kwargs["loss"][name]) is LOSSES[task_type]
        assert collator.layouts[name] == layout_for_loss(kwargs["loss"][name], task_type, negatives)
    assert any(isinstance(callback, ResampleEachEpochCallback) for callback in kwargs["callbacks"])
    sampler = kwargs["args"].multi_dataset_batch_sampler
    if stock_sampler is None:
        assert getattr(sampler, "func", None) is CurriculumBatchSampler, "one task per optimizer step"
    else:
        assert sampler == stock_sampler, "a sampler the caller chose is kept"
    has_instructions = instructions and bool(tasks[next(iter(tasks))][0]["query_instruction"])
    assert bool(collator.prompts) == has_instructions
    pooling = [module.include_prompt for module in model.modules() if hasattr(module, "include_prompt")]
    assert pooling == [not has_instructions], "instructions are left out of pooling exactly when trained with"


def _unified_tasks() -> DatasetDict:
    return DatasetDict(
        {
            "faq": unified_dataset(_task("faq", "retrieval", 8, negatives=True, instruction="")),
            "similarity": unified_dataset(_task("similarity", "sts", 8, negatives=False, instruction="")),
        }
    )


def test_unified_training_trains_with_the_stock_trainer(tiny_model_path: str, tmp_path: Path) -> None:
    model = SentenceTransformer(tiny_model_path, device="cpu")
    kwargs = unified_training(model, _unified_tasks(), LOSSES, _args(tmp_path))
    result = SentenceTransformerTrainer(**kwargs).train()
    assert result.global_step == 2 and np.isfinite(result.training_loss)


def test_a_trainer_without_the_unified_collator_names_it_before_the_first_step(
    tiny_model_path: str, tmp_path: Path
) -> None:
    # The long form with `data_collator=` left out: sentence-transformers' own collator would stop at the
    # first list column with "Unsupported input type: list", which names nothing of this package.
    model = SentenceTransformer(tiny_model_path, device="cpu")
    kwargs = unified_training(model, _unified_tasks(), LOSSES, _args(tmp_path))
    del kwargs["data_collator"]
    trainer = SentenceTransformerTrainer(**kwargs)
    with pytest.raises(ValueError, match=r"UnifiedDataCollator.*unified_training") as raised:
        trainer.train()
    assert "Unsupported input type" not in str(raised.value)
    assert trainer.state.global_step == 0
