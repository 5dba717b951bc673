"""Loss parts in the training logs: each part averaged over the steps that computed it, no ``nan`` for the others.

A loss that returns named parts (:class:`~hf_unified_embed.losses.parts.LossParts`: ``CoDiEmbSTSLoss``'s
``pearson``, ``rank_kl``, ...) has them logged by sentence-transformers' trainer: it adds every part it
receives to ``trainer.accum_loss_components["train"]`` and, at each log, divides each sum by the number of
steps that returned parts. In a multi-task run only some steps compute a given part — an STS part is
absent from a retrieval step — so a log interval of retrieval steps printed ``'pearson': nan`` (0 / 0,
read as divergence), and an interval mixing tasks divided a part's sum by steps that never computed it.

:class:`LossPartsLogging` counts, with a forward hook on each loss, how many steps computed each part,
and just before each log rescales the trainer's sums to means over those steps and drops the parts no
step of the interval computed. It is an ordinary ``TrainerCallback`` on the stock trainer, whose part
accumulation it replaces with one that gives the same sums without reading any part on the host (on a GPU
each read waits for the step's forward pass: :meth:`LossPartsLogging.accumulate_parts`).
Under several processes the counts are summed over them first, so every process keeps the same parts
(the trainer gathers them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments


class LossPartsLogging(TrainerCallback):
    """Log every loss part as its mean over the steps that computed it; a part absent from a log interval is not logged.

    Attach it to a built trainer (it needs the trainer's losses and its part sums)::

        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=train, loss=losses, ...)
        LossPartsLogging.attach(trainer)
        trainer.train()
    """

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.counts: Counter[str] = Counter()
        losses = trainer.loss.values() if isinstance(trainer.loss, Mapping) else [trainer.loss]
        for loss in {id(loss): loss for loss in losses if isinstance(loss, nn.Module)}.values():
            loss.register_forward_hook(self._count_parts)
        # The trainer's own accumulation asks `torch.isnan(part) or torch.isinf(part)` of every part, every step:
        # two reads on the host per part, each waiting on a GPU for the forward pass (8 per CoDiEmb STS step).
        trainer.track_loss_components = self.accumulate_parts

    @classmethod
    def attach(cls, trainer: Any) -> LossPartsLogging:
        """Create the callback for ``trainer`` and add it to the trainer's callbacks."""
        callback = cls(trainer)
        trainer.add_callback(callback)
        return callback

    def accumulate_parts(self, loss: Mapping[str, torch.Tensor]) -> None:
        """sentence-transformers' ``track_loss_components`` without reading a value on the host.

        The same sums: each part added to ``trainer.accum_loss_components[train|eval]``, one more step counted
        and, with ``logging_nan_inf_filter``, a NaN or infinite part replaced by the mean so far (0 at first);
        the choice is made on the device (``torch.where``) instead of by an ``if`` on the host.
        """
        trainer = self.trainer
        sums = trainer.accum_loss_components["train" if trainer.model.training else "eval"]
        steps = sums.get("steps")
        device = None
        for key, value in loss.items():
            value = value.detach()  # free of the graph, which would otherwise live until the next log
            device = value.device
            if trainer.args.logging_nan_inf_filter:
                before = sums.get(key)
                mean = before / steps.clamp_min(1) if before is not None and steps is not None else 0.0
                value = torch.where(torch.isfinite(value), value, mean)
            sums[key] = value if key not in sums else sums[key] + value
        if "steps" not in sums:
            sums["steps"] = torch.tensor(0, dtype=torch.int64, device=device)
        sums["steps"] += 1

    def _count_parts(self, module: nn.Module, inputs: Any, output: Any) -> None:
        if isinstance(output, Mapping) and self.trainer.model.training:
            self.counts.update(output.keys())

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if control.should_log:
            self._prepare_log(args)

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if control.should_log:
            self._prepare_log(args)

    def _prepare_log(self, args: TrainingArguments) -> None:
        """Turn the trainer's part sums into sums the trainer's division by its step count makes means."""
        sums: dict[str, Any] = getattr(self.trainer, "accum_loss_components", {}).get("train", {})
        local_steps = sums.get("steps")
        mine: dict[str, Any] = {
            "steps": int(local_steps.sum().item()) if isinstance(local_steps, torch.Tensor) else 0,
            "counts": dict(self.counts),
            "keys": [key for key in sums if key != "steps"],
        }
        self.counts.clear()
        everyone: list[dict[str, Any]] = [mine]
        if args.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            everyone = [{} for _ in range(torch.distributed.get_world_size())]
            torch.distributed.all_gather_object(everyone, mine)
        steps = sum(entry["steps"] for entry in everyone)
        counts: Counter[str] = Counter()
        for entry in everyone:
            counts.update(entry["counts"])
        keys = dict.fromkeys(key for entry in everyone for key in entry["keys"])
        if not keys:
            return
        device = next((value.device for value in sums.values() if isinstance(value, torch.Tensor)), args.device)
        for key in keys:
            if counts[key] == 0:
                sums.pop(key, None)  # no step of this interval computed it: nothing to log
                continue
            value = sums.get(key)
            if not isinstance(value, torch.Tensor):  # computed by other processes only
                value = torch.tensor(0.0, device=device)
            sums[key] = value * (steps / counts[key])
        if "steps" not in sums:
            sums["steps"] = torch.tensor(0, dtype=torch.int64, device=device)
