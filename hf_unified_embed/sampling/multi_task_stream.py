"""``MultiTaskStream``: several task streams as one training stream, one task per optimizer step on every device.

sentence-transformers trains several tasks from a ``DatasetDict`` of map-style datasets only (a
``DatasetDict`` holding an ``IterableDataset`` is refused, sentence-transformers #3355/#3264/#3674),
so a corpus too large to download or to hold in the Arrow cache cannot be trained task by task.
This class is a ``datasets.IterableDataset`` that the stock trainer streams like any other: each
*step* (an optimizer step: ``gradient_accumulation_steps × per_device_train_batch_size`` rows on
each process) is drawn from one task, and the task of step ``s`` depends only on the seed and
``s``, so every process trains on the same task in the same step without talking to the others.
Each process reads its own part of every task (:class:`~hf_unified_embed.sampling.task_stream.TaskStream`).
"""

from __future__ import annotations

import copy
import logging
import math
import sys
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch.utils.data
from datasets import Features, IterableDataset, Value
from datasets.info import DatasetInfo
from datasets.iterable_dataset import ExamplesIterable

from hf_unified_embed.data.parquet_stream import data_identity, identity_change
from hf_unified_embed.errors import InputError, shown
from hf_unified_embed.sampling.stream_state_checks import data_change_message, stream_state_problem
from hf_unified_embed.sampling.task_stream import DEFAULT_SHUFFLE_WINDOW, TaskStream

logger = logging.getLogger(__name__)

#: ``weights`` given by name: steps in proportion to the rows of a task, the same for every task, or √rows.
STREAM_BALANCES = ("none", "equal", "sqrt")
#: Steps whose task is drawn with one generator: the task of any step is found without drawing the earlier ones.
_SCHEDULE_CHUNK = 4096
#: Step states kept for the checkpoint callback: the dataloader reads at most a step or two ahead of training.
_KEPT_STATES = 16
#: What a resumed stream does with a task whose data is not the data its saved state read: refuse to resume
#: (the default: an exact resume cannot hold), or start that task's pass afresh on the new data and say so.
DATA_CHANGE_ACTIONS = ("refuse", "restart")


def task_weights(
    weights: str | Mapping[str, float], rows_per_task: Mapping[str, int | None], tasks: list[str]
) -> np.ndarray:
    """The probability of each task (in ``tasks`` order) for one step.

    Args:
        weights: ``"none"`` (steps in proportion to a task's rows), ``"equal"``, ``"sqrt"`` (to √rows),
            or ``{task: weight}`` for every task (weights ≥ 0, not all 0).
        rows_per_task: rows of each task (``None`` when unknown), read for ``"none"`` and ``"sqrt"``.
        tasks: the task names.
    """
    if isinstance(weights, str):
        if weights not in STREAM_BALANCES:
            raise ValueError(
                f"weights must be one of {list(STREAM_BALANCES)} or a mapping of task weights, got {shown(weights)}"
            )
        if weights == "equal":
            values = [1.0] * len(tasks)
        else:
            unknown = [task for task in tasks if rows_per_task.get(task) is None]
            if unknown:
                raise ValueError(
                    f"weights={shown(weights)} needs the row count of every task; the stream(s) of {unknown} do not "
                    "declare one: pass rows_per_task, weights='equal' or explicit weights"
                )
            counts: dict[str, Any] = {task: rows_per_task[task] for task in tasks}
            bad = {task: count for task, count in counts.items() if not _is_count(count)}
            if bad:
                raise ValueError(f"row counts must be whole numbers >= 0, got {bad}")
            values = [float(counts[task]) for task in tasks]  # type: ignore[arg-type]
            if weights == "sqrt":
                values = [math.sqrt(value) for value in values]
    else:
        extra = sorted(set(weights) - set(tasks))
        missing = [task for task in tasks if task not in weights]
        if extra or missing:
            raise ValueError(f"weights must give every task a weight: missing {missing}, unknown {extra}")
        bad = {task: weights[task] for task in tasks if not _is_weight(weights[task])}
        if bad:
            raise ValueError(f"task weights must be finite numbers >= 0, got {bad}")
        values = [float(weights[task]) for task in tasks]
    # Scaled by the largest first: weights near the float maximum would overflow their sum.
    largest = max(values)
    if largest <= 0:
        raise ValueError(f"the task weights {dict(zip(tasks, values))} sum to 0: no task would be trained")
    scaled = np.asarray(values, dtype=np.float64) / largest
    return scaled / scaled.sum()


