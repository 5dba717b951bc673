"""Which loss for my data: the loss overview table, generated from the losses' own declarations.

In the form of sentence-transformers' loss overview (inputs → recommended losses), one row per data shape
and task type: what the rows carry, the task types such rows have, the losses recommended for them, the
others that learn from them (with what of the rows each leaves unread, e.g. the scores), and the columns
each loss reads. Every loss is asked through its ``column_layout`` (see
:mod:`hf_unified_embed.losses.columns`) and its ``learns_from`` (see
:mod:`hf_unified_embed.losses.learns_from`) and matched against the shape as ``train --check`` matches it
against a real task, so a new loss appears without editing anything, and a loss that reads the rows but
has no gradient on them (a distillation over one document, a loss that selects labels 0 and 1 among
graded scores) is not listed.

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
from hf_unified_embed.losses.learns_from import learns_from
from hf_unified_embed.losses.task_fit import known_losses, layout_of, stand_in


@dataclass(frozen=True)
class DataShape:
    """What every row of a task carries, and the task types whose rows look so.

    Attributes:
        description: The shape in words, for the table.
        task_types: Task types with rows of this shape.
        scores: Rows carry ``positive_scores`` (and ``negative_scores`` for their negatives).
        score_values: Typical values of those scores (graded, or 0 and 1): what a loss that selects rows by
            their label has to choose from.
        negatives: Rows carry hard negatives.
        difficulty: Rows carry the curriculum's ``difficulty``.
    """

    description: str
    task_types: tuple[str, ...]
    scores: bool = False
    score_values: tuple[float, ...] = ()
    negatives: bool = False
    difficulty: bool = False

    def rows(self, task_type: str) -> TaskColumns:
        """A one-row task of this shape, for :meth:`ColumnLayout.missing` and :meth:`LearnsFrom.problem`."""
        return TaskColumns(
            task="example",
            task_type=task_type,
            rows=1,
            without_positive_scores=0 if self.scores else 1,
            with_negatives=1 if self.negatives else 0,
            without_negative_scores=1 if self.negatives and not self.scores else 0,
            has_difficulty=self.difficulty,
            without_difficulty=0 if self.difficulty else 1,
            most_positives=1,
            most_negatives=_NEGATIVES_PER_ROW if self.negatives else 0,
            score_values=self.score_values if self.scores else (),
        )

    def ignored_by(self, layout: ColumnLayout) -> list[str]:
        """What of these rows a loss reading ``layout`` leaves unread (empty: it reads all of it)."""
        ignored = []
        if self.scores and layout.label not in ("score", "teacher_scores"):
            ignored.append("the scores" if self.negatives else "the scores (every pair counts as a positive)")
        if self.negatives and not layout.negatives:
            ignored.append("the hard negatives")
        if self.difficulty and layout.label != "difficulty":
            ignored.append("the difficulty")
        return ignored


#: Hard negatives a row of a shape with negatives has (mine-negatives writes several).
_NEGATIVES_PER_ROW = 4

#: Graded scores as an STS source gives them, normalised to [0, 1], and a teacher's scores.
_GRADED = (0.0, 0.16, 0.4, 0.64, 0.88, 1.0)

#: The shapes unified rows come in (:mod:`hf_unified_embed.schema`): what a source adapter, the miner and
#: the curriculum planner write.
DATA_SHAPES: tuple[DataShape, ...] = (
    DataShape("sentence pairs with a graded score in [0, 1] (`positives`, `positive_scores`)", ("sts",), scores=True, score_values=_GRADED),
    DataShape("sentence pairs labelled 0 or 1 (`positives`, `positive_scores`)", ("pair_classification",), scores=True, score_values=(0.0, 1.0)),
    DataShape("query and positives (`positives`)", ("retrieval", "classification", "clustering")),
    DataShape("query, positives and hard negatives (`positives`, `negatives`)", ("retrieval", "classification", "clustering"), negatives=True),
    DataShape(
        "query, positives and hard negatives, each with a teacher's score (as `mine-negatives` writes them)",
        ("retrieval",),
        scores=True,
        score_values=(0.31, 0.47, 0.62, 0.78, 0.93),
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


@dataclass(frozen=True)
class Fit:
    """One loss that learns from rows of a shape: its name, the columns it reads, whether it is recommended
    and what of the rows it leaves unread."""

    name: str
    columns: str
    recommended: bool
    ignores: tuple[str, ...]

    def cell(self) -> str:
        """The loss's name in code, the columns it reads and what of the rows it ignores, for one table cell."""
        ignored = f" — ignores {' and '.join(self.ignores)}" if self.ignores else ""
        return f"`{self.name}`: {self.columns}{ignored}"


def fitting(shape: DataShape, task_type: str) -> list[Fit]:
    """Every known loss that reads rows of ``shape`` and ``task_type`` and learns from them, recommended first.

    A loss is recommended where it declares the task type (``LearnsFrom.recommended_for``) and reads all
    that the rows carry: their scores, their hard negatives, their difficulty.
    """
    rows = shape.rows(task_type)
    found = []
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
        declared = learns_from(loss)
        if declared.problem(first, rows) is not None:
            continue  # it reads these rows and learns nothing from them
        ignores = tuple(shape.ignored_by(first))
        recommended = task_type in declared.recommended_for and not ignores
        found.append(Fit(name, _columns(first, second), recommended, ignores))
    return sorted(found, key=lambda fit: not fit.recommended)


def loss_overview_markdown() -> str:
    """The "which loss for my data" table as Markdown: data shape → task type → the losses recommended for it,
    and the others that learn from it, with the columns each reads.

    Returns:
        One Markdown table (a header and one row per data shape and group of task types whose losses
        agree), ending in a newline; ``K−`` is the recipe's ``negatives_per_query``, ``label`` what the
        collator passes as the loss's labels. A loss that can read the rows but has no gradient on them is
        not listed.
    """
    lines = [
        "| data shape | task type | recommended | also learns from these rows |",
        "|---|---|---|---|",
    ]
    for shape in DATA_SHAPES:
        groups: dict[tuple[Fit, ...], list[str]] = {}
        for task_type in shape.task_types:
            groups.setdefault(tuple(fitting(shape, task_type)), []).append(task_type)
        for fits, task_types in groups.items():
            recommended = "<br>".join(fit.cell() for fit in fits if fit.recommended) or "—"
            others = "<br>".join(fit.cell() for fit in fits if not fit.recommended) or "—"
            lines.append(
                f"| {shape.description} | {', '.join(f'`{t}`' for t in task_types)} | {recommended} | {others} |"
            )
    return "\n".join(lines) + "\n"
