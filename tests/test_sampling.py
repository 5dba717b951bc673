"""CurriculumBatchSampler and the numpy batch planner: unit tests and in-process trainer runs."""

from __future__ import annotations

import logging
import pickle
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from _sampling_helpers import RecordingCollator, two_task_dataset
from accelerate.data_loader import BatchSamplerShard, DataLoaderShard, SkipBatchSampler
from datasets import Dataset
from sentence_transformers.base.sampler import DefaultBatchSampler
from torch.utils.data import ConcatDataset, SequentialSampler

from hf_unified_embed.sampling import CurriculumBatchSampler, build_batch_plan, count_groups


def make_sampler(
    sizes: list[int],
    batch_size: int = 2,
    drop_last: bool = False,
    difficulties: list[list[float]] | None = None,
    seed: int = 0,
    **options,
) -> CurriculumBatchSampler:
    datasets = []
    for task, size in enumerate(sizes):
        columns: dict[str, list] = {"anchor": [f"t{task} {i}" for i in range(size)]}
        if difficulties is not None:
            columns["difficulty"] = difficulties[task]
        datasets.append(Dataset.from_dict(columns) if size else Dataset.from_dict({k: [] for k in columns}))
    samplers = [
        DefaultBatchSampler(SequentialSampler(d), batch_size=batch_size, drop_last=drop_last) for d in datasets
    ]
    options.setdefault("task_names", [f"t{t}" for t in range(len(sizes))])
    return CurriculumBatchSampler(ConcatDataset(datasets), batch_samplers=samplers, seed=seed, **options)


def task_of(sampler: CurriculumBatchSampler, row: int) -> int:
    return int(np.searchsorted(sampler.dataset.cumulative_sizes, row, side="right"))


def assert_task_pure_groups(sampler: CurriculumBatchSampler, group: int) -> list[list[int]]:
    """Every ``group`` consecutive batches (one optimizer step: world_size × gradient_accumulation_steps,
    computed by the caller, not read from the sampler under test) hold one task and equal batch sizes."""
    batches = list(sampler)
    assert len(batches) == len(sampler)
    for start in range(0, len(batches), group):
        step = batches[start : start + group]
        tasks = {task_of(sampler, row) for batch in step for row in batch}
        assert len(tasks) == 1
        assert len({len(b) for b in step}) == 1
        rows = [row for batch in step for row in batch]
        if len(sampler.dataset.datasets[tasks.pop()]) >= len(rows):
            assert len(rows) == len(set(rows))
    return batches


@pytest.mark.parametrize("interleave", ["round_robin", "shuffled", "sequential"])
@pytest.mark.parametrize("balance", ["none", "equal", "sqrt"])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world_size, accumulation", [(1, 1), (2, 1), (2, 3)])
def test_len_is_exact_and_every_step_is_one_task(interleave, balance, drop_last, world_size, accumulation) -> None:
    sampler = make_sampler(
        [37, 5, 0, 64, 1],
        batch_size=4,
        drop_last=drop_last,
        interleave=interleave,
        balance=balance,
        batch_sizes={"t3": 8},
        world_size=world_size,
        gradient_accumulation_steps=accumulation,
    )
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        assert_task_pure_groups(sampler, group=world_size * accumulation)


def test_balance_none_uses_every_row_once_and_pads_the_last_step() -> None:
    sampler = make_sampler([10, 7], batch_size=2, world_size=2)
    batches = list(sampler)
    counts = Counter(row for batch in batches for row in batch)
    assert set(counts) == set(range(17))
    # task 0: 10 rows = 2 full steps of 2 × 2, then 2 rows as 2 × 1; task 1: 7 rows = 4 + 3 padded to 2 × 2
    assert [len(b) for b in batches if task_of(sampler, b[0]) == 0] == [2, 2, 2, 2, 1, 1]
    assert sum(counts.values()) - 17 == 1


def test_drop_last_drops_each_tasks_incomplete_step() -> None:
    sampler = make_sampler([10, 7], batch_size=2, drop_last=True, world_size=2)
    batches = list(sampler)
    assert {len(b) for b in batches} == {2}
    assert sampler.steps_per_task == {"t0": 2, "t1": 1}
    rows = [row for batch in batches for row in batch]
    assert len(rows) == len(set(rows)) == 12


def test_task_smaller_than_one_batch(caplog: pytest.LogCaptureFixture) -> None:
    sampler = make_sampler([3, 20], batch_size=4, world_size=2)
    small = [b for b in assert_task_pure_groups(sampler, group=2) if task_of(sampler, b[0]) == 0]
    assert [len(b) for b in small] == [2, 2] and {r for b in small for r in b} == {0, 1, 2}
    with caplog.at_level(logging.WARNING):
        dropped = make_sampler([3, 20], batch_size=4, drop_last=True, world_size=2)
    assert dropped.steps_per_task["t0"] == 0 and "fills no complete step" in caplog.text


