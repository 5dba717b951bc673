"""Batch plans: which rows form which batch, in which order, held as a few flat numpy arrays.

The plan is a pure function of the task sizes, the options, the seed and the epoch, so every
process computes the same plan without communicating. Work is vectorised per task (a Python loop
over tasks, never over rows): 1.4M rows in 330 tasks plan in well under a second.

Vocabulary used throughout:

* a **group** is ``group_size = world_size × gradient_accumulation_steps`` consecutive batches of one
  task, i.e. everything every device sees in one optimizer step. Accelerate hands batch ``k`` to
  process ``k % world_size``, so a group gives each device ``gradient_accumulation_steps`` disjoint
  batches of the same task.
* a task's **stream** is the sequence of its row indices for the epoch (shuffled or easy→hard,
  up/down-sampled by ``balance``); groups are cut from it front to back.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from hf_unified_embed.errors import shown

Interleave = Literal["round_robin", "shuffled", "sequential"]
InstanceOrder = Literal["random", "easy_to_hard"]
Balance = Literal["none", "equal", "sqrt"]

INTERLEAVES: tuple[str, ...] = get_args(Interleave)
INSTANCE_ORDERS: tuple[str, ...] = get_args(InstanceOrder)
BALANCES: tuple[str, ...] = get_args(Balance)


@dataclass(frozen=True)
class GroupCounts:
    """Per-task shape of an epoch, independent of the seed: what ``__len__`` needs.

    Attributes:
        groups: optimizer steps (groups) per task.
        batch_sizes: per-device batch size of the task's full groups.
        last_batch_sizes: per-device batch size of the task's last group (smaller only for the
            padded tail with ``balance="none"`` and ``drop_last=False``).
        group_size: batches per group (``world_size × gradient_accumulation_steps``).
    """

    groups: np.ndarray
    batch_sizes: np.ndarray
    last_batch_sizes: np.ndarray
    group_size: int

    @property
    def num_batches(self) -> int:
        return int(self.groups.sum()) * self.group_size

    def stream_lengths(self) -> np.ndarray:
        """Rows each task contributes to the epoch (padding and resampling included)."""
        full = np.maximum(self.groups - 1, 0) * self.batch_sizes
        last = np.where(self.groups > 0, self.last_batch_sizes, 0)
        return (full + last) * self.group_size


@dataclass(frozen=True)
class BatchPlan:
    """One epoch of task-pure batches.

    Attributes:
        rows: global row indices (into the ``ConcatDataset``) of every batch, concatenated in yield order.
        batch_offsets: ``rows[batch_offsets[i]:batch_offsets[i + 1]]`` is batch ``i``.
        batch_task: task index of every batch.
        task_names: names of the tasks, indexed like ``batch_task``.
        group_size: batches per optimizer step (``world_size × gradient_accumulation_steps``).
    """

    rows: np.ndarray
    batch_offsets: np.ndarray
    batch_task: np.ndarray
    task_names: tuple[str, ...]
    group_size: int

    def __len__(self) -> int:
        return len(self.batch_task)

    def batch(self, index: int) -> np.ndarray:
        return self.rows[self.batch_offsets[index] : self.batch_offsets[index + 1]]

    def batches(self, start: int = 0) -> Iterator[list[int]]:
        """Yield the batches as lists of ``int`` (what a ``DataLoader`` batch sampler must yield)."""
        offsets = self.batch_offsets.tolist()
        for index in range(start, len(self.batch_task)):
            yield self.rows[offsets[index] : offsets[index + 1]].tolist()

    def step_tasks(self) -> list[str]:
        """The task of every optimizer step, in order."""
        return [self.task_names[t] for t in self.batch_task[:: self.group_size].tolist()]

    def batches_per_task(self) -> dict[str, int]:
        counts = np.bincount(self.batch_task, minlength=len(self.task_names))
        return dict(zip(self.task_names, counts.tolist()))


def count_groups(
    sizes: Sequence[int],
    batch_sizes: Sequence[int],
    *,
    group_size: int,
    balance: Balance = "none",
    drop_last: bool = False,
) -> GroupCounts:
    """How many optimizer steps each task gets in an epoch.

    ``balance="none"`` keeps every row once: ``ceil(n / rows_per_step)`` steps, the last one padded
    (or ``floor`` with ``drop_last``). ``"equal"`` and ``"sqrt"`` keep the total number of steps
    of ``"none"`` and share it out with weights ``1`` or ``sqrt(n / rows_per_step)`` (largest
    remainder rounding), up-sampling small tasks and down-sampling large ones; their steps are all full.
    """
    n = np.asarray(sizes, dtype=np.int64)
    batch = np.asarray(batch_sizes, dtype=np.int64)
    rows_per_step = batch * group_size
    if drop_last:
        natural = n // rows_per_step
    else:
        natural = -(-n // rows_per_step)
    if balance == "none":
        groups = natural
        if drop_last:
            last = batch.copy()
        else:
            tail = n - np.maximum(natural - 1, 0) * rows_per_step
            last = np.where(natural > 0, -(-tail // group_size), batch)
        return GroupCounts(groups, batch, last, group_size)
    if balance == "equal":
        weights = (n > 0).astype(np.float64)
    elif balance == "sqrt":
        weights = np.sqrt(n / rows_per_step)
    else:
        raise ValueError(f"balance must be one of {BALANCES}, got {shown(balance)}")
    groups = _largest_remainder(int(natural.sum()), weights)
    return GroupCounts(groups, batch, batch.copy(), group_size)


def _largest_remainder(total: int, weights: np.ndarray) -> np.ndarray:
    """Integers proportional to ``weights`` summing to ``total`` (Hamilton's method, ties to lower index)."""
    if total == 0 or weights.sum() == 0:
        return np.zeros(len(weights), dtype=np.int64)
    quotas = total * weights / weights.sum()
    counts = np.floor(quotas).astype(np.int64)
    short = total - int(counts.sum())
    counts[np.argsort(-(quotas - counts), kind="stable")[:short]] += 1
    return counts


def build_batch_plan(
    sizes: Sequence[int],
    batch_sizes: Sequence[int],
    *,
    group_size: int = 1,
    task_order: Sequence[int] | None = None,
    interleave: Interleave = "round_robin",
    instance_order: InstanceOrder = "random",
    balance: Balance = "none",
    drop_last: bool = False,
    difficulties: Sequence[np.ndarray | None] | None = None,
    seed: int = 0,
    epoch: int = 0,
    task_names: Sequence[str] | None = None,
) -> BatchPlan:
    """Plan one epoch of task-pure batches over tasks stored back to back (as in a ``ConcatDataset``).

    Args:
        sizes: rows per task.
        batch_sizes: per-device batch size per task.
        group_size: batches per optimizer step, ``world_size × gradient_accumulation_steps``.
        task_order: task indices in curriculum order (default: as given); used by ``round_robin``
            and ``sequential``.
        interleave: ``"round_robin"`` (Data-CUBE Algorithm 1: one step of each task in ``task_order``,
            repeated until every task is exhausted), ``"shuffled"`` (uniformly random order of the
            steps, each task's steps kept in their instance order) or ``"sequential"``.
        instance_order: ``"random"`` or ``"easy_to_hard"`` (descending ``difficulties``, ties random).
        balance: ``"none"``, ``"equal"`` or ``"sqrt"``, see :func:`count_groups`.
        drop_last: drop a task's last incomplete step instead of padding it.
        difficulties: per-task arrays of φ (needed for ``easy_to_hard``).
        seed: the plan is a pure function of the seed, the epoch and the arguments above.
        epoch: the epoch whose plan to draw (see ``seed``).
        task_names: names for :class:`BatchPlan` (default ``"0"``, ``"1"``, ...).
    """
    n = np.asarray(sizes, dtype=np.int64)
    num_tasks = len(n)
    names = tuple(task_names) if task_names is not None else tuple(str(t) for t in range(num_tasks))
    order = np.arange(num_tasks) if task_order is None else np.asarray(task_order, dtype=np.int64)
    if sorted(order.tolist()) != list(range(num_tasks)):
        raise ValueError(f"task_order must be a permutation of 0..{num_tasks - 1}, got {order.tolist()}")
    if instance_order == "easy_to_hard" and (difficulties is None or len(difficulties) != num_tasks):
        raise ValueError("instance_order='easy_to_hard' needs one difficulty array per task")
    if seed < 0 or epoch < 0:
        raise ValueError(f"seed and epoch must be non-negative, got seed={seed}, epoch={epoch}")

    counts = count_groups(sizes, batch_sizes, group_size=group_size, balance=balance, drop_last=drop_last)
    # One independent stream per task (plus one for the interleaving), so a task's rows do not
    # change when another task is added or resized.
    task_seeds = np.random.SeedSequence([seed, epoch]).spawn(num_tasks + 1)
    lengths = counts.stream_lengths()
    global_offsets = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64)
    streams = []
    for task in range(num_tasks):
        if lengths[task] == 0:
            continue
        difficulty = difficulties[task] if difficulties is not None else None
        rng = np.random.default_rng(task_seeds[task])
        step_rows = int(counts.batch_sizes[task]) * group_size
        stream = _task_stream(
            int(n[task]), int(lengths[task]), rng, difficulty, instance_order, balance == "none", step_rows
        )
        streams.append(stream + global_offsets[task])
    all_streams = np.concatenate(streams) if streams else np.zeros(0, dtype=np.int64)
    stream_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)

    group_task, group_rank = _interleave(counts.groups, order, interleave, np.random.default_rng(task_seeds[-1]))
    is_last = group_rank == counts.groups[group_task] - 1
    group_batch = np.where(is_last, counts.last_batch_sizes[group_task], counts.batch_sizes[group_task])
    group_rows = group_batch * group_size
    source = stream_starts[group_task] + group_rank * counts.batch_sizes[group_task] * group_size
    target = np.concatenate([[0], np.cumsum(group_rows)[:-1]]).astype(np.int64)
    total = int(group_rows.sum())
    rows = all_streams[np.repeat(source - target, group_rows) + np.arange(total, dtype=np.int64)]

    batch_lengths = np.repeat(group_batch, group_size)
    batch_offsets = np.concatenate([[0], np.cumsum(batch_lengths)]).astype(np.int64)
    batch_task = np.repeat(group_task, group_size).astype(np.int32)
    return BatchPlan(rows, batch_offsets, batch_task, names, group_size)


