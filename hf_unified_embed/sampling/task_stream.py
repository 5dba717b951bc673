"""``TaskStream``: one task's rows for one process, read as a stream, shuffled, and resumable exactly.

A pass reads the task's shards in a fresh seeded order. With at least as many shards as processes,
each process reads its own shards of that order (every row once per pass, read by one process);
with fewer, every process reads them all and keeps one row in ``world_size``
(:func:`datasets.distributed.split_dataset_by_node`, which is also what it does then). Rows are
shuffled in windows: ``shuffle_window`` rows are read, permuted with a generator seeded by (task,
pass, window) and handed out. When a pass ends the next one starts, so the stream never runs dry.

Why windows and not ``IterableDataset.shuffle(buffer_size=...)``: datasets does not save the
contents of a shuffle buffer in ``state_dict()`` (resuming refills it, so the order after a resume
differs). A window is a pure function of where it starts, so the state is the source's
``state_dict()`` at the window's start, the pass and window numbers and the offset in the window;
resuming re-reads at most one window. A state saved by another number of processes is continued
with :mod:`~hf_unified_embed.sampling.elastic_resume` (the rest of the interrupted pass, split anew).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
from datasets import IterableDataset, concatenate_datasets
from datasets.distributed import split_dataset_by_node

from hf_unified_embed.errors import InputError, shown

#: Rows per shuffle window when none is given: the window of every task is held in memory at once.
DEFAULT_SHUFFLE_WINDOW = 1000


def _whole(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def task_state_problem(
    state: Any, *, shuffle_window: int | None = None, rows: int | None = None
) -> tuple[str, str] | None:
    """The first field of a :meth:`TaskStream.state_dict` (as read back from a checkpoint) that no stream can
    have written, and why: ``(field, problem)``, or ``None`` for a well-formed state.

    Args:
        state: the task's saved state.
        shuffle_window: the stream's window; an offset past it cannot be a position in one.
        rows: the rows of the task's data, when known; a position past them cannot be one in its pass.
    """
    if not isinstance(state, dict):
        return "", f"expected a mapping, got {shown(state)}"
    for key, low in (("pass", 0), ("window", -1), ("offset", 0)):
        if key not in state:
            return key, "missing"
        if not _whole(state[key], low):
            return key, f"expected a whole number >= {low}, got {shown(state[key])}"
    if "window_start" not in state:
        return "window_start", "missing"
    if state["window_start"] is not None and not isinstance(state["window_start"], dict):
        return "window_start", f"expected a mapping or null, got {shown(state['window_start'])}"
    if state["window"] < 0 and (state["offset"] or state["window_start"] is not None):
        return "offset", f"a stream that has read no window is at offset 0, got {shown(state['offset'])}"
    if shuffle_window is not None and state["offset"] > shuffle_window:
        return "offset", f"{state['offset']} is past the end of a window of {shuffle_window} rows"
    if rows is not None and state["window"] >= 0 and state["window"] * (shuffle_window or 1) + state["offset"] > rows:
        return "offset", (
            f"window {state['window']}, offset {state['offset']} is past the task's {rows:,} rows"
            + (f" in windows of {shuffle_window}" if shuffle_window else "")
        )
    remainder = state.get("remainder")
    if remainder is None:
        return None
    return _remainder_problem(remainder, shuffle_window, rows)


def _remainder_problem(remainder: Any, shuffle_window: int | None, rows: int | None) -> tuple[str, str] | None:
    if not isinstance(remainder, dict):
        return "remainder", f"expected a mapping, got {shown(remainder)}"
    for key in ("world_size", "states", "source", "seen", "inner"):
        if key not in remainder:
            return f"remainder.{key}", "missing"
    states = remainder["states"]
    if not _whole(remainder["world_size"], 1):
        return "remainder.world_size", f"expected a whole number >= 1, got {shown(remainder['world_size'])}"
    if not isinstance(states, list) or len(states) != remainder["world_size"]:
        return "remainder.states", f"expected a list of {remainder['world_size']} task states, got {shown(states)}"
    if not _whole(remainder["source"], 0) or remainder["source"] > len(states):
        return "remainder.source", f"expected a whole number in [0, {len(states)}], got {shown(remainder['source'])}"
    if not _whole(remainder["seen"], 0):
        return "remainder.seen", f"expected a whole number >= 0, got {shown(remainder['seen'])}"
    for number, inner in enumerate(states):
        problem = task_state_problem(inner, shuffle_window=shuffle_window, rows=rows)
        if problem is not None:
            return f"remainder.states[{number}]{'.' if problem[0] else ''}{problem[0]}", problem[1]
    if remainder["inner"] is not None:
        problem = task_state_problem(remainder["inner"], shuffle_window=shuffle_window, rows=rows)
        if problem is not None:
            return f"remainder.inner{'.' if problem[0] else ''}{problem[0]}", problem[1]
    return None


class TaskStream:
    """The rows of one task for process ``rank`` of ``world_size``, endlessly, in seeded windows.

    Args:
        name: the task name (it seeds the shard and window orders, so they do not depend on task order).
        dataset: the task's rows as a ``datasets.IterableDataset`` (a Hub dataset loaded with
            ``streaming=True``, Parquet files read as a stream, ``IterableDataset.from_generator``...).
        rank: this process's index.
        world_size: processes reading the task.
        seed: seed of the shard and window orders.
        shuffle_window: rows shuffled together; ``1`` keeps the source's order.
    """

    def __init__(
        self,
        name: str,
        dataset: IterableDataset,
        *,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        shuffle_window: int = DEFAULT_SHUFFLE_WINDOW,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        if shuffle_window < 1:
            raise ValueError(f"shuffle_window must be a positive int, got {shown(shuffle_window)}")
        self.name = name
        self.dataset = dataset
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.shuffle_window = shuffle_window
        self._key = zlib.crc32(name.encode("utf-8"))
        self._pass = 0
        self._window = -1  # no window read yet
        self._window_start: dict[str, Any] | None = None  # the source's state where the current window starts
        self._offset = 0
        self._rows: list[dict[str, Any]] = []
        self._source: IterableDataset | None = None
        self._batches: Iterator[dict[str, list[Any]]] | None = None
        self._remainder: PassRemainder | None = None  # rows of a pass interrupted under another process count

    def next_rows(self, count: int) -> list[dict[str, Any]]:
        """The next ``count`` rows (passes chain, so there are always enough)."""
        rows: list[dict[str, Any]] = []
        while self._remainder is not None and len(rows) < count:
            row = self._remainder.next_row()
            if row is None:
                self._remainder = None
            else:
                rows.append(row)
        while len(rows) < count:
            if self._offset == len(self._rows):
                self._next_window()
            take = min(count - len(rows), len(self._rows) - self._offset)
            rows.extend(self._rows[self._offset : self._offset + take])
            self._offset += take
        return rows

    def state_dict(self) -> dict[str, Any]:
        """Where the stream is: a JSON-serialisable mapping for :meth:`load_state_dict`."""
        state = {
            "pass": self._pass,
            "window": self._window,
            "window_start": self._window_start,
            "offset": self._offset,
        }
        if self._remainder is not None:
            state["remainder"] = self._remainder.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from :meth:`state_dict` of a stream with the same arguments and data).

        Raises:
            InputError: the state is not one a stream writes (:func:`task_state_problem`), or it points at a
                position its data does not have (the data changed since it was saved).
        """
        problem = task_state_problem(state, shuffle_window=self.shuffle_window)
        if problem is not None:
            field = f", field {problem[0]!r}" if problem[0] else ""
            raise InputError(f"task {shown(self.name)}: the saved stream state{field}: {problem[1]}")
        self._pass, self._window = int(state["pass"]), int(state["window"])
        self._window_start, self._offset = state["window_start"], int(state["offset"])
        self._rows, self._source, self._batches = [], None, None
        remainder = state.get("remainder")
        self._remainder = PassRemainder(self, remainder) if remainder is not None else None
        if self._window < 0:
            return
        if self._window_start is not None:
            problem = _shape_problem(self._window_start, self._pass_source(self._pass).state_dict())
            if problem is not None:
                raise InputError(
                    f"task {shown(self.name)}: the saved stream state, field 'window_start{problem[0]}': {problem[1]}; "
                    "it is not a position this stream's data has (edited, or saved on other data)"
                )
        try:  # datasets applies the source's saved state when the first batch is read
            self._open_pass(self._window_start)
            self._rows = self._window_rows()
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
            raise InputError(
                f"task {shown(self.name)}: the saved stream state's window_start does not fit the task's data "
                f"({type(error).__name__}: {shown(str(error), 120)}); it was edited, or the data changed since"
            ) from None
        if self._offset > len(self._rows):
            raise InputError(
                f"task {shown(self.name)}: the saved stream state points at row {self._offset} of a window of "
                f"{len(self._rows)} rows; the task's data changed since it was saved"
            )

    def _open_pass(self, start: dict[str, Any] | None) -> None:
        source = self._pass_source(self._pass)
        if start is not None:
            source.load_state_dict(start)
        self._source = source
        self._batches = iter(source.iter(batch_size=self.shuffle_window))

    def _pass_source(self, number: int) -> IterableDataset:
        """The rows this process reads in pass ``number``: its shards of a fresh shard order."""
        shards = self.dataset.n_shards
        order = np.random.default_rng([self.seed, self._key, number]).permutation(shards).tolist()
        if shards >= self.world_size:
            mine = order[self.rank :: self.world_size]
            return _chain([self.dataset.shard(shards, index) for index in mine])
        source = _chain([self.dataset.shard(shards, index) for index in order])
        return split_dataset_by_node(source, rank=self.rank, world_size=self.world_size)

    def _next_window(self) -> None:
        if self._source is None:
            self._open_pass(None)
        assert self._source is not None
        self._window += 1
        self._window_start = self._source.state_dict() if self._window else None
        self._rows, self._offset = self._window_rows(), 0
        if self._rows:
            return
        # The pass is over: the next one reads the shards in a new order.
        self._pass, self._window, self._window_start = self._pass + 1, 0, None
        self._open_pass(None)
        self._rows = self._window_rows()
        if not self._rows:
            raise ValueError(
                f"task {shown(self.name)} has no rows for process {self.rank} of {self.world_size} "
                f"({self.dataset.n_shards} shard(s))"
            )

    def _window_rows(self) -> list[dict[str, Any]]:
        """The rows of the current window in their shuffled order (none at the end of a pass)."""
        assert self._batches is not None
        batch = next(self._batches, None)
        if not batch:
            return []
        columns = list(batch)
        rows = [dict(zip(columns, values)) for values in zip(*(batch[column] for column in columns))]
        if self.shuffle_window > 1:
            generator = np.random.default_rng([self.seed, self._key, self._pass, self._window])
            rows = [rows[index] for index in generator.permutation(len(rows))]
        return rows


