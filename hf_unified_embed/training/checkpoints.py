"""The trainer's checkpoint folder (``training_args.output_dir``) under the package's output rules.

sentence-transformers' trainer writes its checkpoints itself, outside the staged model folder that
:class:`~hf_unified_embed.utils.outputs.StagedOutput` scrubs, so two things are added around it:

* :class:`RedactCheckpointsCallback` scrubs every checkpoint as soon as it is saved (its ``README.md``
  renders the card — model name included — and ``trainer_state.json`` the logs), with the rules of
  :mod:`hf_unified_embed.utils.redaction`;
* :func:`no_empty_folder` removes the checkpoint folder after a run that saved no checkpoint into it:
  transformers' ``Trainer`` creates it when it starts, even with ``save_strategy: no``, and a failed or
  interrupted run would leave it behind.
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


@contextlib.contextmanager
def no_empty_folder(folder: str | Path) -> Iterator[None]:
    """Remove ``folder`` at the end (success, error or interruption) if it did not exist before and is empty."""
    path = Path(folder)
    existed = path.exists()
    try:
        yield
    finally:
        if not existed and path.is_dir() and not any(path.iterdir()):
            path.rmdir()
