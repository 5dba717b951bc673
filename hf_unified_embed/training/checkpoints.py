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
  default folder (``<output_dir>-checkpoints``) found empty is removed by the next run too.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from hf_unified_embed.errors import InputError, SecretLeakError, shown
from hf_unified_embed.utils.redaction import scrub_folder


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