def _is_weight(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _is_count(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and bool(value >= 0)


def declared_rows(dataset: IterableDataset) -> int | None:
    """Rows a stream declares in its dataset info (a Hub dataset's card metadata), else ``None``."""
    splits = dataset.info.splits or {}
    split = splits.get(str(dataset.split)) if dataset.split is not None else None
    rows = getattr(split, "num_examples", None)
    return int(rows) if rows else None


class MultiTaskStream(IterableDataset):
    """Task streams as one endless stream of task-pure steps for ``SentenceTransformerTrainer``.

    Each step is ``gradient_accumulation_steps × batch_size`` rows of one task on every process: the
    task of step ``s`` is drawn with ``weights`` by a generator seeded with ``(seed, s // 4096)``, so
    all processes agree without communicating and a resumed run draws the same tasks. Rows carry a
    ``dataset_name`` column (the task name), which sentence-transformers uses to pick the task's loss
    from the trainer's ``loss`` dict — as it does for a ``DatasetDict``.

    Each task is a :class:`~hf_unified_embed.sampling.task_stream.TaskStream`: its shards are split
    across processes and nodes, read pass after pass in a fresh order and shuffled in windows of
    ``shuffle_window`` rows, so nothing is downloaded in full and memory does not grow with the data.
    The stream is endless: the run's length is ``max_steps``.

    **Exact resume.** :meth:`state_at` is the state of the stream before a step; the callback that
    :meth:`attach` adds saves every process's state in each checkpoint (``trainer_state.json``) and
    restores it on ``resume_from_checkpoint``, so a resumed run sees the batches the uninterrupted one
    would have; under another number of processes, each takes its share of the rest of every task's
    pass (:mod:`~hf_unified_embed.sampling.elastic_resume`). The trainer's own replay of the data
    (``ignore_data_skip=False``) must be off.

    Args:
        tasks: ``{task name: datasets.IterableDataset}`` (e.g. ``load_unified(..., streaming=True)``).
        weights: ``"none"`` (steps in proportion to rows: every row about once per pass), ``"equal"``,
            ``"sqrt"`` or ``{task: weight}``.
        rows_per_task: rows of each task, for ``"none"``/``"sqrt"``; default: what each stream
            declares in its dataset info.
        batch_size: rows per batch on each process. Default (with :meth:`attach`): the trainer's.
        gradient_accumulation_steps: batches per optimizer step. Default (with :meth:`attach`): the trainer's.
        seed: seed of the task draws, shard orders and windows. Default (with :meth:`attach`): the trainer's.
        shuffle_window: rows of a task shuffled together (memory: one window per task).
        rank: this process. Default: accelerate calls :meth:`shard` on each process when it prepares
            the dataloader; 0 otherwise.
        world_size: the number of processes. Default: set by :meth:`shard` as ``rank``; 1 otherwise.
        on_data_change: what a resume does with a task whose data is not what its saved state read (other
            shards, rows or file contents: :func:`~hf_unified_embed.data.parquet_stream.data_identity`):
            ``"refuse"`` (an :class:`~hf_unified_embed.errors.InputError` naming the task and what changed) or
            ``"restart"`` (that task's pass starts afresh on the new data, with a warning).

    Example:
        ::

            from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
            from hf_unified_embed.data import load_unified
            from hf_unified_embed.sampling import MultiTaskStream

            tasks = load_unified("my-org/unified-data", streaming=True)
            stream = MultiTaskStream(tasks, weights="sqrt")
            args = SentenceTransformerTrainingArguments(
                "out", max_steps=10_000, per_device_train_batch_size=64, ignore_data_skip=True,
                accelerator_config={"dispatch_batches": False},
            )
            trainer = SentenceTransformerTrainer(model=model, args=args, loss=losses, data_collator=collator)
            stream.attach(trainer)
            trainer.train()
    """

    def __init__(
        self,
        tasks: Mapping[str, IterableDataset],
        *,
        weights: str | Mapping[str, float] = "none",
        rows_per_task: Mapping[str, int] | None = None,
        batch_size: int | None = None,
        gradient_accumulation_steps: int | None = None,
        seed: int | None = None,
        shuffle_window: int = DEFAULT_SHUFFLE_WINDOW,
        rank: int | None = None,
        world_size: int | None = None,
        on_data_change: str = "refuse",
    ) -> None:
        if not tasks:
            raise ValueError("MultiTaskStream needs at least one task")
        not_streams = sorted(name for name, dataset in tasks.items() if not isinstance(dataset, IterableDataset))
        if not_streams:
            raise TypeError(
                f"task(s) {not_streams} are not datasets.IterableDataset; load them with streaming=True "
                "(or Dataset.to_iterable_dataset())"
            )
        for option, value in (
            ("batch_size", batch_size),
            ("gradient_accumulation_steps", gradient_accumulation_steps),
            ("shuffle_window", shuffle_window),
            ("world_size", world_size),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{option} must be a positive int, got {shown(value)}")
        if on_data_change not in DATA_CHANGE_ACTIONS:
            raise ValueError(f"on_data_change must be one of {list(DATA_CHANGE_ACTIONS)}, got {shown(on_data_change)}")
        self.on_data_change = on_data_change
        self._identities: dict[str, dict[str, Any] | None] | None = None
        self.tasks = dict(tasks)
        self.task_names = list(self.tasks)
        rows = {name: declared_rows(dataset) for name, dataset in self.tasks.items()}
        rows.update(rows_per_task or {})
        self.rows_per_task = rows
        self.weights = weights
        self.probabilities = task_weights(weights, rows, self.task_names)
        self.batch_size = batch_size
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.seed = seed
        self.shuffle_window = shuffle_window
        self.rank = rank
        self.world_size = world_size
        self._start: dict[str, Any] | None = None
        self._states: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._chunk: tuple[int, np.ndarray] | None = None
        super().__init__(ExamplesIterable(_no_rows, {}), info=DatasetInfo(features=_common_features(self.tasks)))

    # ---- what the trainer and accelerate call --------------------------------------------------------

    @property
    def n_shards(self) -> int:
        """Any number of processes can share the stream (each reads its part of every task), so accelerate
        hands each process its part with :meth:`shard` rather than slicing one stream's batches."""
        return sys.maxsize

    def shard(self, num_shards: int, index: int, contiguous: bool = True) -> MultiTaskStream:
        """The stream of process ``index`` of ``num_shards`` (called by accelerate for each process)."""
        if self.world_size not in (None, 1) and (self.world_size, self.rank) != (num_shards, index):
            raise ValueError(
                f"this stream is already process {self.rank} of {self.world_size}; it cannot be split again"
            )
        # Not copy.copy: datasets' __getstate__ hands over the instance's own __dict__, which the copy would share.
        shard = type(self).__new__(type(self))
        shard.__dict__.update(self.__dict__)
        shard.rank, shard.world_size = index, num_shards
        shard._states, shard._chunk = OrderedDict(), None
        return shard

    def set_epoch(self, epoch: int) -> None:
        # Endless: passes over each task reshuffle by themselves; the trainer's epoch stays 0.
        self._epoch = epoch

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError(
                "MultiTaskStream must be read in the training process (dataloader_num_workers=0): its state, "
                "saved in checkpoints for an exact resume, lives there"
            )
        self._check_ready()
        rank, world_size = self._process()
        streams = {
            name: TaskStream(
                name,
                dataset,
                rank=rank,
                world_size=world_size,
                seed=self.seed or 0,
                shuffle_window=self.shuffle_window,
            )
            for name, dataset in self.tasks.items()
        }
        step = 0
        if self._start is not None:
            step = int(self._start["step"])
            for name, state in self._start["tasks"].items():
                streams[name].load_state_dict(state)
        rows_per_step = self.batch_size * self.gradient_accumulation_steps  # type: ignore[operator]
        self._keep_state(step, streams)
        while True:
            task = self.task_names[self.task_of(step)]
            rows = streams[task].next_rows(rows_per_step)
            step += 1
            # Recorded before the step's rows are handed out: the trainer may save a checkpoint as soon as
            # it has consumed them, while the dataloader is already waiting on the next step.
            self._keep_state(step, streams)
            for row in rows:
                row["dataset_name"] = task
                yield row

    # ---- schedule and state --------------------------------------------------------------------------

    def task_of(self, step: int) -> int:
        """The index (in :attr:`task_names`) of the task of ``step``: the same on every process."""
        chunk, position = divmod(step, _SCHEDULE_CHUNK)
        if self._chunk is None or self._chunk[0] != chunk:
            generator = np.random.default_rng([self.seed or 0, chunk])
            self._chunk = (chunk, generator.choice(len(self.task_names), size=_SCHEDULE_CHUNK, p=self.probabilities))
        return int(self._chunk[1][position])

    def state_at(self, step: int) -> dict[str, Any]:
        """This process's stream state before ``step`` (a step the dataloader has reached)."""
        if step not in self._states:
            raise KeyError(f"no stream state for step {step}: the stream holds steps {list(self._states)}")
        return self._states[step]

    def state_dict(self) -> dict[str, Any]:
        """The state after the rows handed out so far (the stream reads whole steps at a time)."""
        if not self._states:
            return self._start or {"step": 0, "tasks": {}}
        return self._states[next(reversed(self._states))]

    def identities(self) -> dict[str, dict[str, Any] | None]:
        """Each task's data identity (:func:`~hf_unified_embed.data.parquet_stream.data_identity`: its local
        Parquet files' names, sizes, rows and footers; ``None`` for other streams), read once, saved with every
        state and compared on resume."""
        if self._identities is None:
            self._identities = {name: data_identity(dataset) for name, dataset in self.tasks.items()}
        return self._identities

    def data_changes(self, state_dict: dict[str, Any]) -> dict[str, str]:
        """``{task: what changed}`` for each task whose data is not what ``state_dict`` was saved on (tasks of
        a state that recorded no identity, or of streams that have none, are taken as unchanged)."""
        saved = state_dict.get("data") or {}
        changes = {}
        for name, identity in self.identities().items():
            if name in saved and identity is not None:
                change = identity_change(saved[name], identity)
                if change is not None:
                    changes[name] = change
        return changes

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Start the next iteration where ``state_dict`` (from :meth:`state_at` / :meth:`state_dict`) was.

        Raises:
            InputError: the state is malformed (naming the field), names tasks this stream does not have, or
                was saved on other data for a task while ``on_data_change="refuse"``.
        """
        tasks = state_dict.get("tasks") if isinstance(state_dict, dict) else None
        unknown = sorted(set(tasks) - set(self.task_names)) if isinstance(tasks, dict) else []
        if unknown:
            raise InputError(f"the stream state names task(s) {unknown} that this stream does not have")
        problem = stream_state_problem(state_dict, shuffle_window=self.shuffle_window)
        changes = self.data_changes(state_dict) if problem is None else {}
        if problem is None:  # a position past the rows of unchanged data is no position in them
            rows = {name: value["rows"] for name, value in self.identities().items() if value and name not in changes}
            problem = stream_state_problem(state_dict, shuffle_window=self.shuffle_window, rows_per_task=rows)
        if problem is not None:
            field = f", field {problem[0]!r}" if problem[0] else ""
            raise InputError(f"the saved stream state{field}: {problem[1]}")
        start = copy.deepcopy(state_dict)
        for name, change in changes.items():
            if self.on_data_change == "refuse":
                raise InputError(data_change_message(name, change))
            task = start["tasks"].get(name)
            if task is not None:
                # The saved positions mean nothing in other data: the task reads a fresh pass of it.
                start["tasks"][name] = {"pass": int(task["pass"]), "window": -1, "window_start": None, "offset": 0}
            logger.warning(
                "task %r: its data changed since the stream state was saved (%s); on_data_change='restart': "
                "its pass starts afresh on the new data",
                name,
                change,
            )
        start["data"] = {**(start.get("data") or {}), **{k: v for k, v in self.identities().items() if v is not None}}
        self._start = start
        self._states = OrderedDict()

    def attach(self, trainer: Any) -> MultiTaskStream:
        """Make this stream ``trainer``'s training data and add the callback that saves and restores it.

        The trainer is built without ``train_dataset`` (sentence-transformers only takes a ``loss`` dict
        with a ``DatasetDict``); its ``loss`` dict is keyed by task name. Batch size, accumulation and seed
        not given to the stream are the trainer's.
        """
        from hf_unified_embed.sampling.stream_resume import StreamResumeCallback

        args = trainer.args
        self._adopt(args.train_batch_size, args.gradient_accumulation_steps, args.seed)
        StreamResumeCallback.check_arguments(args)
        losses = trainer.loss
        if isinstance(losses, dict):
            missing = [name for name in self.task_names if name not in losses]
            if missing:
                raise ValueError(f"the trainer's loss dict has no loss for task(s) {missing}")
        trainer.train_dataset = self
        trainer.add_callback(StreamResumeCallback())
        self._describe_in_card(trainer)
        return self

    def _describe_in_card(self, trainer: Any) -> None:
        """What sentence-transformers' card callback records of a ``DatasetDict`` when the trainer is built
        (columns and loss per task), for the tasks of this stream, which joined the trainer after that."""
        card = getattr(trainer.model, "model_card_data", None)
        if card is None or not hasattr(card, "compute_dataset_metrics"):
            return
        known = card.train_datasets if len(card.train_datasets or []) == len(self.tasks) else None
        losses = trainer.loss
        card.train_datasets = [
            card.compute_dataset_metrics(
                dataset,
                dict(known[index]) if known else {"name": name},
                losses[name] if isinstance(losses, dict) else losses,
            )
            for index, (name, dataset) in enumerate(self.tasks.items())
        ]

    def _adopt(self, batch_size: int, gradient_accumulation_steps: int, seed: int) -> None:
        for option, mine, theirs in (
            ("batch_size", self.batch_size, batch_size),
            ("gradient_accumulation_steps", self.gradient_accumulation_steps, gradient_accumulation_steps),
        ):
            if mine is not None and mine != theirs:
                raise ValueError(f"the stream's {option} is {mine} but the trainer's is {theirs}")
        self.batch_size, self.gradient_accumulation_steps = batch_size, gradient_accumulation_steps
        if self.seed is None:
            self.seed, self._chunk = seed, None

    def _check_ready(self) -> None:
        if self.batch_size is None or self.gradient_accumulation_steps is None:
            raise ValueError(
                "MultiTaskStream does not know its batch size: pass batch_size= and gradient_accumulation_steps=, "
                "or stream.attach(trainer)"
            )

    def _process(self) -> tuple[int, int]:
        if self.world_size is not None:
            return self.rank or 0, self.world_size
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if distributed and torch.distributed.get_world_size() > 1:
            raise RuntimeError(
                "MultiTaskStream is read on several processes but was not split between them: prepare the "
                "dataloader with accelerate and dispatch_batches=False (training_args accelerator_config="
                "{'dispatch_batches': False}), or pass rank= and world_size="
            )
        return 0, 1

    def _keep_state(self, step: int, streams: Mapping[str, TaskStream]) -> None:
        self._states[step] = {
            "step": step,
            "tasks": {name: stream.state_dict() for name, stream in streams.items()},
            "data": {name: identity for name, identity in self.identities().items() if identity is not None},
        }
        while len(self._states) > _KEPT_STATES:
            self._states.popitem(last=False)

    def describe(self) -> dict[str, Any]:
        """The stream as a model card and ``train --check`` show it."""
        return {
            "class": "MultiTaskStream",
            "weights": self.weights if isinstance(self.weights, str) else dict(self.weights),
            "task_probabilities": dict(zip(self.task_names, np.round(self.probabilities, 4).tolist())),
            "shuffle_window": self.shuffle_window,
        }

    def __repr__(self) -> str:
        return f"MultiTaskStream(tasks={self.task_names}, weights={self.describe()['task_probabilities']})"


def _common_features(tasks: Mapping[str, IterableDataset]) -> Features | None:
    """The tasks' shared columns plus ``dataset_name``; ``None`` when a task's columns are unknown or differ."""
    features = [dataset.features for dataset in tasks.values()]
    first = features[0]
    if first is None or any(other != first for other in features[1:]):
        return None
    return Features({**first, "dataset_name": Value("string")})


def _no_rows() -> Iterator[tuple[int, dict[str, Any]]]:
    # The base class needs an examples iterable; MultiTaskStream.__iter__ never reads it.
    yield from ()