def _shape_problem(saved: Any, template: Any, where: str = "") -> tuple[str, str] | None:
    """Where ``saved`` (a source's ``state_dict()`` read back from a checkpoint) is not shaped as ``template`` (the
    same source's fresh one), and why: the same keys, list lengths and type names, whole numbers >= 0 for
    numbers. A ``None`` of the template (an inner state not taken yet) may be ``None`` or shaped as its sibling
    ``examples_iterable`` (datasets keeps the previous state of the iterable it wraps)."""
    if isinstance(template, dict):
        if not isinstance(saved, dict) or set(saved) != set(template):
            return where, f"expected a mapping with keys {sorted(template)}, got {shown(saved)}"
        for key, inner in template.items():
            if inner is None and saved[key] is not None and "examples_iterable" in template:
                inner = template["examples_iterable"]
            if inner is None and saved[key] is None:
                continue
            problem = _shape_problem(saved[key], inner, f"{where}.{key}")
            if problem is not None:
                return problem
        return None
    if isinstance(template, list):
        if not isinstance(saved, list) or len(saved) != len(template):
            return where, f"expected a list of {len(template)}, got {shown(saved)}"
        for index, (mine, theirs) in enumerate(zip(saved, template)):
            problem = _shape_problem(mine, theirs, f"{where}[{index}]")
            if problem is not None:
                return problem
        return None
    if isinstance(template, int) and not isinstance(template, bool):
        return None if _whole(saved, 0) else (where, f"expected a whole number >= 0, got {shown(saved)}")
    return None if saved == template else (where, f"expected {shown(template)}, got {shown(saved)}")


