"""Elastic stream resume: a task's stream state saved by N processes, continued by M.

Each of the N processes read its own part of the task's current pass (its shards, or one row in N)
in its own shuffled windows, so the rows it had not read yet are a pure function of its saved state.
On a resume under M processes those *remainders* are read in order (old process 0's, then 1's, ...)
as one sequence, and process ``j`` of M keeps the rows whose index in it is ``j`` modulo M: every row
of the interrupted pass is read exactly once over the whole run, whatever N and M. Then every process
starts the next pass (after the furthest one any old process had reached) with the usual split for M.
The task of each step depends only on the seed and the step, so the task order is kept.

A remainder is read by every new process (each keeps its share), so resuming re-reads at most the rest
of one pass per task; a resume under the saving run's process count loads each process's own state.
:func:`resplit` makes the new states; :class:`~hf_unified_embed.sampling.task_stream.PassRemainder` reads a
remainder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def resplit(states: Sequence[dict[str, Any]], rank: int, world_size: int) -> dict[str, Any]:
    """The state of process ``rank`` of ``world_size`` that continues the :class:`MultiTaskStream` states
    ``states`` saved by ``len(states)`` processes at the same step.

    Raises:
        ValueError: the states are of different steps or tasks, or one is itself mid-way through a
            remainder of a resume under another process count (resume it with that count until its pass ends).
    """
    if len(states) == world_size:
        return dict(states[rank])
    steps = {int(state["step"]) for state in states}
    tasks = [sorted(state.get("tasks", {})) for state in states]
    if len(steps) != 1 or any(names != tasks[0] for names in tasks):
        raise ValueError("the saved stream states are not of one step and one set of tasks")
    resumed: dict[str, Any] = {}
    for name in tasks[0]:
        saved = [state["tasks"][name] for state in states]
        if any("remainder" in task for task in saved):
            raise ValueError(
                f"task {name!r} was saved while finishing a pass interrupted under another process count; "
                f"resume it with the {len(states)} process(es) that saved it"
            )
        following = max(int(task["pass"]) for task in saved) + 1
        resumed[name] = {
            "pass": following,
            "window": -1,
            "window_start": None,
            "offset": 0,
            "remainder": {"world_size": len(states), "states": saved, "source": 0, "seen": 0, "inner": None},
        }
    # The data each task's rows came from (the same for every saving process), compared on load.
    return {"step": steps.pop(), "tasks": resumed, "data": dict(states[0].get("data") or {})}
