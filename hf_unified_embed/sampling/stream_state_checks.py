"""The shape of a saved multi-task stream state: what a checkpoint's ``trainer_state.json`` must hold for a
stream to resume from it.

Kept apart from :mod:`hf_unified_embed.sampling.multi_task_stream` so that the checkpoint check before
training (:mod:`hf_unified_embed.sampling.stream_resume`) and the stream's own ``load_state_dict`` judge a
state, and word a change of the data, by one rule without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hf_unified_embed.errors import shown
from hf_unified_embed.sampling.task_stream import task_state_problem


def stream_state_problem(
    state: Any,
    *,
    step: int | None = None,
    shuffle_window: int | None = None,
    rows_per_task: Mapping[str, int | None] | None = None,
) -> tuple[str, str] | None:
    """The first field of a :meth:`MultiTaskStream.state_at` state (as read back from a checkpoint) that no
    stream can have written, and why: ``(field, problem)``, or ``None`` for a well-formed state.

    Args:
        state: one process's saved state.
        step: the step the state must be of (the checkpoint's), when known.
        shuffle_window: the stream's window (an offset past it is no position).
        rows_per_task: each task's rows, when known (a position past them is no position).
    """
    if not isinstance(state, dict):
        return "", f"expected a mapping with step and tasks, got {shown(state)}"
    for key in ("step", "tasks"):
        if key not in state:
            return key, "missing"
    if isinstance(state["step"], bool) or not isinstance(state["step"], int) or state["step"] < 0:
        return "step", f"expected a whole number >= 0, got {shown(state['step'])}"
    if step is not None and state["step"] != step:
        return "step", f"the state is of step {state['step']}, the checkpoint of step {step}"
    if not isinstance(state["tasks"], dict):
        return "tasks", f"expected a mapping of task states, got {shown(state['tasks'])}"
    data = state.get("data", {})
    if not isinstance(data, dict):
        return "data", f"expected a mapping of data identities, got {shown(data)}"
    for name, task in state["tasks"].items():
        rows = (rows_per_task or {}).get(name)
        problem = task_state_problem(task, shuffle_window=shuffle_window, rows=rows)
        if problem is not None:
            return f"tasks.{name}{'.' if problem[0] else ''}{problem[0]}", problem[1]
    return None


def data_change_message(task: str, change: str) -> str:
    """The refusal of a resume on changed data: the task, what changed, and the two ways on."""
    return (
        f"task {task!r}: its data changed since the stream state was saved ({change}); an exact resume needs the "
        "data it was saved on: resume with that data, or set on_data_change='restart' (recipe: "
        "data.on_data_change: restart) to start that task's pass afresh"
    )
