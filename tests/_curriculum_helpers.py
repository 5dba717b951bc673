"""Small unified datasets for the curriculum tests."""

from __future__ import annotations

from datasets import Dataset, DatasetDict

from hf_unified_embed.schema import UNIFIED_FEATURES


def unified_rows(task: str, n: int, query_instruction: str = "", document_instruction: str = "") -> list[dict]:
    """Rows with shared answers across rows, 0–2 negatives, some second positives, and one query reused as a document."""
    rows = []
    for i in range(n):
        positives = [f"shared answer {i % 3}"] + ([f"{task} extra positive {i}"] if i % 2 else [])
        rows.append(
            {
                "task": task,
                "task_type": "retrieval",
                "query_instruction": query_instruction,
                "document_instruction": document_instruction,
                "query": f"{task} question number {i}",
                "positives": positives,
                "negatives": [f"distractor {j}" for j in range(i % 3)],
                "positive_scores": [],
                "negative_scores": [],
            }
        )
    return rows


def tiny_tasks() -> DatasetDict:
    """Three tasks: two with instructions (one shares the other's query instruction), one without."""
    specs = [("alpha", 7, "Find an answer: ", "Answer: "), ("beta", 5, "", ""), ("gamma", 6, "Find an answer: ", "")]
    return DatasetDict(
        {
            task: Dataset.from_list(unified_rows(task, n, qi, di), features=UNIFIED_FEATURES)
            for task, n, qi, di in specs
        }
    )
