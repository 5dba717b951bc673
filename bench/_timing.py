"""Step timing shared by the training benchmarks (``quality.py``, ``step.py``): a callback that stamps every
optimizer step, and a way to give it to the trainer a recipe run builds."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any


def step_timer(device: str) -> Any:
    """A trainer callback that stamps the end of every optimizer step (after a CUDA synchronize, so the
    GPU's work is in it) and its beginning (the time between a step's end and the next one's beginning is
    the wait for the next batch from the dataloader), and keeps the run's optimizer steps and ``train_runtime``."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.cuda = device.startswith("cuda")
            self.stamps: list[float] = []
            self.begins: list[float] = []
            self.steps = 0
            self.runtime = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.begins.append(time.perf_counter())

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.cuda:
                import torch

                torch.cuda.synchronize()
            self.stamps.append(time.perf_counter())

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and "train_runtime" in logs:  # the trainer's last log: its whole train()
                self.runtime = float(logs["train_runtime"])

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.steps = int(state.global_step)

    return StepTimer()


@contextlib.contextmanager
def every_trainer_calls(callback: Any) -> Iterator[None]:
    """Give ``callback`` to every ``Trainer`` built inside the block.

    ``train_from_recipe`` takes no callbacks (a recipe names none), and step times can only be taken
    inside its trainer. transformers starts every trainer with ``transformers.trainer.DEFAULT_CALLBACKS``,
    so the timer joins that list for the run and leaves it after. It only observes: the run is the
    recipe's, unchanged.
    """
    from transformers import trainer as hf_trainer

    hf_trainer.DEFAULT_CALLBACKS.append(callback)
    try:
        yield
    finally:
        hf_trainer.DEFAULT_CALLBACKS.remove(callback)
