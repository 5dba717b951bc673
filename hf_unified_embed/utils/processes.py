"""Which process this is in a ``torchrun`` / ``accelerate launch`` run, read from the launcher's environment.

Both launchers export ``RANK`` and ``WORLD_SIZE`` before Python starts, so these answers are right
before anything initialises ``torch.distributed`` (a recipe is checked, and its output staged, before
the trainer exists).
"""

from __future__ import annotations

import os


def world_size() -> int:
    """Number of processes of the run (1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Rank 0 of a launched run, or a plain process: the one that writes outputs and prints results."""
    return int(os.environ.get("RANK", "0")) == 0
