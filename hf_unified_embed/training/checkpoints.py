"""The trainer's checkpoint folder (``training_args.output_dir``) under the package's output rules.

sentence-transformers' trainer writes its checkpoints itself, outside the staged model folder that
:class:`~hf_unified_embed.utils.outputs.StagedOutput` scrubs, so two things are added around it:

* :class:`RedactCheckpointsCallback` scrubs every checkpoint as soon as it is saved (its ``README.md``
  renders the card — model name included — and ``trainer_state.json`` the logs), with the rules of
  :mod:`hf_unified_embed.utils.redaction`;
* :func:`read_trainer_state` reads a checkpoint's ``trainer_state.json`` before a resume hands it to the
  trainer, which would fail on a damaged or hand-edited one with a traceback (``TrainerState(**state)``);
* :func:`no_empty_folder` removes the checkpoint folder after a run that saved no checkpoint into it:
  transformers' ``Trainer`` creates it when it starts, even with ``save_strategy: no``, and a failed or
  interrupted run would leave it behind. A run killed with ``kill -9`` cannot clean up, so the run's own
  default folder (``<output_dir>-checkpoints``) found empty is removed by the next run too;
* :func:`checkpoint_writes` turns a storage that fills while a checkpoint is saved into one error naming the
  checkpoint folder (not the model's output), and removes the checkpoint the run had half written: a resume
  would otherwise pick it as the last one and fail on its missing or truncated files.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from hf_unified_embed.errors import InputError, OutputError, SecretLeakError, shown
from hf_unified_embed.utils.redaction import scrub_folder
from hf_unified_embed.utils.write_failures import storage_full


class RedactCheckpointsCallback(TrainerCallback):
    """Scrub each checkpoint the trainer saves: secrets in its text files are replaced by ``<redacted>``.

    A checkpoint in which an active secret remains in a binary file (one that cannot be rewritten) is
    deleted, and the run stops with :class:`~hf_unified_embed.errors.SecretLeakError`: nothing that holds a
    secret stays on disk. Pass it in ``callbacks=[...]`` of ``SentenceTransformerTrainer``.
    """

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        checkpoint = Path(str(args.output_dir)) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if not checkpoint.is_dir():
            return
        try:
            scrub_folder(checkpoint)
        except SecretLeakError:
            shutil.rmtree(checkpoint, ignore_errors=True)
            raise


#: Fields of ``trainer_state.json`` checked by their shape only: the trainer keeps them as it finds them.
_FREE_FIELDS = {"log_history": list, "stateful_callbacks": dict, "trial_params": dict}


def read_trainer_state(checkpoint: str | Path) -> dict[str, Any]:
    """The ``trainer_state.json`` of ``checkpoint`` as the trainer will read it on resume, checked first.

    Args:
        checkpoint: a checkpoint folder (``checkpoint-<step>``).

    Returns:
        The state: a JSON object whose keys are ``TrainerState`` fields, each of its field's type.

    Raises:
        InputError: the file is missing, not UTF-8 JSON, not an object, or a field is unknown or of the
            wrong type; one line naming the file (and the field).
    """
    from hf_unified_embed.utils.typecheck import field_annotations, type_problem

    file = Path(checkpoint) / "trainer_state.json"
    where = f"resume_from_checkpoint {checkpoint}: {file}"
    try:
        state = json.loads(file.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise InputError(f"{where}: no such file; is {checkpoint} a checkpoint folder (checkpoint-<step>)?") from None
    except (OSError, ValueError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise InputError(f"{where}: cannot be read as JSON ({error})") from None
    if not isinstance(state, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(state).__name__}")
    fields = field_annotations(TrainerState)
    for key, value in state.items():
        if key not in fields:
            raise InputError(f"{where}: unknown field {shown(key)}; the fields are {sorted(fields)}")
        kind = _FREE_FIELDS.get(key)
        if kind is not None:
            problem = None if value is None or isinstance(value, kind) else f"expected a JSON {kind.__name__}"
            if problem is None and kind is list and not all(isinstance(entry, dict) for entry in value):
                problem = "expected a list of objects"
        else:
            problem = type_problem(fields[key], value)
        if problem:
            raise InputError(f"{where}, field {shown(key)}: {problem}, got {shown(value)}")
    return state


def default_checkpoint_folder(output_dir: str | Path) -> Path:
    """The trainer's checkpoint folder of a run writing ``output_dir`` when the recipe names none."""
    return Path(f"{output_dir}-checkpoints")