def _task_stream(
    n: int,
    length: int,
    rng: np.random.Generator,
    difficulty: np.ndarray | None,
    instance_order: InstanceOrder,
    wrap: bool,
    step_rows: int,
) -> np.ndarray:
    """``length`` local row indices of one task: whole passes over the task, then a part-pass.

    Each pass is ordered on its own, so an up-sampled easy→hard task repeats its sweep rather than
    placing copies of a row next to each other (the same text twice in a batch is a false negative).
    A part-pass (down-sampling, or the remainder of up-sampling) is a random subset, then ordered.
    With ``wrap`` (``balance="none"``: one pass, truncated by ``drop_last`` or padded to fill the last
    step) the pass is cut or cycled from its start, as accelerate's ``even_batches`` pads.
    """
    if wrap:
        return np.resize(_ordered(np.arange(n), rng, difficulty, instance_order), length)
    passes, rest = divmod(length, n)
    separate = n >= step_rows
    whole_passes = [_ordered(np.arange(n), rng, difficulty, instance_order) for _ in range(passes)]
    stream = np.concatenate(whole_passes) if whole_passes else np.zeros(0, dtype=np.int64)
    if separate:
        _separate_pass_boundaries(stream, range(n, len(stream), n), n, step_rows)
    if rest:
        boundary = len(stream)
        if separate and boundary:
            # Prefer rows absent from the step the part-pass starts in, so that step can hold no repeat.
            in_step = np.unique(stream[boundary - boundary % step_rows :])
            is_fresh = np.ones(n, dtype=bool)
            is_fresh[in_step] = False
            fresh = np.flatnonzero(is_fresh)
            if rest <= len(fresh):
                subset = rng.choice(fresh, size=rest, replace=False)
            else:
                subset = np.concatenate([fresh, rng.choice(in_step, size=rest - len(fresh), replace=False)])
        else:
            subset = rng.choice(n, size=rest, replace=False)
        stream = np.concatenate([stream, _ordered(subset, rng, difficulty, instance_order)])
        if separate and boundary:
            _separate_pass_boundaries(stream, [boundary], n, step_rows)
    return stream


