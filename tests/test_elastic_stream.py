"""Elastic stream resume under torchrun (issue 37 item 7): a run killed after a checkpoint under N processes
resumes under M (1 → 2 and 2 → 1, gloo, CPU) with the task of every step kept and every row of the interrupted
pass trained on exactly once. Before, the resumed run stopped with a ``ValueError`` on every rank.

The rows and positions drawn at random are in test_elastic_resume.py; this runs the stock trainer.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
from datasets import Dataset, IterableDataset

from hf_unified_embed.sampling import MultiTaskStream
from tests import _processes as processes

SCRIPT = Path(__file__).parent / "_dist" / "stream_steps.py"
#: Rows of each task in stream_steps.py, batches per optimizer step, and the step the run is killed after.
TASK_ROWS = {"pairs": 40, "triplets": 30}
ACCUMULATION, KILLED_AT, MAX_STEPS = 2, 4, 8


def _launch(model: str, out: Path, mode: str, nproc: int) -> list[list[tuple[str, list[int]]]]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    result = processes.run(
        [*command, str(SCRIPT), model, str(out), mode],
        expected=processes.Expected(processes=nproc, steps=MAX_STEPS * 2),
        env=env,
    )
    assert result.returncode == (1 if mode == "kill" else 0), processes.failure(result)
    return [json.loads((out / f"{mode}.rank{rank}.json").read_text()) for rank in range(nproc)]


@pytest.mark.multiprocess
@pytest.mark.parametrize(("saved_by", "resumed_by"), [(1, 2), (2, 1)])
def test_a_stream_killed_under_n_processes_resumes_under_m_reading_each_row_of_the_pass_once(
    tiny_model_path: str, tmp_path: Path, saved_by: int, resumed_by: int
) -> None:
    killed = [batches[: KILLED_AT * ACCUMULATION] for batches in _launch(tiny_model_path, tmp_path, "kill", saved_by)]
    resumed = [
        batches[: (MAX_STEPS - KILLED_AT) * ACCUMULATION]
        for batches in _launch(tiny_model_path, tmp_path, "resume", resumed_by)
    ]
    # The task of each step is the uninterrupted run's: the same on every process, whatever their number.
    for run in (killed, resumed):
        step_tasks = {tuple(task for task, _ in batches[::ACCUMULATION]) for batches in run}
        assert len(step_tasks) == 1, step_tasks
    names = list(TASK_ROWS)
    schedule = MultiTaskStream({name: _empty() for name in names}, weights="equal", seed=7)
    expected = [names[schedule.task_of(step)] for step in range(MAX_STEPS)]
    assert [task for task, _ in killed[0][::ACCUMULATION]] + [
        task for task, _ in resumed[0][::ACCUMULATION]
    ] == expected
    for task, rows in TASK_ROWS.items():
        before = Counter(row for batches in killed for name, batch in batches if name == task for row in batch)
        # Rows of the resumed run in reading order across its processes: step by step, rank by rank.
        after = [
            row
            for step in range(MAX_STEPS - KILLED_AT)
            for batches in resumed
            for name, batch in batches[step * ACCUMULATION : (step + 1) * ACCUMULATION]
            if name == task
            for row in batch
        ]
        left = rows - sum(before.values())
        assert max(before.values(), default=1) == 1
        finished = before + Counter(after[:left])
        assert max(finished.values()) == 1, f"{task}: rows of the interrupted pass read twice"
        if len(after) >= left:
            assert sorted(finished) == list(range(rows)), f"{task}: rows of the interrupted pass never read"


def _empty() -> IterableDataset:
    """A stand-in task: the schedule of steps depends on the seed and the weights only."""
    return Dataset.from_dict({"anchor": ["x"]}).to_iterable_dataset()
