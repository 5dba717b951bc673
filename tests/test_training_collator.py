"""UnifiedDataCollator: fixed columns from variable-length rows, re-drawn per epoch, deterministic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from datasets import DatasetDict
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.losses import CoSENTLoss, MultipleNegativesRankingLoss
from torch import nn

from hf_unified_embed.training import ColumnLayout, ResampleEachEpochCallback, UnifiedDataCollator, draw_indices
from tests._training_helpers import train_steps, unified_dataset, unified_row


def _no_tokenizer(*args: object, **kwargs: object) -> dict:
    raise AssertionError("to_columns must not tokenise")


def _collator(layouts: dict[str, ColumnLayout] | None = None, **kwargs: object) -> UnifiedDataCollator:
    return UnifiedDataCollator(preprocess_fn=_no_tokenizer, layouts=layouts or {}, **kwargs)  # type: ignore[arg-type]


def _qa_rows(n: int = 6, n_pos: int = 4, n_neg: int = 5) -> list[dict]:
    return [
        unified_row(
            "qa",
            f"question {i}",
            [f"answer {i}.{j}" for j in range(n_pos)],
            [f"wrong {i}.{j}" for j in range(n_neg)],
        )
        for i in range(n)
    ]


def test_columns_follow_the_layout() -> None:
    rows = _qa_rows()
    out = _collator({"qa": ColumnLayout(positives=2, negatives=3)}).to_columns(rows)
    assert [list(r) for r in out] == [
        ["query", "positive_1", "positive_2", "negative_1", "negative_2", "negative_3"]
    ] * len(rows)
    for row, columns in zip(rows, out):
        assert columns["query"] == row["query"]
        drawn_pos = [columns["positive_1"], columns["positive_2"]]
        drawn_neg = [columns[f"negative_{i}"] for i in (1, 2, 3)]
        assert set(drawn_pos) <= set(row["positives"]) and len(set(drawn_pos)) == 2  # enough: no repeats
        assert set(drawn_neg) <= set(row["negatives"]) and len(set(drawn_neg)) == 3


def test_call_tokenises_every_column_with_batch_rows(tiny_model_path: str) -> None:
    model = SentenceTransformer(tiny_model_path)
    collator = UnifiedDataCollator(preprocess_fn=model.preprocess, layouts={"qa": ColumnLayout(2, 1)})
    features = [dict(row, dataset_name="qa") for row in _qa_rows(n=5)]
    batch = collator(features)
    assert batch["dataset_name"] == "qa"
    for column in ("query", "positive_1", "positive_2", "negative_1"):
        assert batch[f"{column}_input_ids"].shape[0] == 5
    assert "negative_2_input_ids" not in batch and "label" not in batch


def test_redrawn_each_epoch_and_deterministic_for_a_seed() -> None:
    rows = _qa_rows(n=8, n_pos=6, n_neg=8)
    layouts = {"qa": ColumnLayout(positives=2, negatives=3)}
    first = _collator(layouts, seed=3)
    again = _collator(layouts, seed=3)
    other_seed = _collator(layouts, seed=4)
    epoch0 = first.to_columns(rows)
    assert again.to_columns(rows) == epoch0
    assert other_seed.to_columns(rows) != epoch0
    first.set_epoch(1)
    epoch1 = first.to_columns(rows)
    assert epoch1 != epoch0
    # The draw of a row does not depend on its batch neighbours or position (dataloader workers).
    assert first.to_columns(rows[::-1])[::-1] == epoch1
    assert first.to_columns(rows[2:3]) == epoch1[2:3]


def test_every_text_is_used_before_any_repeats_and_the_rest_is_drawn_with_replacement() -> None:
    rows = [unified_row("qa", f"q{i}", ["p0", "p1"], ["n0"]) for i in range(20)]
    out = _collator({"qa": ColumnLayout(positives=5, negatives=4)}).to_columns(rows)
    for columns in out:
        positives = [columns[f"positive_{i}"] for i in range(1, 6)]
        assert set(positives) == {"p0", "p1"}
        assert [columns[f"negative_{i}"] for i in range(1, 5)] == ["n0"] * 4
    # With replacement: the repeated slots vary between rows instead of following a fixed pattern.
    assert len({tuple(columns[f"positive_{i}"] for i in range(1, 6)) for columns in out}) > 2


def test_draw_indices_covers_all_items_when_too_few() -> None:
    rng = np.random.default_rng(0)
    for available, k in [(3, 7), (1, 4), (5, 5), (9, 2)]:
        idx = draw_indices(rng, available, k)
        assert len(idx) == k and set(idx) <= set(range(available))
        assert len(set(idx)) == min(available, k)


def test_rows_without_negatives_borrow_real_in_batch_negatives_never_a_filler() -> None:
    rows = [
        unified_row("qa", "q0", ["a0"], ["n0.0", "n0.1", "n0.2", "n0.3"]),
        unified_row("qa", "q1", ["a1"], []),
        unified_row("qa", "q2", ["a2", "n0.3"], []),
    ]
    out = _collator({"qa": ColumnLayout(positives=1, negatives=2)}).to_columns(rows)
    batch_negatives = {text for row in rows for text in row["negatives"]}
    for row, columns in zip(rows, out):
        drawn = [columns["negative_1"], columns["negative_2"]]
        assert set(drawn) <= batch_negatives
        assert not set(drawn) & set(row["positives"])  # a row's own positive is never its negative
    # Texts not drawn for q0 are preferred, so borrowing adds candidates instead of duplicating.
    assert not {out[1]["negative_1"], out[1]["negative_2"]} & {out[0]["negative_1"], out[0]["negative_2"]}


def test_batch_without_any_negatives_gets_no_negative_columns() -> None:
    rows = [unified_row("qa", f"q{i}", [f"a{i}"]) for i in range(4)]
    out = _collator({"qa": ColumnLayout(positives=1, negatives=3)}).to_columns(rows)
    assert all(list(columns) == ["query", "positive_1"] for columns in out)


def test_sts_rows_get_the_score_of_the_first_drawn_positive_as_label() -> None:
    rows = [
        unified_row("stsb", "s1", ["s2"], task_type="sts", positive_scores=[0.8]),
        unified_row("stsb", "t1", ["t2", "t3"], task_type="sts", positive_scores=[0.1, 0.6]),
    ]
    collator = _collator()  # no layout given: sts rows default to scored pairs
    for epoch in range(4):
        collator.set_epoch(epoch)
        out = collator.to_columns(rows)
        assert out[0] == {"query": "s1", "positive_1": "s2", "label": pytest.approx(0.8)}
        expected = {"t2": 0.1, "t3": 0.6}[out[1]["positive_1"]]
        assert out[1]["label"] == pytest.approx(expected)


def test_difficulty_becomes_the_label_when_the_layout_asks_for_it() -> None:
    rows = [unified_row("qa", f"q{i}", [f"a{i}"], [f"n{i}"], difficulty=0.1 * i) for i in range(3)]
    out = _collator({"qa": ColumnLayout(1, 1, label="difficulty")}).to_columns(rows)
    assert [columns["label"] for columns in out] == pytest.approx([0.0, 0.1, 0.2])
    # Without that layout the column is not passed on (it would be tokenised as text otherwise).
    assert all("difficulty" not in columns for columns in _collator().to_columns(rows))


def test_clear_errors_for_mixed_batches_and_missing_labels() -> None:
    with pytest.raises(ValueError, match=r"mixes the tasks \['a', 'b'\]"):
        _collator().to_columns([unified_row("a", "q", ["p"]), unified_row("b", "q", ["p"])])
    missing_score = [unified_row("stsb", "s1", ["s2"], task_type="sts")]
    with pytest.raises(ValueError, match=r"task 'stsb', query 's1': field 'positive_scores' is empty"):
        _collator().to_columns(missing_score)
    no_difficulty = [unified_row("qa", "q", ["p"], difficulty=None)]
    with pytest.raises(ValueError, match=r"field 'difficulty' is None"):
        _collator({"qa": ColumnLayout(label="difficulty")}).to_columns(no_difficulty)


def test_numbered_columns_resolve_to_the_prompt_of_their_kind() -> None:
    collator = _collator()
    prompts = {"query": "Q: ", "positive": "D: "}
    assert collator._get_prompt_for_column(prompts, "positive_3") == "D: "
    assert collator._get_prompt_for_column(prompts, "query") == "Q: "
    assert collator._get_prompt_for_column(prompts, "negative_1") is None


def _three_epochs(
    model: SentenceTransformer, collator: UnifiedDataCollator, loss: nn.Module, out: Path, batch_size: int, **more: Any
) -> None:
    """Train three epochs of eight rows of one task, the collator told each epoch by its callback."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    rows = [
        unified_row("qa", f"question {i}", [f"answer {i}.{j}" for j in range(5)], [f"wrong {i}.{j}" for j in range(5)])
        for i in range(8)
    ]
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out),
        num_train_epochs=3,
        per_device_train_batch_size=batch_size,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=5,
        **more,
    )
    SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=DatasetDict(qa=unified_dataset(rows)),
        loss={"qa": loss},
        data_collator=collator,
        callbacks=[collator.epoch_callback()],
    ).train()


