"""The trainer's checkpoint folder (``training_args.output_dir``) under the package's output rules.

sentence-transformers' trainer writes its checkpoints itself, outside the staged model folder that
:class:`~hf_unified_embed.utils.outputs.StagedOutput` scrubs, so two things are added around it:

* :class:`RedactCheckpointsCallback` scrubs every checkpoint as soon as it is saved (its ``README.md``
  renders the card — model name included — and ``trainer_state.json`` the logs), with the rules of
  :mod:`hf_unified_embed.utils.redaction`;
* :func:`no_empty_folder` removes the checkpoint folder after a run that saved no checkpoint into it:
  transformers' ``Trainer`` creates it when it starts, even with ``save_strategy: no``, and a failed or
  interrupted run would leave it behind. A run killed with ``kill -9`` cannot clean up, so the run's own
  default folder (``<output_dir>-checkpoints``) found empty is removed by the next run too.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from hf_unified_embed.errors import SecretLeakError
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
