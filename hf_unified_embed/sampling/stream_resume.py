"""``StreamResumeCallback``: every process's :class:`MultiTaskStream` state in each checkpoint, restored on resume.

transformers resumes a dataloader by replaying it (``skip_first_batches``): every skipped batch is
read and collated again, which for a stream means re-reading everything trained so far. Instead,
when a checkpoint is about to be saved the callback gathers each process's stream state *before the
next step* (:meth:`MultiTaskStream.state_at`) to the main process, which writes them with the other
callback states into ``trainer_state.json``; on resume each process loads its own before the first
batch is read, or, under another number of processes, its share of the rest of each task's pass
(:func:`~hf_unified_embed.sampling.elastic_resume.resplit`). Added by :meth:`MultiTaskStream.attach`.

Each state records the data identity of every task (its shards' names, sizes, rows and footers): a resume on
other data is refused, naming the task and what changed, unless the stream was made with
``on_data_change="restart"`` (recipe: ``data.on_data_change: restart``), which starts that task's pass afresh.
A state that no stream wrote (edited, truncated) is refused naming the checkpoint file and the field.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import ExportableState

from hf_unified_embed.errors import InputError, shown
from hf_unified_embed.sampling.elastic_resume import resplit
from hf_unified_embed.sampling.stream_state_checks import data_change_message, stream_state_problem


@runtime_checkable
class ResumableStream(Protocol):
    """What the callback needs of the training stream (:class:`MultiTaskStream` is one); a Protocol, so
    that the stream can add the callback without the two modules importing each other."""

    rank: int | None
    world_size: int | None
    shuffle_window: int

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
        if stream is None:
            return
        _own_iterator_seed(kwargs.get("train_dataloader"), args.seed)
        if state.global_step == 0:
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
        processes: Any = attributes.get("processes")  # a list of mappings once checked
        problem = _processes_problem(processes, state.global_step, stream.shuffle_window, None)
        if problem is not None:
            raise InputError(f"the checkpoint's stream state, field {problem[0]!r}: {problem[1]}")
        # Saved by another number of processes: the rest of each task's pass is split among this run's.
        stream.load_state_dict(resplit(processes, stream.rank or 0, stream.world_size or 1))

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


def _own_iterator_seed(loader: Any, seed: int) -> None:
    """Give the training dataloader a generator of its own, so that starting its iterator leaves the global RNG.

    Without one, torch's ``DataLoader`` draws each iterator's base seed from the global torch RNG. A resumed run
    restores that RNG from the checkpoint (``rng_state*.pth``) *before* it starts the iterator, while the
    interrupted run had started its iterator before step 1: the resumed run's dropout masks were then one draw
    off the uninterrupted run's, and its weights differed (5e-5 after two steps of a tiny BERT).
    """
    import torch

    # accelerate's DataLoaderShard iterates the DataLoader it wraps (``base_dataloader``).
    loader = getattr(loader, "base_dataloader", loader)
    if loader is not None and getattr(loader, "generator", None) is None:
        generator = torch.Generator()
        generator.manual_seed(seed)
        loader.generator = generator


#: Where the processes' stream states lie in ``trainer_state.json``.
_PROCESSES_FIELD = f"stateful_callbacks.{StreamResumeCallback.__name__}.attributes.processes"


def _processes_problem(
    processes: Any, step: Any, shuffle_window: int | None, rows: dict[str, int | None] | None
) -> tuple[str, str] | None:
    """The first field of the saved processes' stream states that no stream wrote, and why, or ``None``."""
    if not isinstance(processes, list) or not processes:
        return _PROCESSES_FIELD, f"expected a list of the processes' stream states, got {shown(processes)}"
    for number, process in enumerate(processes):
        problem = stream_state_problem(
            process,
            step=step if isinstance(step, int) else None,
            shuffle_window=shuffle_window,
            rows_per_task=rows,
        )
        if problem is not None:
            return f"{_PROCESSES_FIELD}[{number}]{'.' if problem[0] else ''}{problem[0]}", problem[1]
    return None


def check_stream_checkpoint(
    checkpoint: str | Path, task_names: Sequence[str], world_size: int, stream: Any = None
) -> None:
    """Refuse, before training, a checkpoint a streaming run cannot resume from: one line, on every process alike.

    The checkpoint must hold the stream state of its step (a checkpoint of a run that did not stream has
    none), well-formed (each field of the type and range a stream writes), that ``world_size`` processes can
    continue, for tasks this run streams (a state of another recipe names others), saved on the data ``stream``
    (the run's :class:`~hf_unified_embed.sampling.MultiTaskStream`, when given) reads, unless the stream
    restarts a changed task's pass (``on_data_change="restart"``).

    Raises:
        InputError: naming the checkpoint, and for a malformed state its ``trainer_state.json`` and the field;
            the command line reports it with exit code 2 on the launching process only, instead of a traceback
            on every rank.
    """
    where = f"resume_from_checkpoint {checkpoint}"
    file = Path(checkpoint) / "trainer_state.json"
    try:
        state = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InputError(f"{where}: cannot read its trainer_state.json ({error})") from None
    if not isinstance(state, dict):
        raise InputError(f"{where}: {file}: expected a JSON object, got {type(state).__name__}")
    callbacks = state.get("stateful_callbacks")
    saved = callbacks.get(StreamResumeCallback.__name__) if isinstance(callbacks, dict) else None
    attributes = saved.get("attributes", {}) if isinstance(saved, dict) else {}
    attributes = attributes if isinstance(attributes, dict) else {}
    step = state.get("global_step")
    if not attributes or attributes.get("step") != step:
        raise InputError(
            f"{where}: holds no training stream state for its step {step}: it was not saved by a streaming run "
            "(data.streaming: true); resume it with the recipe that wrote it, or start this run afresh"
        )
    processes: Any = attributes.get("processes")  # a list of mappings once checked
    shuffle_window = getattr(stream, "shuffle_window", None)
    problem = _processes_problem(processes, step, shuffle_window, None)
    if problem is None and stream is not None:  # a position past the rows of unchanged data is no position in them
        changed = {task for process in processes for task in stream.data_changes(process)}
        rows = {name: value["rows"] for name, value in stream.identities().items() if value and name not in changed}
        problem = _processes_problem(processes, step, shuffle_window, rows)
    if problem is not None:
        raise InputError(f"{where}: {file}, field {problem[0]!r}: {problem[1]}")
    unknown = sorted({task for process in processes for task in process["tasks"]} - set(task_names))
    if unknown:
        raise InputError(
            f"{where}: its stream state names task(s) {unknown} that this run does not stream ({sorted(task_names)}); "
            "it was saved by another recipe"
        )
    if len(processes) != world_size:
        try:
            resplit(processes, 0, world_size)
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(
                f"{where}: its stream state, saved by {len(processes)} process(es), cannot be split among "
                f"{world_size}: {error}"
            ) from None
    if stream is not None and stream.on_data_change == "refuse":
        changes = {task: change for process in processes for task, change in stream.data_changes(process).items()}
        if changes:
            task = min(changes)
            raise InputError(f"{where}: {data_change_message(task, changes[task])}")


def _stream(kwargs: dict[str, Any]) -> ResumableStream | None:
    """The stream the trainer reads: accelerate's per-process copy, found through the dataloader."""
    dataset = getattr(kwargs.get("train_dataloader"), "dataset", None)
    return dataset if isinstance(dataset, ResumableStream) else None