def _separate_pass_boundaries(stream: np.ndarray, boundaries: Iterable[int], n: int, step_rows: int) -> None:
    """Keep a row out of a step that already holds it from the previous pass (in place).

    A step that straddles two passes could hold the same row twice, which in-batch and gathered
    losses score as a false negative. Each repeated row at the head of the new pass is swapped with
    the nearest later row of that pass that is not in the step, which moves the easy→hard order
    by as little as possible. Always possible when ``n >= step_rows``.
    """
    for boundary in boundaries:
        start = boundary - boundary % step_rows
        end = min(start + step_rows, len(stream))
        if start == boundary:
            continue
        tail = stream[start:boundary]
        clashes = boundary + np.flatnonzero(np.isin(stream[boundary:end], tail))
        if not len(clashes):
            continue
        later = end + np.flatnonzero(~np.isin(stream[end : boundary + n], tail))[: len(clashes)]
        clashes = clashes[: len(later)]
        stream[clashes], stream[later] = stream[later], stream[clashes].copy()


def _ordered(
    indices: np.ndarray, rng: np.random.Generator, difficulty: np.ndarray | None, instance_order: InstanceOrder
) -> np.ndarray:
    shuffled = rng.permutation(indices)
    if instance_order == "random":
        return shuffled
    assert difficulty is not None
    # Descending φ = easy first (Data-CUBE Eq. 8); the shuffle above breaks ties at random.
    return shuffled[np.argsort(-difficulty[shuffled], kind="stable")]


def _interleave(
    groups: np.ndarray, order: np.ndarray, interleave: Interleave, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The task and the within-task rank of every group, in yield order."""
    tasks = np.arange(len(groups))
    if interleave == "sequential":
        group_task = np.repeat(order, groups[order])
    elif interleave == "round_robin":
        group_task = np.repeat(tasks, groups)
        position = np.empty_like(order)
        position[order] = np.arange(len(order))
        group_task = group_task[np.lexsort((position[group_task], _ranks(group_task, len(groups))))]
    elif interleave == "shuffled":
        group_task = rng.permutation(np.repeat(tasks, groups))
    else:
        raise ValueError(f"interleave must be one of {INTERLEAVES}, got {shown(interleave)}")
    return group_task, _ranks(group_task, len(groups))


def _ranks(group_task: np.ndarray, num_tasks: int) -> np.ndarray:
    """For each entry, how many earlier entries have the same task (its step index within the task)."""
    by_task = np.argsort(group_task, kind="stable")
    starts = np.concatenate([[0], np.cumsum(np.bincount(group_task, minlength=num_tasks))[:-1]])
    ranks = np.empty(len(group_task), dtype=np.int64)
    ranks[by_task] = np.arange(len(group_task)) - starts[group_task[by_task]]
    return ranks