def test_one_task_only() -> None:
    sampler = make_sampler([9], batch_size=4, interleave="shuffled")
    assert [len(b) for b in sampler] == [4, 4, 1]
    assert sorted(r for b in sampler for r in b) == list(range(9))


def test_empty_task_gets_no_steps(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        sampler = make_sampler([0, 6, 0], batch_size=2, balance="equal")
    assert "'t0' is empty" in caplog.text
    assert sampler.steps_per_task == {"t0": 0, "t1": 3, "t2": 0}
    assert len(list(sampler)) == len(sampler) == 3
    assert len(make_sampler([0, 0])) == 0 and list(make_sampler([0, 0])) == []


def test_round_robin_follows_the_task_order_until_every_task_is_exhausted() -> None:
    # Data-CUBE Algorithm 1: one batch of each task in tour order per round.
    sampler = make_sampler([8, 2, 4], batch_size=2, task_order=["t2", "t0", "t1"])
    assert sampler.plan().step_tasks() == ["t2", "t0", "t1", "t2", "t0", "t0", "t0"]
    sequential = make_sampler([8, 2, 4], batch_size=2, task_order=[2, 0, 1], interleave="sequential")
    assert sequential.plan().step_tasks() == ["t2", "t2", "t0", "t0", "t0", "t0", "t1"]


def test_easy_to_hard_sorts_by_descending_difficulty_in_every_interleaving() -> None:
    rng = np.random.default_rng(0)
    difficulties = [rng.normal(size=30).round(1).tolist(), rng.normal(size=17).round(1).tolist()]
    flat = np.concatenate(difficulties)
    for interleave in ("round_robin", "shuffled", "sequential"):
        sampler = make_sampler(
            [30, 17], batch_size=3, difficulties=difficulties, instance_order="easy_to_hard", interleave=interleave
        )
        for task in (0, 1):
            rows = [r for b in sampler for r in b if task_of(sampler, r) == task]
            assert np.all(np.diff(flat[rows[: len(difficulties[task])]]) <= 0)


def test_easy_to_hard_needs_the_difficulty_column() -> None:
    with pytest.raises(ValueError, match="needs a 'difficulty' column in task 't0'"):
        list(make_sampler([4], instance_order="easy_to_hard"))
    with pytest.raises(ValueError, match="first at row 1"):
        list(make_sampler([3], difficulties=[[0.1, float("nan"), 0.2]], instance_order="easy_to_hard"))


def test_balance_equal_and_sqrt_share_the_same_number_of_steps() -> None:
    sizes = [400, 40, 4]
    none = make_sampler(sizes, batch_size=4)
    equal = make_sampler(sizes, batch_size=4, balance="equal")
    sqrt = make_sampler(sizes, batch_size=4, balance="sqrt")
    assert len(none) == len(equal) == len(sqrt) == 111
    assert list(equal.steps_per_task.values()) == [37, 37, 37]
    # 111 × (10, 3.16, 1) / 14.16 = (78.4, 24.8, 7.8), largest remainders rounded up
    assert list(sqrt.steps_per_task.values()) == [78, 25, 8]
    rows = Counter(r for b in equal for r in b)
    # the 4-row task is up-sampled (each row 37 times, in separate passes), the 400-row one down-sampled
    assert all(rows[r] == 37 for r in range(440, 444))
    assert len([r for r in range(400) if r in rows]) == 37 * 4
    first = set(r for b in equal for r in b if r < 400)
    equal.set_epoch(1)
    assert first != set(r for b in equal for r in b if r < 400), "down-sampling draws a new subset each epoch"


def test_upsampled_rows_are_never_twice_in_one_batch() -> None:
    sampler = make_sampler([5, 200], batch_size=5, balance="equal", instance_order="random")
    for batch in sampler:
        assert len(batch) == len(set(batch))


def test_plan_depends_only_on_seed_and_epoch() -> None:
    a, b = make_sampler([50, 30], interleave="shuffled", seed=3), make_sampler([50, 30], interleave="shuffled", seed=3)
    assert list(a) == list(b)
    a.set_epoch(1)
    assert list(a) != list(b)
    b.set_epoch(1)
    assert list(a) == list(b)
    assert list(make_sampler([50, 30], interleave="shuffled", seed=4)) != list(b)


def test_accelerate_sharding_gives_every_rank_the_same_task_and_disjoint_rows() -> None:
    sampler = make_sampler([23, 11], batch_size=3, world_size=2, batch_sizes={"t1": 2})
    shards = [list(BatchSamplerShard(sampler, 2, rank, even_batches=False)) for rank in (0, 1)]
    assert len(shards[0]) == len(shards[1]) == len(sampler) // 2
    for batch0, batch1 in zip(*shards):
        assert task_of(sampler, batch0[0]) == task_of(sampler, batch1[0])
        assert len(batch0) == len(batch1) and not set(batch0) & set(batch1)
    rows = [r for shard in shards for b in shard for r in b if r < 23]
    assert set(rows) == set(range(23)) and len(rows) == 24  # 23 rows, the last step padded by one


def test_set_epoch_reaches_the_sampler_through_skipped_multi_process_loaders() -> None:
    sampler = make_sampler([8, 8], world_size=2)
    shard = BatchSamplerShard(sampler, num_processes=2, process_index=0, even_batches=False)
    loader = DataLoaderShard(sampler.dataset, batch_sampler=SkipBatchSampler(shard, skip_batches=1))
    loader.set_epoch(3)
    assert sampler.epoch == 3


def test_configure_returns_a_picklable_partial_with_checked_options() -> None:
    from sentence_transformers import SentenceTransformerTrainingArguments

    configured = CurriculumBatchSampler.configure(balance="sqrt", batch_sizes={"t1": 3}, task_order=["t1", "t0"])
    args = SentenceTransformerTrainingArguments(output_dir="unused", multi_dataset_batch_sampler=configured)
    restored = pickle.loads(pickle.dumps(args)).multi_dataset_batch_sampler
    sampler = make_sampler([6, 6], batch_size=2, **{**restored.keywords, "task_names": ["t0", "t1"]})
    assert sampler.balance == "sqrt" and sampler.task_batch_sizes == [2, 3] and sampler.task_order == [1, 0]
    with pytest.raises(TypeError, match="unknown CurriculumBatchSampler option"):
        CurriculumBatchSampler.configure(balanse="sqrt")
    with pytest.raises(ValueError, match="interleave must be one of"):
        CurriculumBatchSampler.configure(interleave="zigzag")
    with pytest.raises(ValueError, match=r"batch_sizes\['t0'\] must be a positive int"):
        CurriculumBatchSampler.configure(batch_sizes={"t0": 0})


def test_unknown_task_names_are_reported_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"batch_sizes names unknown task 'sts'; tasks are \['t0', 't1'\]"):
        make_sampler([4, 4], batch_sizes={"sts": 8})
    with pytest.raises(ValueError, match=r"task_order must list every task exactly once; missing \['t1'\]"):
        make_sampler([4, 4], task_order=["t0"])


