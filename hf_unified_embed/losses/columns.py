"""What a loss reads and what a task's rows carry: every loss of this package declares its own :class:`ColumnLayout`.

Unified rows hold variable-length lists of positives and negatives; a sentence-transformers loss
reads a fixed number of columns. ``loss.column_layout(task_type, negatives_per_query)`` says how many
of each the collator draws per row, which value it passes as ``labels`` and what the rows must carry
for that (scores, hard negatives, a difficulty, a task type), so a new loss (in this package or in a
user's module) needs no entry anywhere else. :class:`TaskColumns` is the other side: what one task's
rows carry, counted once from the data, and :meth:`ColumnLayout.missing` compares the two, so a loss
that cannot read a task is refused before any model loads (:mod:`hf_unified_embed.losses.task_fit`).

``column_layout`` may read the loss's constructor options (kept as attributes of the same name, such as
``self.positives_per_query``) and nothing built from the model: a recipe's losses are described from
their class and options before the model loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from hf_unified_embed.errors import shown

if TYPE_CHECKING:
    from datasets import Dataset

LabelSource = Literal["score", "difficulty", "teacher_scores"]

#: The distinct score values :class:`TaskColumns` keeps of a task (its labels' range and kinds, not every value).
SCORE_VALUES_KEPT = 1024


@dataclass(frozen=True)
class ColumnLayout:
    """The columns one task's batches carry: ``query``, ``positive_1..positives``, ``negative_1..negatives``.

    Args:
        positives: Positives drawn per row (K+); rows with fewer are sampled with replacement.
        negatives: Hard negatives drawn per row (K−); 0 for losses on scored pairs. A row without hard
            negatives borrows the other rows' of its batch (see ``hard_negatives``); a batch where no row
            has any gets no negative columns.
        label: What becomes ``labels``: ``"score"`` (the score of ``positive_1``: every row needs
            ``positive_scores``), ``"difficulty"`` (the curriculum's column), ``"teacher_scores"`` (per
            row the scores of ``positive_1..K+`` then ``negative_1..K−``, from ``positive_scores`` /
            ``negative_scores`` of the drawn texts: a ``(batch, K+ + K−)`` label tensor for distillation
            losses) or ``None`` (no labels).
        hard_negatives: Every row must bring its own ``negatives`` (at least one is drawn): the loss
            cannot do without them nor use texts borrowed from other rows.
        task_types: The task types the loss fits; ``None``: any whose rows carry what it reads.

    Raises:
        ValueError: For a count below its minimum, an unknown label or task type.
    """

    positives: int = 1
    negatives: int = 0
    label: LabelSource | None = None
    hard_negatives: bool = False
    task_types: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        from hf_unified_embed.schema import TASK_TYPES

        if self.positives < 1:
            raise ValueError(f"a layout needs at least one positive column, got positives={self.positives}")
        if self.negatives < 0:
            raise ValueError(f"negatives must be >= 0, got {self.negatives}")
        if self.label not in (None, "score", "difficulty", "teacher_scores"):
            raise ValueError(f"label must be 'score', 'difficulty', 'teacher_scores' or None, got {shown(self.label)}")
        if self.hard_negatives and self.negatives < 1:
            raise ValueError("a layout that needs hard negatives draws at least one: negatives must be >= 1")
        unknown = [t for t in self.task_types or () if t not in TASK_TYPES]
        if unknown or self.task_types == ():
            raise ValueError(f"task_types must name some of {list(TASK_TYPES)}, got {shown(self.task_types)}")

    @classmethod
    def scored_pair(cls) -> ColumnLayout:
        """``(query, positive_1)`` with the score of ``positive_1`` as label (STS-style losses)."""
        return cls(positives=1, negatives=0, label="score")

    @classmethod
    def pair(cls) -> ColumnLayout:
        """``(query, positive_1)`` without labels (symmetric in-batch losses on sentence pairs)."""
        return cls(positives=1, negatives=0, label=None)

    @property
    def columns(self) -> tuple[str, ...]:
        """The text column names in the order the loss reads them."""
        return (
            "query",
            *(f"positive_{i}" for i in range(1, self.positives + 1)),
            *(f"negative_{i}" for i in range(1, self.negatives + 1)),
        )

    @property
    def reads(self) -> tuple[str, ...]:
        """The unified fields the rows must carry for this layout: ``query``, ``positives`` and what the
        label and the hard negatives need (``positive_scores``, ``negatives``, ``negative_scores``, ``difficulty``)."""
        fields = ["query", "positives"]
        if self.label in ("score", "teacher_scores"):
            fields.append("positive_scores")
        if self.hard_negatives:
            fields.append("negatives")
        if self.label == "teacher_scores" and self.negatives:
            fields += [f for f in ("negatives", "negative_scores") if f not in fields]
        if self.label == "difficulty":
            from hf_unified_embed.schema import DIFFICULTY_COLUMN

            fields.append(DIFFICULTY_COLUMN)
        return tuple(fields)

    def describe(self) -> str:
        """``query, positive_1, negative_1..2 (+ label: score)``: the layout in one line, for ``train --check``."""
        parts = ["query", "positive_1" if self.positives == 1 else f"positive_1..{self.positives}"]
        if self.negatives:
            parts.append("negative_1" if self.negatives == 1 else f"negative_1..{self.negatives}")
        label = f" + label: {self.label}" if self.label else ""
        return ", ".join(parts) + label

    def missing(self, task: TaskColumns) -> list[str]:
        """What ``task``'s rows lack for this layout, one phrase per field (empty: the loss can read the task).

        Mirrors what :class:`~hf_unified_embed.training.UnifiedDataCollator` would refuse at the first batch:
        a row without positives, without the score its label needs, without its own negatives (or their
        scores) where they cannot be borrowed, without a finite difficulty.
        """
        from hf_unified_embed.schema import DIFFICULTY_COLUMN

        problems = []
        if self.task_types is not None and task.task_type not in self.task_types:
            problems.append(f"task_type {' or '.join(self.task_types)}")
        if task.without_positives:
            problems.append(task.empty("positives", task.without_positives))
        if self.label in ("score", "teacher_scores") and task.without_positive_scores:
            problems.append(task.empty("positive_scores", task.without_positive_scores))
        # Teacher scores cannot be borrowed with a text, so a row reads its own negatives and their scores
        # when the loss needs them, or when other rows of the task have some (then a batch mixes both).
        own_negatives = self.hard_negatives or (
            self.label == "teacher_scores" and self.negatives and task.with_negatives
        )
        if own_negatives and task.rows - task.with_negatives:
            problems.append(task.empty("negatives", task.rows - task.with_negatives))
        if self.label == "teacher_scores" and self.negatives and task.without_negative_scores:
            problems.append(task.empty("negative_scores", task.without_negative_scores))
        if self.label == "difficulty" and task.without_difficulty:
            if task.without_difficulty == task.rows and not task.has_difficulty:
                problems.append(f"{DIFFICULTY_COLUMN} (no such column: add it with hf-unified-embed curriculum)")
            else:
                problems.append(
                    f"{DIFFICULTY_COLUMN} (not a finite number in {task.without_difficulty} of {task.rows} rows)"
                )
        return problems


@dataclass(frozen=True)
class TaskColumns:
    """What the rows of one task carry, counted once: what :meth:`ColumnLayout.missing` compares a loss with.

    Attributes:
        task: The task name.
        task_type: Its ``task_type``.
        rows: Rows counted.
        without_positives: Rows with an empty ``positives`` list.
        without_positive_scores: Rows with an empty ``positive_scores`` list.
        with_negatives: Rows with at least one hard negative.
        without_negative_scores: Rows with hard negatives but an empty ``negative_scores`` list.
        has_difficulty: Whether the task has the curriculum's ``difficulty`` column.
        without_difficulty: Rows without a finite difficulty (all of them when the column is absent).
        most_positives: The most positives a row has (a loss over a row's own documents compares them).
        most_negatives: The most hard negatives a row has.
        score_values: The distinct values of ``positive_scores``, sorted (at most :data:`SCORE_VALUES_KEPT`,
            spread over the range with its ends kept); empty when unknown. What a loss that selects rows by
            their label (:mod:`hf_unified_embed.losses.learns_from`) has to choose from.
    """

    task: str
    task_type: str
    rows: int
    without_positives: int = 0
    without_positive_scores: int = 0
    with_negatives: int = 0
    without_negative_scores: int = 0
    has_difficulty: bool = False
    without_difficulty: int = 0
    most_positives: int = 1
    most_negatives: int = 0
    score_values: tuple[float, ...] = ()

    def empty(self, field: str, count: int) -> str:
        """``positive_scores (empty in 3 of 16 rows)``: a field that ``count`` rows lack."""
        return f"{field} (empty in {count} of {self.rows} rows)"

    @classmethod
    def of(cls, dataset: Dataset, task: str, *, difficulty_planned: bool = False) -> TaskColumns:
        """Count what the rows of ``dataset`` (one unified task) carry, with pyarrow over whole columns.

        Args:
            dataset: The task's rows (a selection, e.g. shuffled, is counted as selected).
            task: Its name, for messages.
            difficulty_planned: The curriculum adds the ``difficulty`` column before training (a teacher is
                named), so it counts as present.

        Raises:
            ValueError: If the task has no ``task_type`` column or more than one task type.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        from hf_unified_embed.schema import DIFFICULTY_COLUMN

        if "task_type" not in dataset.column_names:
            raise ValueError(f"task {shown(task)}: no 'task_type' column; is this a unified dataset?")
        has_difficulty = DIFFICULTY_COLUMN in dataset.column_names
        table = dataset.data.table
        # A selection (select, shuffle) is an indices mapping over the table. Reading the selected rows
        # through datasets copies their texts (seconds per 100k rows); the per-row numbers below are taken
        # through the mapping instead, which copies nothing but them.
        indices = dataset._indices.column(0) if dataset._indices is not None else None

        def per_row(values: pa.ChunkedArray) -> pa.ChunkedArray:
            return values if indices is None else pc.take(values, indices)

        def count(mask: pa.ChunkedArray) -> int:
            return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)

        def empty(name: str) -> pa.ChunkedArray:
            return pc.equal(per_row(pc.fill_null(pc.list_value_length(table.column(name)), 0)), 0)

        def most(name: str) -> int:
            return int(pc.max(per_row(pc.fill_null(pc.list_value_length(table.column(name)), 0))).as_py() or 0)

        types = sorted(str(t) for t in pc.unique(per_row(table.column("task_type"))).to_pylist())
        if len(types) > 1:
            raise ValueError(f"task {shown(task)}: expected one task_type per task, found {types}")
        rows = len(dataset)
        with_negatives = pc.invert(empty("negatives"))
        without_difficulty = rows
        if has_difficulty:
            finite = pc.is_finite(pc.cast(per_row(table.column(DIFFICULTY_COLUMN)), pa.float64()))
            without_difficulty = rows - count(pc.fill_null(finite, False))
        if difficulty_planned:
            has_difficulty, without_difficulty = True, 0
        scores = pc.unique(pc.drop_null(pc.list_flatten(per_row(table.column("positive_scores")))))
        score_values = sorted(float(v) for v in pc.cast(scores, pa.float64()).to_pylist())
        if len(score_values) > SCORE_VALUES_KEPT:  # a teacher's scores: as many values as rows; keep the spread
            last = len(score_values) - 1
            score_values = [score_values[i * last // (SCORE_VALUES_KEPT - 1)] for i in range(SCORE_VALUES_KEPT)]
        return cls(
            task=task,
            task_type=types[0] if types else "",
            rows=rows,
            without_positives=count(empty("positives")),
            without_positive_scores=count(empty("positive_scores")),
            with_negatives=count(with_negatives),
            without_negative_scores=count(pc.and_(with_negatives, empty("negative_scores"))),
            has_difficulty=has_difficulty,
            without_difficulty=without_difficulty,
            most_positives=most("positives"),
            most_negatives=most("negatives"),
            score_values=tuple(score_values),
        )
