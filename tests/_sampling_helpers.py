"""Shared by the sampler tests and tests/_dist/sampling_steps.py: two tiny tasks and a recording collator."""

from __future__ import annotations

from typing import Any

from datasets import Dataset, DatasetDict


def two_task_dataset(pairs: int = 12, triplets: int = 10) -> DatasetDict:
    """``pairs`` (anchor, positive) and ``triplets`` (anchor, positive, negative); anchors name their row."""
    return DatasetDict(
        {
            "pairs": Dataset.from_dict(
                {
                    "anchor": [f"pairs {i} what is item {i}" for i in range(pairs)],
                    "positive": [f"item {i} is a thing numbered {i}" for i in range(pairs)],
                }
            ),
            "triplets": Dataset.from_dict(
                {
                    "anchor": [f"triplets {i} where is city {i}" for i in range(triplets)],
                    "positive": [f"city {i} lies on river {i}" for i in range(triplets)],
                    "negative": [f"river {i + 1} has no city" for i in range(triplets)],
                }
            ),
        }
    )


def parse_anchor(anchor: str) -> tuple[str, int]:
    task, row = anchor.split()[:2]
    return task, int(row)


class RecordingCollator:
    """Wraps the trainer's collator and records ``(task, rows)`` of every batch it collates, in order."""

    def __init__(self, collator: Any) -> None:
        self.collator = collator
        self.batches: list[tuple[str, list[int]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.collator, name)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        parsed = [parse_anchor(row["anchor"]) for row in features]
        tasks = {task for task, _ in parsed}
        self.batches.append((tasks.pop() if len(tasks) == 1 else "+".join(sorted(tasks)), [r for _, r in parsed]))
        return self.collator(features)
