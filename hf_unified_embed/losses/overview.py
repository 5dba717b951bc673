"""Which loss for my data: the loss overview table, generated from the losses' own declarations.

In the form of sentence-transformers' loss overview (inputs → losses), one row per data shape and task
type: what the rows carry, the task types such rows have, the losses that can read them, and the columns
each loss reads. Every loss is asked through its ``column_layout`` (see
:mod:`hf_unified_embed.losses.columns`) and matched against the shape as ``train --check`` matches it
against a real task, so a new loss appears without editing anything.

The losses listed are :func:`~hf_unified_embed.losses.task_fit.known_losses`: this package's, the
sentence-transformers losses whose columns the collator knows, and a user's own losses registered under
the entry-point group ``hf_unified_embed.losses`` by an installed package. A loss that needs an argument
besides the model to be built (a wrapper such as ``KeepBaseLoss``, ``GISTEmbedLoss`` with its guide model)
cannot be described unbuilt and is not listed.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from hf_unified_embed.losses.columns import ColumnLayout, TaskColumns
from hf_unified_embed.losses.task_fit import known_losses, layout_of, stand_in


@dataclass(frozen=True)
class DataShape:
    """What every row of a task carries, and the task types whose rows look so.

    Attributes:
        description: The shape in words, for the table.
        task_types: Task types with rows of this shape.
        scores: Rows carry ``positive_scores`` (and ``negative_scores`` for their negatives).
        negatives: Rows carry hard negatives.
        difficulty: Rows carry the curriculum's ``difficulty``.
    """

    description: str
    task_types: tuple[str, ...]
    scores: bool = False
    negatives: bool = False
    difficulty: bool = False

    def rows(self, task_type: str) -> TaskColumns:
        """A one-row task of this shape, for :meth:`ColumnLayout.missing`."""
        return TaskColumns(
            task="example",
            task_type=task_type,
            rows=1,
            without_positive_scores=0 if self.scores else 1,
            with_negatives=1 if self.negatives else 0,
            without_negative_scores=1 if self.negatives and not self.scores else 0,
            has_difficulty=self.difficulty,
            without_difficulty=0 if self.difficulty else 1,
        )


#: The shapes unified rows come in (:mod:`hf_unified_embed.schema`): what a source adapter, the miner and
#: the curriculum planner write.
DATA_SHAPES: tuple[DataShape, ...] = (
    DataShape("sentence pairs with a score in [0, 1] (`positives`, `positive_scores`)", ("sts", "pair_classification"), scores=True),
    DataShape("query and positives (`positives`)", ("retrieval", "classification", "clustering")),
    DataShape("query, positives and hard negatives (`positives`, `negatives`)", ("retrieval", "classification", "clustering"), negatives=True),
    DataShape(
        "query, positives and hard negatives, each with a teacher's score (as `mine-negatives` writes them)",
        ("retrieval",),
        scores=True,
        negatives=True,
    ),
    DataShape(
        "query, positives and hard negatives, with the curriculum's `difficulty` (`hf-unified-embed curriculum`)",
        ("retrieval", "classification", "clustering"),
        negatives=True,
        difficulty=True,
    ),
)  # fmt: skip


def _columns(layout_1: ColumnLayout, layout_2: ColumnLayout) -> str:
    """The layout in one cell; negatives that follow ``negatives_per_query`` are written ``negative_1..K−``."""
    parts = ["query", "positive_1" if layout_1.positives == 1 else f"positive_1..{layout_1.positives}"]
    if layout_1.negatives != layout_2.negatives:
        parts.append("negative_1..K−")
    elif layout_1.negatives:
        parts.append("negative_1" if layout_1.negatives == 1 else f"negative_1..{layout_1.negatives}")
    text = ", ".join(parts)
    return f"{text} + label: {layout_1.label}" if layout_1.label else text


def _fitting(shape: DataShape, task_type: str) -> list[tuple[str, str]]:
    """``(loss, columns)`` for every known loss that can read rows of ``shape`` and ``task_type``."""
    rows = shape.rows(task_type)
    fitting = []
    for name, cls in known_losses().items():
        # Describing a class is not using it: sentence-transformers warns of its deprecated losses when one
        # is built for training, not in a table of what a recipe accepts.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            loss = stand_in(cls, {})
        if loss is None:
            continue
        try:
            layouts = [layout_of(loss, task_type, k) for k in (1, 2)]
        except ValueError:
            continue
        first, second = layouts
        if first is None or second is None or first.missing(rows):
            continue
        fitting.append((name, _columns(first, second)))
    return fitting


def loss_overview_markdown() -> str:
    """The "which loss for my data" table as Markdown: data shape → task type → losses that fit, with the columns each reads.

    Returns:
        One Markdown table (a header and one row per data shape and group of task types whose losses
        agree), ending in a newline; ``K−`` is the recipe's ``negatives_per_query``, ``label`` what the
        collator passes as the loss's labels.
    """
    lines = [
        "| data shape | task type | losses that fit: the columns each reads |",
        "|---|---|---|",
    ]
    for shape in DATA_SHAPES:
        groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
        for task_type in shape.task_types:
            groups.setdefault(tuple(_fitting(shape, task_type)), []).append(task_type)
        for fitting, task_types in groups.items():
            losses = "<br>".join(f"`{name}`: {columns}" for name, columns in fitting) or "—"
            lines.append(f"| {shape.description} | {', '.join(f'`{t}`' for t in task_types)} | {losses} |")
    return "\n".join(lines) + "\n"