def test_trainer_epochs_redraw_through_the_callback(tiny_model_path: str, tmp_path: Path) -> None:
    model = SentenceTransformer(tiny_model_path)
    seen: list[tuple[int, tuple[str, ...]]] = []

    class Recording(UnifiedDataCollator):
        def to_columns(self, features):  # type: ignore[no-untyped-def]
            out = super().to_columns(features)
            seen.extend((self.epoch, (c["positive_1"], c["negative_1"])) for c in out)
            return out

    collator = Recording(preprocess_fn=model.preprocess, layouts={"qa": ColumnLayout(1, 1)}, seed=5)
    assert isinstance(collator.epoch_callback(), ResampleEachEpochCallback)
    _three_epochs(model, collator, MultipleNegativesRankingLoss(model), tmp_path, batch_size=8)
    by_epoch = {epoch: sorted(pair for e, pair in seen if e == epoch) for epoch in (0, 1, 2)}
    assert all(len(pairs) == 8 for pairs in by_epoch.values())
    assert by_epoch[0] != by_epoch[1] != by_epoch[2]


def _positives_per_step(model_path: str, out: Path, **dataloader: Any) -> list[list[tuple[int, ...]]]:
    """Train three epochs and return, step by step, the token ids of the positive column the loss received."""
    model = SentenceTransformer(model_path)
    seen: list[list[tuple[int, ...]]] = []

    class Recording(MultipleNegativesRankingLoss):
        def forward(self, sentence_features, labels):  # type: ignore[no-untyped-def]
            seen.append(sorted(tuple(ids) for ids in sentence_features[1]["input_ids"].tolist()))
            return super().forward(sentence_features, labels)

    collator = UnifiedDataCollator(preprocess_fn=model.preprocess, layouts={"qa": ColumnLayout(1, 1)}, seed=5)
    _three_epochs(model, collator, Recording(model), out, batch_size=4, **dataloader)
    return seen


