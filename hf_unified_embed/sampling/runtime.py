"""What the sampler needs to know about the run that builds it: devices, accumulation, task names.

sentence-transformers calls a multi-dataset batch sampler as
``sampler(dataset: ConcatDataset, batch_samplers=..., generator=..., seed=...)``: nothing about the
number of processes, gradient accumulation or the names of the datasets. The first comes from
accelerate's ``PartialState``; the rest from the ``Trainer`` that is building the dataloader,
found on the call stack. Explicit options always win over detection.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import Any

#: How far up the stack to look for the Trainer (Trainer.get_train_dataloader → _build_dataloader
#: → get_multi_dataset_batch_sampler → sampler class / partial → __init__ → here).
_MAX_STACK_DEPTH = 12


@dataclass(frozen=True)
class RunContext:
    """Facts about the run, each ``None`` when unknown."""

    world_size: int | None = None
    gradient_accumulation_steps: int | None = None
    split_batches: bool | None = None
    task_names: tuple[str, ...] | None = None
    is_eval: bool = False


def calling_trainer() -> Any | None:
    """The ``transformers.Trainer`` whose method is (indirectly) constructing the sampler, if any."""
    try:
        from transformers import Trainer
    except ImportError:  # pragma: no cover - transformers is a dependency
        return None
    frame = inspect.currentframe()
    try:
        for _ in range(_MAX_STACK_DEPTH):
            frame = frame.f_back if frame is not None else None
            if frame is None:
                return None
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, Trainer):
                return candidate
        return None
    finally:
        del frame  # break the frame reference cycle at once


def detect_run_context(datasets: list[Any]) -> RunContext:
    """World size, accumulation, ``split_batches`` and the task names from the calling Trainer.

    Task names are matched by identity: sentence-transformers builds the ``ConcatDataset`` from the
    values of the trainer's ``train_dataset`` (or ``eval_dataset``) ``DatasetDict``.
    """
    trainer = calling_trainer()
    if trainer is None:
        return RunContext(world_size=_accelerate_world_size())
    names, is_eval = None, False
    for attribute in ("train_dataset", "eval_dataset"):
        mapping = getattr(trainer, attribute, None)
        if (
            isinstance(mapping, dict)
            and len(mapping) == len(datasets)
            and all(a is b for a, b in zip(mapping.values(), datasets))
        ):
            names, is_eval = tuple(str(key) for key in mapping), attribute == "eval_dataset"
            break
    accelerator = getattr(trainer, "accelerator", None)
    return RunContext(
        world_size=getattr(accelerator, "num_processes", None) or _accelerate_world_size(),
        gradient_accumulation_steps=getattr(trainer.args, "gradient_accumulation_steps", None),
        split_batches=getattr(accelerator, "split_batches", None),
        task_names=names,
        is_eval=is_eval,
    )


def _accelerate_world_size() -> int | None:
    from accelerate import PartialState

    # PartialState is a shared-state singleton; only read it when something already initialised it,
    # since initialising it here would set up a process group as a side effect.
    if PartialState._shared_state:
        return PartialState().num_processes
    world_size = os.environ.get("WORLD_SIZE")
    return int(world_size) if world_size else None


def env_gradient_accumulation_steps() -> int | None:
    """``accelerate launch --gradient_accumulation_steps N`` exports this for the Accelerator."""
    steps = os.environ.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS")
    return int(steps) if steps else None