@contextlib.contextmanager
def no_empty_folder(folder: str | Path, *, own: bool = False) -> Iterator[None]:
    """Remove ``folder`` at the end (success, error or interruption) if it did not exist before and is empty.

    With ``own`` (the run's default ``<output_dir>-checkpoints``, which only this tool creates), a folder
    that already exists but is empty counts as left by an earlier run killed before it could clean up, and
    is removed too if it is still empty at the end. A folder the user named keeps the old rule: it stays.
    """
    path = Path(folder)
    existed = path.exists() and not (own and path.is_dir() and not any(path.iterdir()))
    try:
        yield
    finally:
        if not existed and path.is_dir() and not any(path.iterdir()):
            with contextlib.suppress(OSError):  # something appeared meanwhile, or a mount point
                path.rmdir()


#: A checkpoint folder's name, as the trainer gives it (``checkpoint-<step>``).
_CHECKPOINT = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-\d+$")
#: The file the trainer writes last into a checkpoint (``Trainer._save_checkpoint``): without it, or unreadable,
#: the checkpoint is not whole.
_LAST_WRITTEN = "trainer_state.json"


def _checkpoints(folder: Path) -> set[str]:
    try:
        return {entry.name for entry in folder.iterdir() if entry.is_dir() and _CHECKPOINT.match(entry.name)}
    except OSError:
        return set()


def _whole(checkpoint: Path) -> bool:
    try:
        return isinstance(json.loads((checkpoint / _LAST_WRITTEN).read_bytes()).get("global_step"), int)
    except (OSError, ValueError, AttributeError):
        return False


def _inside(path: str | None, folder: Path) -> bool:
    return path is not None and folder in Path(path).absolute().parents


@contextlib.contextmanager
def checkpoint_writes(folder: str | Path) -> Iterator[None]:
    """Around a training run that saves checkpoints into ``folder``: a storage that fills while one is saved
    ends the run with one :class:`~hf_unified_embed.errors.OutputError` naming ``folder``, and the checkpoint
    this run had half written is removed; the checkpoints saved before (by this run or an earlier one) stay.

    Only a checkpoint that appeared during the run and is not whole (its ``trainer_state.json``, written
    last, missing or unreadable) is removed: nothing the run did not write, nothing finished.

    Raises:
        OutputError: the checkpoint folder, the cause, the checkpoint removed and the last one kept.
    """
    path = Path(folder).absolute()
    before = _checkpoints(path)
    try:
        yield
    except Exception as error:
        full = storage_full(error)
        if full is None or (full.path is not None and not _inside(full.path, path)):
            raise  # not a checkpoint's write: the caller says what filled
        half = sorted(name for name in _checkpoints(path) - before if not _whole(path / name))
        if full.path is None and not half:
            raise  # an unnamed failure (torch's) that left no checkpoint half written: not a checkpoint's
        for name in half:
            shutil.rmtree(path / name, ignore_errors=True)
        kept = sorted(
            (name for name in _checkpoints(path) if _whole(path / name)), key=lambda name: int(name.rsplit("-", 1)[1])
        )
        removed = f"; the half-written {', '.join(half)} was removed" if half else ""
        last = (
            f"; the last whole checkpoint, {path / kept[-1]}, stays: free space and resume from it "
            "(resume_from_checkpoint)"
            if kept
            else "; no whole checkpoint was saved: free space and train again"
        )
        where = f" ({full.path})" if full.path else ""
        with contextlib.suppress(OSError):
            where += f", {shutil.disk_usage(path).free:,} bytes free there"
        raise OutputError(f"cannot write the checkpoint folder {path}: {full.cause}{where}{removed}{last}") from None