def test_plan_for_many_rows_and_tasks_is_vectorised() -> None:
    sizes = np.random.default_rng(0).integers(0, 5_000, size=330)
    plan = build_batch_plan(sizes, [32] * 330, group_size=4, interleave="shuffled", balance="sqrt", seed=1)
    counts = count_groups(sizes, [32] * 330, group_size=4, balance="sqrt")
    assert len(plan) == counts.num_batches and len(plan.rows) == int(counts.stream_lengths().sum())


def _train(model_path: str, output_dir: Path, resume: str | None = None) -> list:
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    model = SentenceTransformer(model_path, device="cpu")
    args = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        num_train_epochs=2,
        multi_dataset_batch_sampler=CurriculumBatchSampler.configure(
            batch_sizes={"triplets": 3}, interleave="shuffled"
        ),
        save_strategy="steps",
        save_steps=7,
        save_only_model=False,
        use_cpu=True,
        report_to="none",
        seed=11,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=two_task_dataset(), loss=MultipleNegativesRankingLoss(model)
    )
    recorder = RecordingCollator(trainer.data_collator)
    trainer.data_collator = recorder
    trainer.train(resume_from_checkpoint=resume)
    return recorder.batches


def test_trainer_run_resumed_from_a_checkpoint_sees_the_batches_of_the_uninterrupted_run(
    tiny_model_path: str, tmp_path: Path
) -> None:
    full = _train(tiny_model_path, tmp_path / "full")
    # 2 epochs × (pairs 12 rows in steps of 2 × 2 + triplets 10 rows in steps of 2 × 3) = 2 × 5 steps of 2 batches;
    # the accumulation (2) and the task names come from the trainer, the batch size of pairs from its args.
    assert len(full) == 20
    assert all(full[i][0] == full[i + 1][0] for i in range(0, 20, 2))
    assert {len(rows) for task, rows in full if task == "triplets"} <= {3, 2}
    assert full[:10] != full[10:], "each epoch has its own order"
    resumed = _train(tiny_model_path, tmp_path / "resumed", resume=str(tmp_path / "full" / "checkpoint-7"))
    assert resumed == full[14:]
