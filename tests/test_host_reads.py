"""No loss of the package, nor the logging of its parts, reads a tensor's value on the host once the model's
forward pass has begun (on a GPU each such read waits for the pass); the reads it needs come before it.

Counted on the CPU with :class:`~hf_unified_embed.training.host_reads.HostReads`, which sees the same
operators a CUDA run would dispatch; the checks that reads used to make still hold (NaN labels refused)."""

from __future__ import annotations

import math
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import DatasetDict
from hypothesis import given, settings
from hypothesis import strategies as st
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from transformers import TrainerCallback

import hf_unified_embed
from hf_unified_embed.losses import (
    AnglEJointLoss,
    CoDiEmbSTSLoss,
    DistillKLLoss,
    DistillMarginMSELoss,
    MultiPositiveInfoNCELoss,
    PearsonLoss,
)
from hf_unified_embed.training import UnifiedDataCollator, losses_for_tasks
from hf_unified_embed.training.host_reads import HostRead, HostReads
from hf_unified_embed.training.loss_logging import LossPartsLogging
from tests._training_helpers import unified_dataset, unified_row
from tests.test_losses_models import CASES, QUERIES, features_of, total

PACKAGE = str(Path(hf_unified_embed.__file__).parent)


def ours_after_forward(reads: list[HostRead], begun: int) -> list[str]:
    """The reads after the forward pass began that the package's code (or the trainer's part logging) asked for."""
    return [
        f"{read.operator} at {read.filename}:{read.lineno} ({read.function})"
        for read in reads[begun:]
        if read.filename.startswith(PACKAGE) or read.function == "track_loss_components"
    ]


class ForwardBegins:
    """Where in ``reads`` each forward pass of the model began (a pre-hook on its first module)."""

    def __init__(self, model: SentenceTransformer, reads: HostReads) -> None:
        self.reads = reads
        self.marks: list[int] = []
        model[0].register_forward_pre_hook(lambda *args: self.marks.append(len(self.reads.reads)))


@pytest.fixture
def tiny_model(tiny_model_path: str) -> SentenceTransformer:
    torch.manual_seed(0)
    return SentenceTransformer(tiny_model_path)