def test_persistent_workers_redraw_every_epoch_as_the_training_process_does(
    tiny_model_path: str, tmp_path: Path
) -> None:
    # A persistent worker keeps the collator it started with; the epoch must still reach it, and its draws
    # must be the ones the training process itself makes.
    in_process = _positives_per_step(tiny_model_path, tmp_path / "a")
    persistent = _positives_per_step(
        tiny_model_path, tmp_path / "b", dataloader_num_workers=1, dataloader_persistent_workers=True
    )
    assert len(in_process) == 6 and persistent == in_process
    epochs = [in_process[0] + in_process[1], in_process[2] + in_process[3], in_process[4] + in_process[5]]
    assert epochs[0] != epochs[1] != epochs[2]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_persistent_worker_reads_each_epoch_from_shared_memory(tiny_model_path: str, context: str) -> None:
    import torch
    from transformers import TrainerControl, TrainerState, TrainingArguments

    model = SentenceTransformer(tiny_model_path)
    rows = [dict(row, dataset_name="qa") for row in _qa_rows(n=4, n_pos=6, n_neg=6)]
    collator = UnifiedDataCollator(preprocess_fn=model.preprocess, layouts={"qa": ColumnLayout(1, 1)}, seed=3)
    callback = collator.epoch_callback()
    args = TrainingArguments(
        output_dir="unused", dataloader_num_workers=1, dataloader_persistent_workers=True, report_to="none"
    )
    callback.on_train_begin(args, TrainerState(), TrainerControl())
    loader = torch.utils.data.DataLoader(
        rows,
        batch_size=4,
        collate_fn=collator,
        num_workers=1,
        persistent_workers=True,
        multiprocessing_context=context,
    )
    reference = UnifiedDataCollator(preprocess_fn=model.preprocess, layouts={"qa": ColumnLayout(1, 1)}, seed=3)
    drawn = []
    for epoch in range(3):
        callback.on_epoch_begin(args, TrainerState(epoch=float(epoch)), TrainerControl())
        reference.set_epoch(epoch)
        (batch,) = list(loader)
        assert torch.equal(batch["positive_1_input_ids"], reference(rows)["positive_1_input_ids"])
        drawn.append(batch["positive_1_input_ids"])
    assert not torch.equal(drawn[0], drawn[1]) and not torch.equal(drawn[1], drawn[2])


def test_two_tasks_train_in_one_trainer_call(tiny_model_path: str, tmp_path: Path) -> None:
    qa = [
        unified_row("qa", f"question {i}", [f"answer {i}"], [f"wrong {i}"], query_instruction="Q: ") for i in range(16)
    ]
    sts = [unified_row("sts", f"s {i}", [f"t {i}"], task_type="sts", positive_scores=[(i % 5) / 4]) for i in range(16)]
    train = DatasetDict(qa=unified_dataset(qa), sts=unified_dataset(sts))
    model = SentenceTransformer(tiny_model_path)
    losses = {"qa": MultipleNegativesRankingLoss(model), "sts": CoSENTLoss(model)}
    _, step_losses = train_steps(model, train, losses, tmp_path, max_steps=4)
    assert len(step_losses) == 4 and all(np.isfinite(step_losses))


def test_a_borrowed_negative_is_never_the_rows_own_positive_in_any_epoch() -> None:
    # q1 has no negatives and borrows from q0. One of q0's negatives is q1's own positive; whichever
    # of q0's two negatives q0 draws, q1 must get the other real negative ("n0"), never "a1".
    rows = [
        unified_row("qa", "q0", ["a0"], ["a1", "n0"]),
        unified_row("qa", "q1", ["a1"], []),
    ]
    collator = _collator({"qa": ColumnLayout(positives=1, negatives=1)})
    drawn_for_q0 = set()
    for epoch in range(20):
        collator.set_epoch(epoch)
        out = collator.to_columns(rows)
        drawn_for_q0.add(out[0]["negative_1"])
        assert out[1]["negative_1"] == "n0", f"epoch {epoch}: q1 borrowed {out[1]['negative_1']!r}"
    assert drawn_for_q0 == {"a1", "n0"}  # both cases occurred: the untaken text was q1's positive in some epochs
