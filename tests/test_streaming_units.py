"""Unit rules of the streaming sampler: ``TaskStream`` (one task for one process) and ``MultiTaskStream``.

TaskStream: one pass covers every row once across the processes (shards split between processes, or one
row in ``world_size`` when there are fewer shards), a JSON round trip of ``state_dict()`` resumes exactly
(also across passes), an empty process is refused by name, and windows shuffle within themselves only.
MultiTaskStream: steps are ``batch_size × gradient_accumulation_steps`` rows of one task, every process
and instance draws the same task per step, task frequencies follow the weights, ``state_at`` resumes
exactly, and bad weights and options are refused with messages naming the problem. The trainer and
multi-process runs are in test_streaming.py.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from datasets import Dataset, DatasetInfo, IterableDataset, NamedSplit, SplitDict, SplitInfo
from datasets.iterable_dataset import ExamplesIterable
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hf_unified_embed.sampling.multi_task_stream import MultiTaskStream, declared_rows, task_weights
from hf_unified_embed.sampling.task_stream import TaskStream

SETTINGS = settings(max_examples=25, deadline=None)


@functools.cache
def task_data(task: str, rows: int, shards: int) -> IterableDataset:
    """``rows`` rows ``"{task} {i}"`` in ``shards`` shards (TaskStream and MultiTaskStream never modify it)."""
    return Dataset.from_dict({"text": [f"{task} {i}" for i in range(rows)]}).to_iterable_dataset(num_shards=shards)


def row_id(row: dict[str, Any]) -> tuple[str, int]:
    task, number = row["text"].split()
    return task, int(number)


def one_pass(stream: TaskStream, passes: int = 1) -> list[list[int]]:
    """The row numbers of each of the stream's first ``passes`` passes, read one row at a time until
    ``state_dict()["pass"]`` moves on (the row that moves it is the first of the next pass)."""
    read: list[list[int]] = [[] for _ in range(passes + 1)]
    while True:
        (row,) = stream.next_rows(1)
        current = stream.state_dict()["pass"]
        read[current].append(row_id(row)[1])
        if current == passes:
            return read[:passes]


@st.composite
def layouts(draw: st.DrawFn) -> tuple[int, int, int]:
    """(rows, shards, world_size) where every process gets rows: at least one row per shard, and at least
    one per process when the processes split one row in ``world_size``."""
    shards = draw(st.integers(1, 6))
    world_size = draw(st.integers(1, 4))
    rows = draw(st.integers(max(shards, world_size), 60))
    return rows, shards, world_size


# -- TaskStream ---------------------------------------------------------------------------------------------------


@SETTINGS
@given(layout=layouts(), window=st.integers(1, 10), seed=st.integers(0, 2**16))
def test_task_stream_pass_covers_every_row_once_across_processes(
    layout: tuple[int, int, int], window: int, seed: int
) -> None:
    rows, shards, world_size = layout
    data = task_data("t", rows, shards)
    passes = [
        one_pass(TaskStream("t", data, rank=rank, world_size=world_size, seed=seed, shuffle_window=window), passes=2)
        for rank in range(world_size)
    ]
    for number in range(2):
        read = [rank_passes[number] for rank_passes in passes]
        assert sorted(itertools.chain.from_iterable(read)) == list(range(rows))
        if shards < world_size:
            # one row in world_size: process r keeps the rows at positions r, r + world_size, ...
            assert [len(rank_rows) for rank_rows in read] == [
                len(range(rank, rows, world_size)) for rank in range(world_size)
            ]


@SETTINGS
@given(
    layout=layouts(),
    window=st.integers(1, 10),
    seed=st.integers(0, 2**16),
    rank_draw=st.integers(0, 3),
    first=st.floats(0, 3),
    then=st.integers(1, 40),
)
@example(layout=(10, 2, 1), window=3, seed=0, rank_draw=0, first=1.0, then=12)  # state saved at a pass's end
@example(layout=(10, 2, 1), window=5, seed=0, rank_draw=0, first=2.0, then=12)  # ... at a window's end too
@example(layout=(9, 1, 2), window=2, seed=1, rank_draw=1, first=2.5, then=9)  # one row in two, across passes
def test_task_stream_resumes_exactly_from_a_json_state(
    layout: tuple[int, int, int], window: int, seed: int, rank_draw: int, first: float, then: int
) -> None:
    rows, shards, world_size = layout
    rank = rank_draw % world_size
    arguments: dict[str, Any] = {"rank": rank, "world_size": world_size, "seed": seed, "shuffle_window": window}
    data = task_data("t", rows, shards)
    stream = TaskStream("t", data, **arguments)
    # a pass of a process has at most `rows` rows, so `first` (up to 3) x rows crosses up to 3 passes
    stream.next_rows(round(first * rows))
    state = json.loads(json.dumps(stream.state_dict()))
    resumed = TaskStream("t", data, **arguments)
    resumed.load_state_dict(state)
    assert resumed.next_rows(then) == stream.next_rows(then)


def _no_rows() -> Iterator[dict[str, Any]]:
    yield from ()


@pytest.mark.parametrize("world_size", [1, 3])
def test_task_stream_without_rows_names_the_task(world_size: int) -> None:
    empty = IterableDataset.from_generator(_no_rows, features=task_data("t", 1, 1).features)
    stream = TaskStream("empty-task", empty, rank=world_size - 1, world_size=world_size)
    with pytest.raises(ValueError, match="empty-task"):
        stream.next_rows(1)


@SETTINGS
@given(rows=st.integers(1, 5), data=st.data())
def test_task_stream_process_beyond_the_rows_is_refused(rows: int, data: st.DataObject) -> None:
    world_size = data.draw(st.integers(rows + 1, 6), label="world_size")
    rank = data.draw(st.integers(rows, world_size - 1), label="rank")
    stream = TaskStream("short-task", task_data("t", rows, 1), rank=rank, world_size=world_size)
    with pytest.raises(ValueError, match=r"short-task.*process"):
        stream.next_rows(1)


@pytest.mark.parametrize(
    ("options", "message"),
    [({"rank": 2, "world_size": 2}, "rank"), ({"rank": -1}, "rank"), ({"shuffle_window": 0}, "shuffle_window")],
)
def test_task_stream_refuses_bad_options(options: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TaskStream("t", task_data("t", 4, 1), **options)


@pytest.mark.parametrize("window", [2, 10, 50])
def test_window_shuffle_changes_the_order_and_each_pass_differs(window: int) -> None:
    stream = TaskStream("t", task_data("t", 50, 1), seed=3, shuffle_window=window)
    first, second = one_pass(stream, passes=2)
    assert sorted(first) == sorted(second) == list(range(50))
    assert first != list(range(50))
    assert first != second


def test_window_of_one_keeps_the_source_order() -> None:
    stream = TaskStream("t", task_data("t", 50, 1), seed=3, shuffle_window=1)
    assert one_pass(stream, passes=3) == [list(range(50))] * 3


@SETTINGS
@given(rows=st.integers(1, 60), window=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_window_shuffle_stays_inside_its_window(rows: int, window: int, seed: int) -> None:
    (order,) = one_pass(TaskStream("t", task_data("t", rows, 1), seed=seed, shuffle_window=window))
    for start in range(0, rows, window):
        assert sorted(order[start : start + window]) == list(range(start, min(start + window, rows)))


@SETTINGS
@given(rows=st.integers(6, 60), shards=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_window_of_one_reads_whole_shards_in_a_seeded_order(rows: int, shards: int, seed: int) -> None:
    data = task_data("t", rows, shards)
    shard_rows = [[row_id(row)[1] for row in data.shard(shards, index)] for index in range(shards)]
    for order in one_pass(TaskStream("t", data, seed=seed, shuffle_window=1), passes=2):
        pieces = []
        while order:
            (piece,) = [shard for shard in shard_rows if order[: len(shard)] == shard]
            pieces.append(piece)
            order = order[len(piece) :]
        assert sorted(pieces) == sorted(shard_rows)


# -- MultiTaskStream ----------------------------------------------------------------------------------------------

SIZES = {"a": (30, 2), "b": (50, 3), "c": (10, 1)}


def three_tasks() -> dict[str, IterableDataset]:
    return {task: task_data(task, rows, shards) for task, (rows, shards) in SIZES.items()}


def make_stream(world_size: int = 1, rank: int = 0, **options: Any) -> MultiTaskStream:
    options = {"weights": "equal", "batch_size": 2, "gradient_accumulation_steps": 3, "seed": 7, **options}
    stream = MultiTaskStream(three_tasks(), shuffle_window=options.pop("shuffle_window", 4), **options)
    return stream.shard(world_size, rank) if world_size > 1 else stream


def steps_of(rows: Iterator[dict[str, Any]], step_rows: int, steps: int) -> list[list[dict[str, Any]]]:
    return [list(itertools.islice(rows, step_rows)) for _ in range(steps)]


@SETTINGS
@given(
    batch_size=st.integers(1, 4),
    accumulation=st.integers(1, 3),
    seed=st.integers(0, 2**16),
    weights=st.sampled_from(["equal", {"a": 1, "b": 2, "c": 0.5}]),
    process=st.sampled_from([(1, 0), (2, 0), (2, 1), (3, 2)]),
)
def test_every_step_is_one_task_of_batch_size_times_accumulation_rows(
    batch_size: int, accumulation: int, seed: int, weights: Any, process: tuple[int, int]
) -> None:
    options = {"batch_size": batch_size, "gradient_accumulation_steps": accumulation, "seed": seed}
    stream = make_stream(*process, weights=weights, **options)
    step_rows = batch_size * accumulation
    rows = list(itertools.islice(iter(stream), 30 * step_rows))
    for step in range(30):
        task = stream.task_names[stream.task_of(step)]
        chunk = rows[step * step_rows : (step + 1) * step_rows]
        assert {row["dataset_name"] for row in chunk} == {row_id(row)[0] for row in chunk} == {task}
    # runs of one task (consecutive steps of a task merge) are whole steps
    for _, run in itertools.groupby(rows, key=lambda row: row["dataset_name"]):
        assert len(list(run)) % step_rows == 0


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), start=st.integers(0, 3 * 4096))
def test_task_of_is_the_same_on_every_process_and_instance(seed: int, start: int) -> None:
    stream = make_stream(seed=seed)
    others = [make_stream(seed=seed), make_stream(2, 0, seed=seed), make_stream(2, 1, seed=seed)]
    others.append(make_stream(seed=seed, rank=2, world_size=3))
    steps = [*range(start, start + 50), 0, start + 4096]  # jumps between chunks of the schedule too
    expected = [stream.task_of(step) for step in steps]
    for other in others:
        assert [other.task_of(step) for step in steps] == expected


def test_processes_read_disjoint_rows_of_a_task_in_one_pass() -> None:
    # task c: 10 rows in 1 shard, so each of 2 processes reads 5 rows a pass (one row in two)
    only_c = {"a": 0, "b": 0, "c": 1}
    rank_rows = [
        {row_id(row) for row in itertools.islice(iter(make_stream(2, rank, weights=only_c)), 5)} for rank in (0, 1)
    ]
    assert rank_rows[0] | rank_rows[1] == {("c", i) for i in range(10)}


@pytest.mark.parametrize(
    ("weights", "rows_per_task", "expected"),
    [
        ("equal", None, {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}),
        ("sqrt", {"a": 100, "b": 400, "c": 2500}, {"a": 0.125, "b": 0.25, "c": 0.625}),
        ("none", {"a": 100, "b": 300, "c": 600}, {"a": 0.1, "b": 0.3, "c": 0.6}),
        ({"a": 1, "b": 0, "c": 3}, None, {"a": 0.25, "b": 0.0, "c": 0.75}),
        ({"a": 0.2, "b": 0.5, "c": 0.3}, {"a": 1, "b": 1, "c": 1}, {"a": 0.2, "b": 0.5, "c": 0.3}),
    ],
)
def test_task_frequencies_follow_the_weights(
    weights: Any, rows_per_task: dict[str, int] | None, expected: dict[str, float]
) -> None:
    stream = make_stream(weights=weights, rows_per_task=rows_per_task)
    counts = Counter(stream.task_names[stream.task_of(step)] for step in range(20_000))
    for task, probability in expected.items():
        assert abs(counts[task] / 20_000 - probability) <= 0.03, (task, counts)
    assert dict(zip(stream.task_names, stream.probabilities)) == pytest.approx(expected)


@SETTINGS
@given(
    steps=st.integers(1, 25),
    batch_size=st.integers(1, 3),
    accumulation=st.integers(1, 2),
    window=st.integers(1, 8),
    seed=st.integers(0, 2**16),
    process=st.sampled_from([(1, 0), (2, 0), (2, 1)]),
)
@example(steps=1, batch_size=1, accumulation=1, window=1, seed=0, process=(1, 0))
def test_multi_task_stream_resumes_exactly_from_state_at(
    steps: int, batch_size: int, accumulation: int, window: int, seed: int, process: tuple[int, int]
) -> None:
    options = {"batch_size": batch_size, "gradient_accumulation_steps": accumulation, "seed": seed}
    options["shuffle_window"] = window
    step_rows = batch_size * accumulation
    stream = make_stream(*process, **options)
    rows = iter(stream)
    steps_of(rows, step_rows, steps)
    assert stream.state_dict() == stream.state_at(steps)
    state = json.loads(json.dumps(stream.state_at(steps)))
    assert state["step"] == steps
    resumed = make_stream(*process, **options)
    resumed.load_state_dict(state)
    assert steps_of(iter(resumed), step_rows, 5) == steps_of(rows, step_rows, 5)


def test_fresh_state_dict_starts_at_step_zero() -> None:
    stream = make_stream()
    state = json.loads(json.dumps(stream.state_dict()))
    assert state == {"step": 0, "tasks": {}}
    resumed = make_stream()
    resumed.load_state_dict(state)
    assert list(itertools.islice(iter(resumed), 30)) == list(itertools.islice(iter(make_stream()), 30))


def test_state_of_an_unknown_task_or_step_is_refused() -> None:
    stream = make_stream()
    with pytest.raises(ValueError, match="'z'"):
        stream.load_state_dict({"step": 0, "tasks": {"z": {}}})
    with pytest.raises(KeyError, match="step 3"):
        stream.state_at(3)


# -- task_weights -------------------------------------------------------------------------------------------------

TASKS = ["a", "b", "c"]
good_weight = st.one_of(st.integers(0, 10**6), st.floats(0, 1e6, allow_nan=False))
bad_weight = st.one_of(
    st.floats(max_value=-1e-9),
    st.integers(max_value=-1),
    st.sampled_from([math.nan, math.inf, -math.inf, True, False, "1", None]),
)


def _good(value: Any) -> bool:
    """A weight task_weights must accept: an int or float (not a bool), finite and >= 0."""
    return type(value) in (int, float) and math.isfinite(value) and value >= 0


@SETTINGS
@given(values=st.lists(good_weight, min_size=3, max_size=3).filter(lambda values: sum(values) > 0))
def test_good_weights_give_probabilities_in_proportion(values: list[float]) -> None:
    probabilities = task_weights(dict(zip(TASKS, values)), {}, TASKS)
    assert probabilities.sum() == pytest.approx(1.0)
    assert probabilities == pytest.approx(np.asarray(values, dtype=float) / sum(values))


@SETTINGS
@given(
    dropped=st.lists(st.sampled_from(TASKS), unique=True, max_size=3),
    extra=st.lists(st.text(min_size=1, max_size=5).filter(lambda name: name not in TASKS), unique=True, max_size=2),
)
def test_weights_must_name_exactly_the_tasks(dropped: list[str], extra: list[str]) -> None:
    weights = {task: 1.0 for task in TASKS if task not in dropped} | {name: 1.0 for name in extra}
    if not dropped and not extra:
        assert task_weights(weights, {}, TASKS).sum() == pytest.approx(1.0)
        return
    with pytest.raises(ValueError, match="every task a weight") as error:
        task_weights(weights, {}, TASKS)
    for name in [*dropped, *extra]:
        assert repr(name) in str(error.value)


@SETTINGS
@given(values=st.lists(st.one_of(good_weight, bad_weight), min_size=3, max_size=3), position=st.integers(0, 2))
def test_negative_non_finite_and_non_number_weights_are_refused(values: list[Any], position: int) -> None:
    if all(_good(value) for value in values):
        values[position] = -1.0
    with pytest.raises(ValueError, match="finite numbers >= 0") as error:
        task_weights(dict(zip(TASKS, values)), {}, TASKS)
    for task, value in zip(TASKS, values):
        assert (repr(task) in str(error.value)) is not _good(value)


@SETTINGS
@given(zeros=st.lists(st.sampled_from([0, 0.0]), min_size=3, max_size=3))
def test_all_zero_weights_are_refused(zeros: list[float]) -> None:
    with pytest.raises(ValueError, match="sum to 0"):
        task_weights(dict(zip(TASKS, zeros)), {}, TASKS)


@SETTINGS
@given(name=st.text(max_size=8).filter(lambda name: name not in ("none", "equal", "sqrt")))
def test_unknown_balance_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="weights must be one of") as error:
        task_weights(name, {task: 1 for task in TASKS}, TASKS)
    assert repr(name) in str(error.value)


@SETTINGS
@given(
    balance=st.sampled_from(["none", "sqrt"]),
    counts=st.lists(st.one_of(st.none(), st.integers(1, 10**6)), min_size=3, max_size=3),
    dropped=st.booleans(),
)
def test_none_and_sqrt_need_every_row_count(balance: str, counts: list[int | None], dropped: bool) -> None:
    rows = {task: count for task, count in zip(TASKS, counts) if not (dropped and count is None)}
    unknown = [task for task, count in zip(TASKS, counts) if count is None]
    if not unknown:
        probabilities = task_weights(balance, rows, TASKS)
        scaled = np.asarray(counts, dtype=float) ** (0.5 if balance == "sqrt" else 1.0)
        assert probabilities == pytest.approx(scaled / scaled.sum())
        return
    with pytest.raises(ValueError, match="row count") as error:
        task_weights(balance, rows, TASKS)
    assert str(unknown) in str(error.value)


def test_equal_needs_no_row_counts() -> None:
    assert task_weights("equal", {}, TASKS) == pytest.approx([1 / 3] * 3)


def test_weights_whose_sum_overflows_are_refused_or_normalised() -> None:
    try:
        probabilities = task_weights({"a": 1e308, "b": 1e308, "c": 0.0}, {}, TASKS)
    except ValueError:
        return
    assert probabilities.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("balance", ["none", "sqrt"])
def test_negative_row_counts_are_refused_by_name(balance: str) -> None:
    with pytest.raises(ValueError, match="'a'"):
        task_weights(balance, {"a": -5, "b": 10, "c": 10}, TASKS)


# -- MultiTaskStream options --------------------------------------------------------------------------------------


def test_map_style_tasks_are_refused() -> None:
    tasks: dict[str, Any] = {**three_tasks(), "m": Dataset.from_dict({"text": ["m 0"]})}
    with pytest.raises(TypeError, match=r"\['m'\].*IterableDataset"):
        MultiTaskStream(tasks, weights="equal")


def test_no_tasks_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one task"):
        MultiTaskStream({}, weights="equal")


@SETTINGS
@given(
    option=st.sampled_from(["batch_size", "gradient_accumulation_steps", "shuffle_window", "world_size"]),
    value=st.one_of(st.integers(max_value=0), st.sampled_from([True, 2.0, "2"])),
)
def test_non_positive_int_options_are_refused(option: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"{option} must be a positive int"):
        MultiTaskStream(three_tasks(), weights="equal", **{option: value})


@pytest.mark.parametrize("missing", ["batch_size", "gradient_accumulation_steps"])
def test_iterating_without_a_batch_size_is_refused(missing: str) -> None:
    options = {"batch_size": 2, "gradient_accumulation_steps": 1}
    del options[missing]
    stream = MultiTaskStream(three_tasks(), weights="equal", **options)
    with pytest.raises(ValueError, match="batch size"):
        next(iter(stream))


@SETTINGS
@given(first=st.tuples(st.integers(2, 4), st.integers(0, 3)), second=st.tuples(st.integers(1, 4), st.integers(0, 3)))
def test_a_sharded_stream_cannot_be_split_again(first: tuple[int, int], second: tuple[int, int]) -> None:
    first = (first[0], first[1] % first[0])
    second = (second[0], second[1] % second[0])
    shard = make_stream().shard(*first)
    built = MultiTaskStream(three_tasks(), weights="equal", rank=first[1], world_size=first[0])
    for stream in (shard, built):
        if second == first:
            again = stream.shard(*second)
            assert (again.world_size, again.rank) == first
        else:
            with pytest.raises(ValueError, match="cannot be split again"):
                stream.shard(*second)


def test_shard_of_a_one_process_stream_is_allowed() -> None:
    shard = MultiTaskStream(three_tasks(), weights="equal", rank=0, world_size=1).shard(3, 2)
    assert (shard.world_size, shard.rank) == (3, 2)


def test_shard_leaves_the_original_stream_alone() -> None:
    stream = make_stream()
    first = stream.shard(2, 0)
    assert (stream.world_size, stream.rank) == (None, None)
    second = stream.shard(2, 1)
    assert (first.rank, second.rank) == (0, 1)


# -- declared_rows ------------------------------------------------------------------------------------------------


def test_declared_rows_of_a_plain_stream_is_none() -> None:
    assert declared_rows(task_data("a", 5, 1)) is None
    assert declared_rows(task_data("b", 12, 3)) is None


def _two_rows() -> Iterator[tuple[int, dict[str, Any]]]:
    yield from enumerate([{"text": "d 0"}, {"text": "d 1"}])


@SETTINGS
@given(count=st.integers(0, 10**9), split=st.sampled_from(["train", "test"]))
def test_declared_rows_reads_the_split_of_the_dataset_info(count: int, split: str) -> None:
    splits = SplitDict()
    splits.add(SplitInfo(name="train", num_examples=count))
    stream = IterableDataset(ExamplesIterable(_two_rows, {}), info=DatasetInfo(splits=splits), split=NamedSplit(split))
    assert declared_rows(stream) == (count if split == "train" and count else None)
    no_split = IterableDataset(ExamplesIterable(_two_rows, {}), info=DatasetInfo(splits=splits))
    assert declared_rows(no_split) is None


def test_declared_rows_feed_the_none_balance() -> None:
    splits = SplitDict()
    splits.add(SplitInfo(name="train", num_examples=300))
    declared = IterableDataset(
        ExamplesIterable(_two_rows, {}), info=DatasetInfo(splits=splits), split=NamedSplit("train")
    )
    stream = MultiTaskStream({"d": declared, "a": task_data("a", 30, 2)}, rows_per_task={"a": 100})
    assert stream.probabilities == pytest.approx([0.75, 0.25])
