"""``CurriculumBatchSampler``: task-pure steps on every device, curriculum order, per-task batch sizes."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from sentence_transformers.base.sampler import DefaultBatchSampler, MultiDatasetDefaultBatchSampler
from torch.utils.data import BatchSampler, ConcatDataset

from hf_unified_embed.errors import shown
from hf_unified_embed.sampling.batch_plan import (
    BALANCES,
    INSTANCE_ORDERS,
    INTERLEAVES,
    Balance,
    BatchPlan,
    GroupCounts,
    InstanceOrder,
    Interleave,
    build_batch_plan,
    count_groups,
)
from hf_unified_embed.sampling.runtime import detect_run_context, env_gradient_accumulation_steps

logger = logging.getLogger(__name__)


class CurriculumBatchSampler(MultiDatasetDefaultBatchSampler):
    """Multi-dataset batch sampler whose every optimizer step is one task on every device.

    accelerate gives batch ``k`` of a batch sampler to process ``k % world_size``. With the stock
    round-robin or proportional samplers two devices therefore train on *different* datasets in the
    same step: the gradient mixes tasks, and with cross-device gathering
    (``MultipleNegativesRankingLoss(gather_across_devices=True)``) and differing column counts the
    run hangs. This sampler yields ``world_size × gradient_accumulation_steps`` consecutive, disjoint
    batches of one task (a *group*), so each device gets its own share of the same task for each of
    the accumulation steps: pure task gradients, as CoDiEmb's sampler (§2.3) and INSTRUCTOR's
    task-homogeneous batches require. On top of that it orders tasks and rows as a curriculum
    (Data-CUBE Algorithm 1) and balances per-task update counts.

    Every batch is task-pure and all batches of a group have the same size, so gathers see equal
    shapes on every rank. The plan depends only on ``seed`` and the epoch (``set_epoch``), never on
    the torch ``generator``, so every rank computes the same plan and a resumed run replays the batches
    the uninterrupted run would have seen.

    Args:
        dataset: the ``ConcatDataset`` of the task datasets (built by the trainer from a ``DatasetDict``).
        batch_samplers: the trainer's per-dataset batch samplers; only their ``batch_size`` and
            ``drop_last`` are read (the defaults for ``batch_sizes`` and ``drop_last``). Row order
            within a task is this sampler's own (``instance_order``).
        generator: unused (kept for the sentence-transformers call signature); see above.
        seed: seed of the plan (the trainer passes ``args.seed``).
        task_names: names of the datasets in ``ConcatDataset`` order. Default: the keys of the calling
            trainer's ``train_dataset``/``eval_dataset`` ``DatasetDict``; else ``"0"``, ``"1"``, ...
        task_order: the task order for ``round_robin``/``sequential``, as names or indices, e.g. the
            tour of the curriculum planner. Default: dataset order.
        interleave: ``"round_robin"`` (Data-CUBE Algorithm 1: one step per task in ``task_order``,
            rounds repeated until every task is exhausted), ``"shuffled"`` (steps of all tasks in
            uniformly random order, CoDiEmb/INSTRUCTOR) or ``"sequential"`` (task after task).
        instance_order: ``"random"`` or ``"easy_to_hard"`` (descending φ from ``difficulty_column``,
            Data-CUBE §4.3; ties broken at random).
        difficulty_column: column holding φ, read once per task for ``easy_to_hard``.
        batch_sizes: per-device batch size per task name, e.g. ``{"trecqa": 64, "stsb": 32}``; tasks
            not listed use the trainer's ``per_device_train_batch_size``.
        balance: per-task update counts. ``"none"``: every row once per epoch, so steps are
            proportional to task size. ``"equal"``: the same number of steps for every task.
            ``"sqrt"``: steps proportional to ``sqrt(rows / rows_per_step)``. Both keep the epoch's
            total number of steps and up-sample (repeat rows, in fresh passes) or down-sample
            (a different random subset each epoch) tasks accordingly.
        drop_last: drop each task's last incomplete step. Default: the trainer's
            ``dataloader_drop_last``. Without it the last step of a task uses a smaller batch size on
            every device, padded from the start of the task's order (as accelerate's ``even_batches``).
        world_size: processes. Default: the calling trainer's accelerator, else accelerate's
            ``PartialState``, else ``WORLD_SIZE``, else 1.
        gradient_accumulation_steps: default: the calling trainer's ``args``, else
            ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS``, else 1.

    References:
        - Data-CUBE (Min et al., 2024), §4.2–4.3 and Algorithm 1: task order, easy→hard batches.
        - CoDiEmb (2025), §2.3: single-task steps on all devices, per-task batch sizes, balanced updates.
        - INSTRUCTOR (Su et al., 2023), appendix A: task-homogeneous mini-batches.

    Requirements:
        - A ``DatasetDict`` ``train_dataset``; ``split_batches=False`` (accelerate's default).
        - ``instance_order="easy_to_hard"``: a float ``difficulty`` column (``hf-unified-embed curriculum``).

    Example:
        ::

            from sentence_transformers import SentenceTransformerTrainingArguments
            from hf_unified_embed.sampling import CurriculumBatchSampler

            args = SentenceTransformerTrainingArguments(
                output_dir="out",
                per_device_train_batch_size=32,
                multi_dataset_batch_sampler=CurriculumBatchSampler.configure(
                    task_order=["stsb", "sick", "wikiqa", "trecqa"],
                    instance_order="easy_to_hard",
                    batch_sizes={"wikiqa": 64, "trecqa": 64},
                    balance="sqrt",
                ),
            )
    """

    def __init__(
        self,
        dataset: ConcatDataset,
        batch_samplers: list[BatchSampler],
        generator: torch.Generator | None = None,
        seed: int | None = 0,
        *,
        task_names: Sequence[str] | None = None,
        task_order: Sequence[str | int] | None = None,
        interleave: Interleave = "round_robin",
        instance_order: InstanceOrder = "random",
        difficulty_column: str = "difficulty",
        batch_sizes: Mapping[str, int] | None = None,
        balance: Balance = "none",
        drop_last: bool | None = None,
        world_size: int | None = None,
        gradient_accumulation_steps: int | None = None,
    ) -> None:
        _validate_options(interleave, instance_order, balance, batch_sizes, world_size, gradient_accumulation_steps)
        if not batch_samplers:
            raise ValueError("CurriculumBatchSampler needs at least one dataset")
        super().__init__(dataset, batch_samplers=batch_samplers, generator=generator, seed=seed or 0)
        context = detect_run_context(list(dataset.datasets))
        if context.split_batches:
            raise ValueError(
                "CurriculumBatchSampler needs accelerate's split_batches=False (the default): with "
                "split_batches every batch is cut across devices, so per-task batch sizes and padded "
                "last steps cannot be honoured"
            )
        if context.is_eval and balance != "none":
            logger.warning("CurriculumBatchSampler with balance=%r also resamples the eval DatasetDict", balance)

        self.task_names = self._resolve_task_names(task_names, context.task_names, len(batch_samplers))
        self.world_size = world_size or context.world_size or 1
        self.gradient_accumulation_steps = (
            gradient_accumulation_steps
            or context.gradient_accumulation_steps
            or env_gradient_accumulation_steps()
            or 1
        )
        self.interleave: Interleave = interleave
        self.instance_order: InstanceOrder = instance_order
        self.difficulty_column = difficulty_column
        self.balance: Balance = balance
        self.task_order = self._resolve_task_order(task_order)
        self.task_batch_sizes = self._resolve_batch_sizes(batch_sizes or {}, batch_samplers)
        self.drop_last = bool(batch_samplers[0].drop_last) if drop_last is None else drop_last
        # Batches differ in size (per-task sizes, padded last steps). accelerate's BatchSamplerShard
        # only yields a step when the last batch has exactly `batch_size` rows, unless it is None,
        # which marks a sampler with dynamic batch sizes.
        self.batch_size = None  # type: ignore[assignment]
        self._sizes = [len(d) for d in dataset.datasets]  # type: ignore[arg-type]
        self._counts: GroupCounts = count_groups(
            self._sizes,
            self.task_batch_sizes,
            group_size=self.group_size,
            balance=self.balance,
            drop_last=self.drop_last,
        )
        self._difficulties: list[np.ndarray] | None = None
        self._plan: BatchPlan | None = None
        self._plan_epoch = -1
        self._warn_unusable_tasks()
        self._warn_ignored_batch_samplers(batch_samplers)
        _forward_set_epoch_from_dataset(dataset, self)
        logger.info(
            "CurriculumBatchSampler: %d tasks, %d optimizer steps of %d batches (world_size=%d, "
            "gradient_accumulation_steps=%d), interleave=%s, instance_order=%s, balance=%s",
            len(self.task_names),
            int(self._counts.groups.sum()),
            self.group_size,
            self.world_size,
            self.gradient_accumulation_steps,
            interleave,
            instance_order,
            balance,
        )

    @classmethod
    def configure(cls, **options: Any) -> functools.partial[CurriculumBatchSampler]:
        """A picklable ``functools.partial`` for ``multi_dataset_batch_sampler=``, options checked now.

        The trainer pickles its arguments into every checkpoint, so a lambda would break saving;
        a partial of this importable class does not.
        """
        allowed = set(_keyword_options())
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise TypeError(f"unknown CurriculumBatchSampler option(s) {unknown}; expected some of {sorted(allowed)}")
        _validate_options(
            options.get("interleave", "round_robin"),
            options.get("instance_order", "random"),
            options.get("balance", "none"),
            options.get("batch_sizes"),
            options.get("world_size"),
            options.get("gradient_accumulation_steps"),
        )
        return functools.partial(cls, **options)

    @property
    def group_size(self) -> int:
        """Batches per optimizer step: one per device per accumulation step."""
        return self.world_size * self.gradient_accumulation_steps

    @property
    def steps_per_task(self) -> dict[str, int]:
        """Optimizer steps per task in one epoch (the same every epoch)."""
        return dict(zip(self.task_names, self._counts.groups.tolist()))

    def plan(self, epoch: int | None = None) -> BatchPlan:
        """The batches of an epoch (default: the current one); cached for the current epoch."""
        epoch = self.epoch if epoch is None else epoch
        if self._plan is not None and self._plan_epoch == epoch:
            return self._plan
        plan = build_batch_plan(
            self._sizes,
            self.task_batch_sizes,
            group_size=self.group_size,
            task_order=self.task_order,
            interleave=self.interleave,
            instance_order=self.instance_order,
            balance=self.balance,
            drop_last=self.drop_last,
            difficulties=self._load_difficulties() if self.instance_order == "easy_to_hard" else None,
            seed=self.seed,
            epoch=epoch,
            task_names=self.task_names,
        )
        if epoch == self.epoch:
            self._plan, self._plan_epoch = plan, epoch
        return plan

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.plan().batches()

    def __len__(self) -> int:
        return self._counts.num_batches

    def __getstate__(self) -> dict[str, Any]:
        # The plan is derived data; a pickled sampler (e.g. sent to spawned workers) rebuilds it.
        state = self.__dict__.copy()
        state["_plan"], state["_plan_epoch"] = None, -1
        return state

    def _load_difficulties(self) -> list[np.ndarray]:
        if self._difficulties is None:
            self._difficulties = [
                _read_difficulty(sub, self.difficulty_column, name)
                for sub, name in zip(self.dataset.datasets, self.task_names)
            ]
        return self._difficulties

    @staticmethod
    def _resolve_task_names(
        given: Sequence[str] | None, detected: tuple[str, ...] | None, num_tasks: int
    ) -> tuple[str, ...]:
        if given is not None:
            names = tuple(given)
            if len(names) != num_tasks:
                raise ValueError(f"task_names has {len(names)} names for {num_tasks} datasets: {list(names)}")
        else:
            names = detected or tuple(str(index) for index in range(num_tasks))
        if len(set(names)) != len(names):
            raise ValueError(f"task_names must be unique, got {list(names)}")
        return names

    def _resolve_task_order(self, task_order: Sequence[str | int] | None) -> list[int]:
        if task_order is None:
            return list(range(len(self.task_names)))
        order = [self._task_index(task, "task_order") for task in task_order]
        if sorted(order) != list(range(len(self.task_names))):
            missing = [self.task_names[t] for t in range(len(self.task_names)) if t not in order]
            raise ValueError(
                f"task_order must list every task exactly once; missing {missing}, got {list(task_order)}"
            )
        return order

    def _resolve_batch_sizes(self, batch_sizes: Mapping[str, int], batch_samplers: list[BatchSampler]) -> list[int]:
        overrides = {self._task_index(name, "batch_sizes"): size for name, size in batch_sizes.items()}
        sizes = []
        for index, sampler in enumerate(batch_samplers):
            size = overrides.get(index, getattr(sampler, "batch_size", None))
            if not isinstance(size, int) or size < 1:
                raise ValueError(
                    f"no batch size for task {shown(self.task_names[index])}: its batch sampler has batch_size={shown(size)}; "
                    "set batch_sizes={name: size}"
                )
            sizes.append(size)
        return sizes

    def _task_index(self, task: str | int, option: str) -> int:
        if isinstance(task, int) and not isinstance(task, bool):
            if 0 <= task < len(self.task_names):
                return task
        elif task in self.task_names:
            return self.task_names.index(task)
        raise ValueError(
            f"{option} names unknown task {shown(task)}; tasks are {list(self.task_names)} (pass "
            "task_names=list(train_dataset) when the sampler is built outside a Trainer)"
        )

    def _warn_unusable_tasks(self) -> None:
        for name, size, groups in zip(self.task_names, self._sizes, self._counts.groups.tolist()):
            if size == 0:
                logger.warning("CurriculumBatchSampler: task %r is empty and gets no steps", name)
            elif groups == 0:
                logger.warning(
                    "CurriculumBatchSampler: task %r (%d rows) fills no complete step of %d batches and gets none "
                    "(drop_last=%s, balance=%r)",
                    name,
                    size,
                    self.group_size,
                    self.drop_last,
                    self.balance,
                )

    @staticmethod
    def _warn_ignored_batch_samplers(batch_samplers: list[BatchSampler]) -> None:
        custom = {type(s).__name__ for s in batch_samplers if type(s) not in (DefaultBatchSampler, BatchSampler)}
        if custom:
            logger.warning(
                "CurriculumBatchSampler orders rows itself; the per-dataset batch sampler(s) %s only supply "
                "batch_size and drop_last",
                sorted(custom),
            )


def _keyword_options() -> list[str]:
    """The keyword-only options of :class:`CurriculumBatchSampler` (what ``configure`` accepts)."""
    parameters = inspect.signature(CurriculumBatchSampler.__init__).parameters.values()
    return [p.name for p in parameters if p.kind is p.KEYWORD_ONLY]


def _validate_options(
    interleave: str,
    instance_order: str,
    balance: str,
    batch_sizes: Mapping[str, int] | None,
    world_size: int | None,
    gradient_accumulation_steps: int | None,
) -> None:
    for option, value, allowed in (
        ("interleave", interleave, INTERLEAVES),
        ("instance_order", instance_order, INSTANCE_ORDERS),
        ("balance", balance, BALANCES),
    ):
        if value not in allowed:
            raise ValueError(f"{option} must be one of {list(allowed)}, got {shown(value)}")
    for name, size in (batch_sizes or {}).items():
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"batch_sizes[{shown(name)}] must be a positive int, got {shown(size)}")
    for option, count in (("world_size", world_size), ("gradient_accumulation_steps", gradient_accumulation_steps)):
        if count is not None and (not isinstance(count, int) or count < 1):
            raise ValueError(f"{option} must be a positive int, got {shown(count)}")


def _read_difficulty(dataset: Any, column: str, task: str) -> np.ndarray:
    column_names = getattr(dataset, "column_names", None)
    if column_names is None or column not in column_names:
        raise ValueError(
            f"instance_order='easy_to_hard' needs a {shown(column)} column in task {shown(task)}; it has {column_names} "
            "(add it with `hf-unified-embed curriculum`)"
        )
    # with_format reads the Arrow column straight into numpy (indices mapping honoured) and drops
    # the trainer's per-row transform.
    values = np.asarray(dataset.with_format("numpy", columns=[column])[column], dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(
            f"column {shown(column)} of task {shown(task)} must hold one float per row, got shape {values.shape}"
        )
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        raise ValueError(
            f"column {shown(column)} of task {shown(task)} has {len(bad)} non-finite value(s), first at row {int(bad[0])}: "
            f"{shown(values[bad[0]])}"
        )
    return values


def _forward_set_epoch_from_dataset(dataset: ConcatDataset, sampler: CurriculumBatchSampler) -> None:
    """Let ``dataset.set_epoch`` reach the sampler (needed on multi-process resume).

    After ``accelerate.skip_first_batches`` the chain is SkipBatchSampler → BatchSamplerShard → this
    sampler, and neither the Trainer nor ``DataLoaderShard.set_epoch`` reaches the sampler through it;
    ``DataLoaderShard.set_epoch`` does call ``dataset.set_epoch``. Without this a run resumed in epoch
    ≥ 1 on several devices would replay epoch 0's order. The ``ConcatDataset`` is built by the
    trainer for this dataloader alone, so the attribute touches nothing else.
    """
    if not hasattr(dataset, "set_epoch"):
        dataset.set_epoch = sampler.set_epoch  # type: ignore[attr-defined]
