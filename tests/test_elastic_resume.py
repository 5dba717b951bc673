"""Elastic stream resume: a task stream saved by N processes continues under M (issue 37 item 7).

Before: a state saved by N processes could only be resumed by N (a ``ValueError`` otherwise). Now the rows
each old process had not read of its current pass are split among the M new processes: over the whole run,
every row of each old process's current pass is read exactly once, then the M processes read the next
passes with the usual split, and a state saved mid-way through such a remainder resumes exactly.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hf_unified_embed.sampling.elastic_resume import resplit
from hf_unified_embed.sampling.multi_task_stream import MultiTaskStream
from hf_unified_embed.sampling.task_stream import TaskStream
from tests.test_streaming_units import one_pass, row_id, task_data

SETTINGS = settings(max_examples=30, deadline=None)


@st.composite
def elastic_layouts(draw: st.DrawFn) -> tuple[int, int, int, int]:
    """(rows, shards, N, M), N ≠ M, where every process of N and of M gets rows of each pass (N = M loads
    each process's own state: test_streaming_units.py)."""
    shards = draw(st.integers(1, 6))
    saved_by = draw(st.integers(1, 4))
    resumed_by = draw(st.integers(1, 4).filter(lambda count: count != saved_by))
    rows = draw(st.integers(max(shards, saved_by, resumed_by), 50))
    return rows, shards, saved_by, resumed_by


def _pass_rows(rows: int, shards: int, rank: int, world_size: int, seed: int, window: int, number: int) -> list[int]:
    """The rows process ``rank`` of ``world_size`` reads in pass ``number``."""
    stream = TaskStream(
        "t", task_data("t", rows, shards), rank=rank, world_size=world_size, seed=seed, shuffle_window=window
    )
    return one_pass(stream, passes=number + 1)[number]


@SETTINGS
@given(
    layout=elastic_layouts(),
    window=st.integers(1, 8),
    seed=st.integers(0, 2**16),
    positions=st.lists(st.floats(0, 2.5), min_size=4, max_size=4),
)
@example(layout=(12, 3, 1, 2), window=4, seed=0, positions=[0.5, 0, 0, 0])  # 1 -> 2, mid-pass
@example(layout=(12, 3, 2, 1), window=4, seed=0, positions=[0.5, 1.0, 0, 0])  # 2 -> 1, one at its pass's end
@example(layout=(9, 1, 2, 3), window=2, seed=1, positions=[0, 0, 0, 0])  # nothing read yet
def test_every_row_of_the_interrupted_pass_is_read_once_then_passes_split_anew(
    layout: tuple[int, int, int, int], window: int, seed: int, positions: list[float]
) -> None:
    rows, shards, saved_by, resumed_by = layout
    data = task_data("t", rows, shards)
    options: dict[str, Any] = {"seed": seed, "shuffle_window": window}
    # The N processes read different amounts (possibly into later passes), then the run stops.
    states, read_in_pass, expected = [], Counter[int](), Counter[int]()
    for rank in range(saved_by):
        old = TaskStream("t", data, rank=rank, world_size=saved_by, **options)
        read = [row_id(row)[1] for row in old.next_rows(round(positions[rank] * rows))]
        state = json.loads(json.dumps(old.state_dict()))
        current = _pass_rows(rows, shards, rank, saved_by, seed, window, state["pass"])
        done = sum(len(_pass_rows(rows, shards, rank, saved_by, seed, window, p)) for p in range(state["pass"]))
        read_in_pass.update(read[done:])
        expected.update(current)
        states.append({"step": 7, "tasks": {"t": state}})
    following = max(state["tasks"]["t"]["pass"] for state in states) + 1
    remainders, next_passes = [], []
    for rank in range(resumed_by):
        new = TaskStream("t", data, rank=rank, world_size=resumed_by, **options)
        new.load_state_dict(json.loads(json.dumps(resplit(states, rank, resumed_by)))["tasks"]["t"])
        mine = []
        while True:
            (row,) = new.next_rows(1)
            if "remainder" not in new.state_dict():
                break  # that row is the first of the next pass
            mine.append(row_id(row)[1])
        remainders.append(mine)
        assert new.state_dict()["pass"] == following
        rest = one_pass(new, passes=following + 1)[following]
        next_passes.append([row_id(row)[1], *rest])
    assert read_in_pass + Counter(itertools.chain.from_iterable(remainders)) == expected
    # Every remainder row is read by one new process only, in shares that differ by at most one row.
    assert max(map(len, remainders)) - min(map(len, remainders)) <= 1
    assert sorted(itertools.chain.from_iterable(next_passes)) == list(range(rows))


@SETTINGS
@given(layout=elastic_layouts(), window=st.integers(1, 8), seed=st.integers(0, 2**8), read=st.integers(0, 30))
def test_a_state_saved_while_reading_a_remainder_resumes_exactly(
    layout: tuple[int, int, int, int], window: int, seed: int, read: int
) -> None:
    rows, shards, saved_by, resumed_by = layout
    data = task_data("t", rows, shards)
    options: dict[str, Any] = {"seed": seed, "shuffle_window": window}
    states = []
    for rank in range(saved_by):
        old = TaskStream("t", data, rank=rank, world_size=saved_by, **options)
        old.next_rows(rank + 1)
        states.append({"step": 3, "tasks": {"t": old.state_dict()}})
    start = resplit(states, resumed_by - 1, resumed_by)["tasks"]["t"]
    stream = TaskStream("t", data, rank=resumed_by - 1, world_size=resumed_by, **options)
    stream.load_state_dict(start)
    stream.next_rows(read)
    resumed = TaskStream("t", data, rank=resumed_by - 1, world_size=resumed_by, **options)
    resumed.load_state_dict(json.loads(json.dumps(stream.state_dict())))
    assert resumed.next_rows(2 * rows) == stream.next_rows(2 * rows)


def test_multi_task_stream_keeps_the_task_order_across_process_counts() -> None:
    tasks = {name: task_data(name, 30, 3) for name in ("a", "b")}
    saved = [
        MultiTaskStream(
            tasks, weights="equal", batch_size=2, gradient_accumulation_steps=1, seed=5, rank=r, world_size=2
        )
        for r in range(2)
    ]
    for stream in saved:
        rows = iter(stream)
        for _ in range(10):
            next(rows)
    states = [stream.state_at(5) for stream in saved]
    resumed = MultiTaskStream(tasks, weights="equal", batch_size=2, gradient_accumulation_steps=1, seed=5)
    resumed.load_state_dict(resplit(states, 0, 1))
    rows = list(itertools.islice(iter(resumed), 20))
    assert [row["dataset_name"] for row in rows[::2]] == [resumed.task_names[resumed.task_of(s)] for s in range(5, 15)]


def test_a_state_mid_remainder_is_refused_under_yet_another_process_count() -> None:
    data = task_data("t", 12, 3)
    old = TaskStream("t", data, rank=0, world_size=1)
    old.next_rows(2)
    once = resplit([{"step": 1, "tasks": {"t": old.state_dict()}}], 0, 2)
    with pytest.raises(ValueError, match="resume it with the 2 process"):
        resplit([once, once], 0, 3)
