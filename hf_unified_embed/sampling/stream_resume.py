"""``StreamResumeCallback``: every process's :class:`MultiTaskStream` state in each checkpoint, restored on resume.

transformers resumes a dataloader by replaying it (``skip_first_batches``): every skipped batch is
read and collated again, which for a stream means re-reading everything trained so far. Instead,
when a checkpoint is about to be saved the callback gathers each process's stream state *before the
next step* (:meth:`MultiTaskStream.state_at`) to the main process, which writes them with the other
callback states into ``trainer_state.json``; on resume each process loads its own before the first
batch is read. Added by :meth:`MultiTaskStream.attach`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import ExportableState


@runtime_checkable
class ResumableStream(Protocol):
    """What the callback needs of the training stream (:class:`MultiTaskStream` is one); a Protocol, so
    that the stream can add the callback without the two modules importing each other."""

    rank: int | None
    world_size: int | None

    def state_at(self, step: int) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class StreamResumeCallback(TrainerCallback, ExportableState):
    """Save the training stream's per-process state with each checkpoint; load it when the run resumes."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.processes: list[dict[str, Any]] = []

    @staticmethod
    def check_arguments(args: TrainingArguments) -> None:
        """Refuse the trainer settings under which a stream cannot be resumed or split correctly."""
        if not args.ignore_data_skip:
            raise ValueError(
                "a MultiTaskStream resumes from the stream state saved in each checkpoint; set "
                "ignore_data_skip=True so that the trainer does not also replay the batches it already trained on"
            )
        if args.dataloader_num_workers:
            raise ValueError(
                "a MultiTaskStream is read in the training process: set dataloader_num_workers=0 "
                f"(got {args.dataloader_num_workers})"
            )
        if getattr(args.accelerator_config, "dispatch_batches", None) is not False:
            raise ValueError(
                "each process reads its own part of a MultiTaskStream: set accelerator_config="
                "{'dispatch_batches': False} (by default accelerate reads every batch of an IterableDataset on "
                "the main process and sends tensors to the others, which the rows' task names are not)"
            )

    def state(self) -> dict[str, Any]:
        return {"args": {}, "attributes": {"step": self.step, "processes": self.processes}}

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        stream = _stream(kwargs)
        if stream is None or state.global_step == 0:
            return
        # A resumed TrainerState holds the callback states as read from trainer_state.json: a dict.
        stored: dict[str, Any] = state.stateful_callbacks if isinstance(state.stateful_callbacks, dict) else {}
        saved = stored.get(type(self).__name__)
        attributes = (saved or {}).get("attributes", {}) if isinstance(saved, dict) else {}
        if attributes.get("step") != state.global_step:
            raise ValueError(
                f"the checkpoint of step {state.global_step} holds no training stream state (found one for step "
                f"{attributes.get('step')}); it was not saved by a MultiTaskStream run with this callback"
            )
        processes = attributes["processes"]
        rank, world_size = stream.rank or 0, stream.world_size or 1
        if len(processes) != world_size:
            raise ValueError(
                f"the checkpoint's stream state was saved by {len(processes)} process(es); resume it with as "
                f"many, not {world_size}"
            )
        stream.load_state_dict(processes[rank])

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # DefaultFlowCallback, which runs first, has decided by now whether this step ends with a checkpoint.
        stream = _stream(kwargs)
        if stream is None or not control.should_save:
            return
        from accelerate.utils import gather_object

        mine = stream.state_at(state.global_step)
        self.processes = gather_object([mine]) if (stream.world_size or 1) > 1 else [mine]
        self.step = state.global_step


def _stream(kwargs: dict[str, Any]) -> ResumableStream | None:
    """The stream the trainer reads: accelerate's per-process copy, found through the dataloader."""
    dataset = getattr(kwargs.get("train_dataloader"), "dataset", None)
    return dataset if isinstance(dataset, ResumableStream) else None
