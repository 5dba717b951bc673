"""Which process this is in a ``torchrun`` / ``accelerate launch`` run, read from the launcher's environment.

Both launchers export ``RANK`` and ``WORLD_SIZE`` before Python starts, so these answers are right
before anything initialises ``torch.distributed`` (a recipe is checked, and its output staged, before
the trainer exists).
"""

from __future__ import annotations

import gc
import os
import sys
import warnings


def world_size() -> int:
    """Number of processes of the run (1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Rank 0 of a launched run, or a plain process: the one that writes outputs and prints results."""
    return int(os.environ.get("RANK", "0")) == 0


def quiet_progress_bars() -> None:
    """Turn off the progress bars of ``transformers``, ``datasets`` and ``huggingface_hub`` in this process.

    For the processes other than rank 0 of a launched run: each drew its own copy of rank 0's bars ("Loading
    weights", "Generating train split") on the same terminal, and a bar's line is left open between updates,
    so rank 0's one ``error:`` line could land at the end of another process's half-drawn bar: once in a wider
    test run, a two-process ``train`` that refused a checkpoint exited with code 2 and no line of its output
    began with ``error:``; in the runs that passed, the other process's "Loading weights" bars came just before
    the error line. Library state only, no environment variable; a user's ``HF_HUB_DISABLE_PROGRESS_BARS=0``
    (or ``HF_DATASETS_…``) keeps the bars, as those libraries decide, without their warning in every process.
    """
    import datasets
    import transformers.utils.logging

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Cannot disable progress bars: ... has priority": the user chose
        transformers.utils.logging.disable_progress_bar()  # and huggingface_hub's, which it calls
        datasets.disable_progress_bars()


def end_process_group() -> None:
    """Close this process's ``torch.distributed`` process group, if one is open, before the interpreter exits.

    Left to the exit, a gloo group's threads can outlive the DDP reducers that use them, and the process is
    aborted after its work is done ("terminate called without an active exception", SIGABRT: once in a full
    test suite, ``train`` under ``torchrun`` on two CPU processes; pytorch/pytorch#56297). Collecting the
    trainer's reference cycles first releases the reducers while the group still exists. No barrier: the
    main process may still be evaluating or publishing, and nothing is exchanged after training.
    """
    dist = sys.modules.get("torch.distributed")  # never imported: never initialised, nothing to close
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    gc.collect()
    dist.destroy_process_group()