def _chain(shards: list[IterableDataset]) -> IterableDataset:
    return shards[0] if len(shards) == 1 else concatenate_datasets(shards)


class PassRemainder:
    """The rows the saving processes had not read of their current pass, this process's share of them.

    Args:
        stream: the new process's task stream (its name, data, rank, world size, seed and window).
        state: the ``remainder`` entry of a state made by :func:`resplit` (or saved while reading one).
    """

    def __init__(self, stream: TaskStream, state: dict[str, Any]) -> None:
        self._stream = stream
        self._world_size = int(state["world_size"])
        self._states: list[dict[str, Any]] = list(state["states"])
        self._source = int(state["source"])
        self._seen = int(state["seen"])
        self._inner: TaskStream | None = None  # the old process whose remainder is being read
        self._inner_pass = 0  # ... and the pass it was in: its remainder ends where that pass does
        if self._source < len(self._states):
            self._open(state["inner"] if state["inner"] is not None else self._states[self._source])

    def state_dict(self) -> dict[str, Any]:
        """Where the remainder is read to: the ``remainder`` entry of the task stream's state."""
        return {
            "world_size": self._world_size,
            "states": self._states,
            "source": self._source,
            "seen": self._seen,
            "inner": self._inner.state_dict() if self._inner is not None else None,
        }

    def next_row(self) -> dict[str, Any] | None:
        """This process's next row of the remainder, or ``None`` when every remainder is read."""
        while self._inner is not None:
            row = self._inner.next_rows(1)[0]
            if self._inner.state_dict()["pass"] != self._inner_pass:
                # That row opened the old process's next pass: its remainder is over.
                self._source += 1
                self._inner = None
                if self._source < len(self._states):
                    self._open(self._states[self._source])
                continue
            index, self._seen = self._seen, self._seen + 1
            if index % self._stream.world_size == self._stream.rank:
                return row
        return None

    def _open(self, state: dict[str, Any]) -> None:
        inner = TaskStream(
            self._stream.name,
            self._stream.dataset,
            rank=self._source,
            world_size=self._world_size,
            seed=self._stream.seed,
            shuffle_window=self._stream.shuffle_window,
        )
        inner.load_state_dict(state)
        self._inner = inner
        self._inner_pass = int(self._states[self._source]["pass"])