def test_the_counter_sees_the_reads_a_gpu_would_wait_for() -> None:
    values = torch.tensor([0.1, 0.7, 0.9])
    with HostReads() as reads:
        bool((values > 0.5).any())
        values.nonzero()
        values[values > 0.5]
        values.sum() * 2  # no read
        values[torch.tensor([0, 2])]  # integer indices: no read
    assert [read.operator for read in reads.reads] == ["_local_scalar_dense", "nonzero", "index"]
    assert {read.function for read in reads.reads} == {"test_the_counter_sees_the_reads_a_gpu_would_wait_for"}
    assert "test_host_reads.py:" in reads.summary().splitlines()[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_loss_reads_a_value_after_the_forward_pass_begins(tiny_model: SentenceTransformer, name: str) -> None:
    factory, columns, labels = CASES[name]
    loss = factory(tiny_model)
    features = features_of(tiny_model, columns)
    with HostReads() as reads:
        begins = ForwardBegins(tiny_model, reads)
        total(loss(features, torch.tensor(labels) if labels is not None else None)).backward()
    assert begins.marks, "the model was not called"
    assert not ours_after_forward(reads.reads, begins.marks[0]), reads.summary()


@pytest.mark.parametrize("loss_class", [DistillKLLoss, DistillMarginMSELoss])
def test_distillation_losses_read_no_value_after_the_forward_pass(
    tiny_model: SentenceTransformer, loss_class: type
) -> None:
    features = features_of(tiny_model, [QUERIES, *CASES["instructor"][1][1:]])
    teacher = torch.rand(len(QUERIES), 2)
    with HostReads() as reads:
        begins = ForwardBegins(tiny_model, reads)
        total(loss_class(tiny_model)(features, teacher)).backward()
    assert not ours_after_forward(reads.reads, begins.marks[0]), reads.summary()


def test_non_finite_labels_are_refused_before_the_batch_is_embedded(tiny_model: SentenceTransformer) -> None:
    features = features_of(tiny_model, CASES["pearson"][1])
    calls: list[int] = []
    tiny_model[0].register_forward_pre_hook(lambda *args: calls.append(1))
    for bad in (math.nan, math.inf, -math.inf):
        for loss in (PearsonLoss(tiny_model), CoDiEmbSTSLoss(tiny_model), AnglEJointLoss(tiny_model)):
            with pytest.raises(ValueError, match=rf"{type(loss).__name__} got non-finite labels \(NaN or infinite\)"):
                loss(features, torch.tensor([0.1, bad, 0.3, 0.5]))
    teacher = torch.rand(len(QUERIES), 2).index_fill(1, torch.tensor([1]), math.nan)
    with pytest.raises(ValueError, match="DistillKLLoss got non-finite labels"):
        DistillKLLoss(tiny_model)(features_of(tiny_model, [QUERIES, *CASES["instructor"][1][1:]]), teacher)
    assert not calls
    # Embeddings of one's own, straight into the maths, are still checked there.
    embeddings = [torch.randn(3, 4), torch.randn(3, 4)]
    with pytest.raises(ValueError, match="NaN"):
        PearsonLoss(tiny_model).compute_loss_from_embeddings(embeddings, torch.tensor([0.1, math.nan, 0.3]))


class StepSpans(TrainerCallback):
    """Per optimizer step, the positions in ``reads`` where it began, where the model's first forward pass
    began (a pre-hook on its first module) and where it ended."""

    def __init__(self, reads: HostReads, model: SentenceTransformer) -> None:
        self.reads = reads
        self.spans: list[tuple[int, int | None, int]] = []
        model[0].register_forward_pre_hook(self._forward_begins)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.begun, self.forward = len(self.reads.reads), None

    def _forward_begins(self, *args: Any) -> None:
        if self.forward is None:
            self.forward = len(self.reads.reads)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.spans.append((self.begun, self.forward, len(self.reads.reads)))


def test_training_steps_of_the_recipe_losses_read_nothing_of_ours_after_the_forward(
    tiny_model: SentenceTransformer, tmp_path: Path
) -> None:
    """The shipped recipe's losses (CoDiEmb STS with its four parts, multi-positive InfoNCE, AnglE) with
    instructions and their parts logged: in every step, the package's reads all come before the model runs."""
    sts = [unified_row("sts", f"a sentence {i}", [f"another {i}"], task_type="sts", positive_scores=[i / 9], query_instruction="Represent the sentence: ") for i in range(8)]  # fmt: skip
    pairs = [unified_row("pc", f"claim {i}", [f"same claim {i}"], task_type="pair_classification", positive_scores=[i % 2]) for i in range(8)]  # fmt: skip
    ret = [unified_row("ret", f"question {i}", [f"answer {i}"], [f"wrong {i}"], query_instruction="Represent the question: ") for i in range(8)]  # fmt: skip
    train = DatasetDict({"sts": unified_dataset(sts), "pc": unified_dataset(pairs), "ret": unified_dataset(ret)})
    kinds = {"sts": CoDiEmbSTSLoss, "pair_classification": AnglEJointLoss, "retrieval": MultiPositiveInfoNCELoss}
    losses = losses_for_tasks(tiny_model, train, kinds)
    collator = UnifiedDataCollator.for_losses(tiny_model, train, losses, negatives_per_query=1, seed=1)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=6, per_device_train_batch_size=4, logging_steps=3,
        save_strategy="no", report_to="none", use_cpu=True, seed=1, prompts=collator.prompts,
    )  # fmt: skip
    reads = HostReads()
    steps = StepSpans(reads, tiny_model)
    trainer = SentenceTransformerTrainer(
        model=tiny_model, args=args, train_dataset=train, loss=losses, data_collator=collator,
        callbacks=[collator.epoch_callback(), steps],
    )  # fmt: skip
    LossPartsLogging.attach(trainer)
    with reads:
        trainer.train()
    assert len(steps.spans) == 6
    assert any(key in entry for entry in trainer.state.log_history for key in ("pearson", "ibn", "cosine"))
    for begun, forward, ended in steps.spans:
        assert forward is not None and begun <= forward <= ended
        assert not ours_after_forward(reads.reads[:ended], forward), reads.summary()
    # The reads it does make in a step: the token ids' identity and the labels' check, before the model runs.
    # (At a logging step the parts' logging reads its step count after the step, as the trainer's log does.)
    within = [read for begun, _, ended in steps.spans for read in reads.reads[begun:ended]]
    assert {read.function for read in within if read.filename.startswith(PACKAGE)} == {"text_ids_of", "labels_checked"}


def _stock_trainer(filter_nan: bool) -> Any:
    return types.SimpleNamespace(
        model=types.SimpleNamespace(training=True),
        accum_loss_components={"train": {}, "eval": {}},
        args=types.SimpleNamespace(logging_nan_inf_filter=filter_nan),
    )


PART_VALUES = st.one_of(st.floats(-5, 5), st.sampled_from([math.nan, math.inf, -math.inf]))
STEP = st.dictionaries(st.sampled_from(["pearson", "rank_kl", "pro", "ibn"]), PART_VALUES, min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(st.one_of(STEP, st.just("log")), max_size=12), filter_nan=st.booleans())
def test_part_sums_equal_the_stock_trainers(steps: list[Any], filter_nan: bool) -> None:
    """The part accumulation without host reads sums what sentence-transformers' own does, NaN and
    infinite parts (replaced by the mean so far, with ``logging_nan_inf_filter``) and the resets of a log included."""
    stock = _stock_trainer(filter_nan)
    ours = _stock_trainer(filter_nan)
    ours.loss = {}
    callback = LossPartsLogging(ours)
    for step in steps:
        for trainer in (stock, ours):
            sums = trainer.accum_loss_components["train"]
            if step == "log":  # what the trainer's log() leaves behind: zeros of every sum and of the steps
                for key in sums:
                    sums[key] = torch.zeros_like(sums[key])
            elif trainer is stock:
                SentenceTransformerTrainer.track_loss_components(stock, {k: torch.tensor(v) for k, v in step.items()})
            else:
                callback.accumulate_parts({k: torch.tensor(v) for k, v in step.items()})
        expected, got = stock.accum_loss_components["train"], ours.accum_loss_components["train"]
        assert expected.keys() == got.keys()
        for key in expected:
            torch.testing.assert_close(got[key], expected[key], equal_nan=True, check_dtype=True)
