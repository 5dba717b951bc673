"""Data collator that turns unified rows into the fixed columns a sentence-transformers loss reads.

A unified row has lists of positives and negatives of any length; each batch needs ``query``,
``positive_1..K+`` and ``negative_1..K−`` text columns (:class:`~hf_unified_embed.training.ColumnLayout`).
Every epoch the collator draws the K+ positives and K− negatives of a row anew (CoDiEmb §2.2:
"if the available samples are fewer than K+ or K−, we sample with replacement"). The draw depends
only on ``(seed, epoch, row content)``, so it is the same with any number of dataloader workers,
any batch composition and after resuming from a checkpoint.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from datasets import Dataset, DatasetDict
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.data_collator import DEFAULT_LABEL_COLUMNS, BaseDataCollator
from sentence_transformers.sentence_transformer.data_collator import SentenceTransformerDataCollator
from torch import nn
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from hf_unified_embed.errors import UnifiedSchemaError, shown
from hf_unified_embed.schema import DIFFICULTY_COLUMN, INSTRUCTION_COLUMNS
from hf_unified_embed.training.layout import (
    SCORED_PAIR_TASK_TYPES,
    ColumnLayout,
    column_layouts,
)
from hf_unified_embed.training.prompts import prompts_from_unified

#: Unified columns that are not compared as texts when sentence-transformers looks for duplicates: the
#: task, its type and its instructions are the same in every row of a task, the scores are numbers, and
#: every row without hard negatives has the same empty ``negatives`` list.
NOT_COMPARED_COLUMNS: tuple[str, ...] = (
    "task",
    "task_type",
    *INSTRUCTION_COLUMNS,
    "negatives",
    "positive_scores",
    "negative_scores",
    DIFFICULTY_COLUMN,
)


def _row_digest(row: Mapping[str, Any]) -> int:
    # blake2b instead of hash(): Python's str hash is salted per process, which would make the draw
    # differ between dataloader workers and runs.
    text = "\x1e".join((row["task"], row["query"], "\x1f".join(row["positives"]), "\x1f".join(row["negatives"])))
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def draw_indices(rng: np.random.Generator, available: int, k: int) -> np.ndarray:
    """``k`` indices into ``available`` items: without replacement when enough, else all + repeats.

    When a row has fewer than ``k`` items every item is used once and the remaining slots are drawn
    with replacement, so no available text is left out while the column count stays fixed.
    """
    if k <= available:
        return rng.choice(available, size=k, replace=False)
    return np.concatenate([rng.permutation(available), rng.integers(0, available, size=k - available)])


@dataclass
class UnifiedDataCollator(SentenceTransformerDataCollator):
    """Collates unified rows (:data:`~hf_unified_embed.UNIFIED_FEATURES`) for ``SentenceTransformerTrainer``.

    Each batch must hold rows of one task (the trainer's multi-dataset samplers guarantee this for a
    ``DatasetDict`` keyed by task). The task's :class:`ColumnLayout` decides the columns:
    ``query``, ``positive_1..K+``, ``negative_1..K−`` and, if the layout names one, a ``label``
    column (the score of ``positive_1``, or the row's ``difficulty``). Positives and negatives are
    re-drawn every epoch; the epoch reaches the collator through :meth:`epoch_callback`.

    A row without hard negatives never gets a filler text: its negative slots are taken from the
    negatives of the other rows of the same batch (in-batch negatives, preferring texts not already
    drawn, never one of the row's own positives). If no row of the batch has negatives, the batch
    has no negative columns and the loss uses in-batch negatives only.

    Args:
        layouts: Column layout per task name. Tasks not listed use a layout from their ``task_type``
            (scored pairs for ``sts``/``pair_classification``, else 1 positive + ``negatives_per_query``).
        negatives_per_query: K− for tasks without a layout.
        seed: Seed of the draws (use the training arguments' seed).
        epoch: The current epoch; set by :meth:`set_epoch` (which :meth:`epoch_callback` calls at the start
            of every epoch).
        valid_label_columns: sentence-transformers' label columns (``label``, ``score``, ...) plus
            :data:`NOT_COMPARED_COLUMNS`. The trainer hands this list to its batch samplers, and
            ``NoDuplicatesBatchSampler`` leaves these columns out when it looks for duplicates: it then
            compares each row's ``query`` and ``positives`` only. With the unified columns in, every row of
            a task would match every other on its task and instructions and each batch would hold one row.

    Other Parameters:
        preprocess_fn (Callable): ``model.preprocess`` (a field of sentence-transformers' collator).
        prompts (dict[str, dict[str, str]] | None): ``{task: {column: instruction}}`` as from
            :func:`prompts_from_unified`; a key ``"positive"`` / ``"negative"`` covers all numbered columns of
            that kind (a field of sentence-transformers' collator).

    The collator pickles (for dataloader workers started with spawn or forkserver) without the model's
    weights: the copy tokenises with a weightless copy of the model.

    Example:
        ::

            losses = losses_for_tasks(model, train, {"retrieval": MultiPositiveInfoNCELoss, "sts": CoDiEmbSTSLoss})
            collator = UnifiedDataCollator.for_losses(model, train, losses, negatives_per_query=4, seed=args.seed)
            trainer = SentenceTransformerTrainer(
                model=model, args=args, train_dataset=train, loss=losses,
                data_collator=collator, callbacks=[collator.epoch_callback()],
            )
    """

    valid_label_columns: list[str] = field(default_factory=lambda: [*DEFAULT_LABEL_COLUMNS, *NOT_COMPARED_COLUMNS])
    layouts: Mapping[str, ColumnLayout] = field(default_factory=dict)
    negatives_per_query: int = 1
    seed: int = 42
    epoch: int = 0
    #: The epoch in memory shared with the dataloader workers, once :meth:`share_epoch` put it there.
    _shared_epoch: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        # Dataloader workers started with spawn or forkserver (macOS, Windows, Python 3.14's default on
        # Linux) receive the collator pickled. ``preprocess_fn`` is a method of the model; its weights
        # are not needed to tokenise, so the copy carries none (a CUDA model would otherwise be copied,
        # onto the GPU, into every worker).
        state = self.__dict__.copy()
        state["preprocess_fn"] = _without_weights(self.preprocess_fn)
        return state

    @classmethod
    def for_losses(
        cls,
        model: SentenceTransformer,
        dataset_dict: DatasetDict | Mapping[str, Dataset],
        losses: Mapping[str, nn.Module],
        *,
        negatives_per_query: int | Mapping[str, int] = 1,
        seed: int = 42,
        prompts: Mapping[str, Mapping[str, str]] | None = None,
    ) -> UnifiedDataCollator:
        """A collator whose layouts follow ``losses`` and whose prompts are the tasks' instructions.

        Args:
            model: The ``SentenceTransformer`` being trained (its ``preprocess`` tokenises).
            dataset_dict: The unified training tasks keyed by task name.
            losses: The loss per task (see :func:`~hf_unified_embed.training.losses_for_tasks`).
            negatives_per_query: K− for contrastive tasks, one number or one per task.
            seed: Seed of the per-epoch draws.
            prompts: Defaults to :func:`prompts_from_unified` of ``dataset_dict`` with the model's
                tokenizer (prompt boundaries checked); ``{}`` for none.
        """
        return cls(
            preprocess_fn=model.preprocess,
            layouts=column_layouts(dataset_dict, losses, negatives_per_query),
            seed=seed,
            prompts={
                task: dict(columns)
                for task, columns in (
                    prompts_from_unified(dataset_dict, model.tokenizer, model.max_seq_length)
                    if prompts is None
                    else prompts
                ).items()
            },
        )

    def set_epoch(self, epoch: int) -> None:
        """Start drawing the positives and negatives of ``epoch``."""
        self.epoch = int(epoch)
        if self._shared_epoch is not None:
            self._shared_epoch.fill_(self.epoch)

    def share_epoch(self) -> None:
        """Keep the epoch where persistent dataloader workers read it.

        A persistent worker keeps the collator it was started with for the whole run, so an epoch set in
        the training process later would never reach it. After this call the epoch lives in shared memory
        (a worker started by fork maps the same page; one started by spawn or forkserver receives the
        collator through torch's multiprocessing pickler, which shares the page instead of copying it), and
        :meth:`set_epoch` writes it there.
        """
        if self._shared_epoch is None:
            self._shared_epoch = torch.tensor(self.epoch, dtype=torch.int64).share_memory_()

    def current_epoch(self) -> int:
        """The epoch whose draws this process makes (in a persistent worker: the one set last in training)."""
        return self.epoch if self._shared_epoch is None else int(self._shared_epoch)

    def epoch_callback(self) -> ResampleEachEpochCallback:
        """The ``TrainerCallback`` that tells this collator the epoch; pass it in ``callbacks=[...]``."""
        return ResampleEachEpochCallback(self)

    def layout_for(self, task: str, task_type: str) -> ColumnLayout:
        """The layout of ``task`` (explicit, or derived from ``task_type``)."""
        if task in self.layouts:
            return self.layouts[task]
        if task_type in SCORED_PAIR_TASK_TYPES:
            return ColumnLayout.scored_pair()
        return ColumnLayout(positives=1, negatives=self.negatives_per_query)

    def _get_prompt_for_column(self, prompts: str | dict[str, str], column_name: str) -> str | None:
        prompt = super()._get_prompt_for_column(prompts, column_name)
        if prompt is None and isinstance(prompts, dict):
            # positive_3 -> positive: one instruction covers every drawn column of a kind.
            return prompts.get(column_name.rsplit("_", 1)[0])
        return prompt

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        if not features:
            return {}
        return super().__call__(self.to_columns(features))

    def to_columns(self, features: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Turn unified rows of one task into rows with the layout's fixed columns (before tokenising)."""
        first = features[0]
        task = first.get("dataset_name") or first["task"]
        tasks = {row["task"] for row in features}
        if len(tasks) > 1:
            raise ValueError(
                f"a batch mixes the tasks {sorted(tasks)}; the collator needs task-homogeneous batches: "
                "train on a DatasetDict keyed by task (one loss per task) so every batch comes from one task"
            )
        layout = self.layout_for(task, first["task_type"])
        epoch = self.current_epoch()
        rngs = [np.random.default_rng([self.seed, epoch, _row_digest(row)]) for row in features]

        drawn_positives: list[np.ndarray] = []
        drawn_negative_idx: list[np.ndarray] = []
        drawn_negatives: list[list[str]] = []
        for rng, row in zip(rngs, features):
            drawn_positives.append(draw_indices(rng, len(row["positives"]), layout.positives))
            negatives = row["negatives"]
            negative_idx = draw_indices(rng, len(negatives), layout.negatives) if negatives else np.zeros(0, int)
            drawn_negative_idx.append(negative_idx)
            drawn_negatives.append([negatives[i] for i in negative_idx])
        if any(drawn_negatives):
            self._borrow_in_batch_negatives(features, rngs, drawn_negatives, layout)

        out: list[dict[str, Any]] = []
        for row, positive_idx, negative_idx, negatives in zip(
            features, drawn_positives, drawn_negative_idx, drawn_negatives
        ):
            columns: dict[str, Any] = {"query": row["query"]}
            columns.update({f"positive_{i}": row["positives"][idx] for i, idx in enumerate(positive_idx, start=1)})
            columns.update({f"negative_{i}": text for i, text in enumerate(negatives, start=1)})
            if layout.label is not None:
                columns["label"] = self._label(row, layout, positive_idx, negative_idx)
            if "dataset_name" in row:
                columns["dataset_name"] = row["dataset_name"]
            out.append(columns)
        return out

    @staticmethod
    def _borrow_in_batch_negatives(
        features: Sequence[Mapping[str, Any]],
        rngs: Sequence[np.random.Generator],
        drawn: list[list[str]],
        layout: ColumnLayout,
    ) -> None:
        k = layout.negatives
        for i, (row, rng) in enumerate(zip(features, rngs)):
            if drawn[i]:
                continue
            if layout.label == "teacher_scores":
                # A borrowed text has no teacher score for this query.
                raise UnifiedSchemaError(
                    f"query {row['query'][:60]!r} has no hard negatives, but the loss reads the teacher's score "
                    "of each negative; mine negatives with scores first (hf-unified-embed mine-negatives)",
                    task=row["task"],
                    field="negatives",
                )
            own = {row["query"], *row["positives"]}
            others = [j for j in range(len(features)) if j != i]
            # Texts not yet in the batch first, so a borrowed negative adds a candidate instead of
            # duplicating one; then the already drawn ones.
            in_batch = {text for j in others for text in drawn[j]}
            fresh = [t for j in others for t in features[j]["negatives"] if t not in in_batch and t not in own]
            pool = list(dict.fromkeys(fresh)) or [t for t in dict.fromkeys(in_batch) if t not in own]
            pool = pool or [t for j in others for t in drawn[j]]
            drawn[i] = [pool[idx] for idx in draw_indices(rng, len(pool), k)]

    @staticmethod
    def _label(
        row: Mapping[str, Any], layout: ColumnLayout, positive_idx: np.ndarray, negative_idx: np.ndarray
    ) -> float | list[float]:
        if layout.label == "teacher_scores":
            return _teacher_scores(row, positive_idx, negative_idx)
        if layout.label == "difficulty":
            value = row.get(DIFFICULTY_COLUMN)
            if value is None or not math.isfinite(value):
                raise ValueError(
                    f"task {shown(row['task'])}, query {row['query'][:60]!r}: field {shown(DIFFICULTY_COLUMN)} is "
                    f"{shown(value)}; the loss needs a finite difficulty per row (run the curriculum planner)"
                )
            return float(value)
        scores = row["positive_scores"]
        if not scores:
            raise ValueError(
                f"task {shown(row['task'])}, query {row['query'][:60]!r}: field 'positive_scores' is empty; "
                "a loss on scored pairs needs one score per positive"
            )
        return float(scores[positive_idx[0]])


def _without_weights(method: Any) -> Any:
    """``method`` bound to a copy of its module whose parameters and buffers are on the meta device (no data).

    Anything else, or a module that cannot be copied so, is returned as it is.
    """
    module = getattr(method, "__self__", None)
    if not isinstance(module, nn.Module):
        return method
    memo: dict[int, Any] = {}
    try:
        for tensor in itertools.chain(module.parameters(), module.buffers()):
            empty = torch.empty_like(tensor, device="meta")
            memo[id(tensor)] = (
                nn.Parameter(empty, requires_grad=tensor.requires_grad) if isinstance(tensor, nn.Parameter) else empty
            )
        return getattr(copy.deepcopy(module, memo), method.__name__)
    except Exception:  # an unusual module (quantised weights, hooks that refuse copying): pickle it whole
        return method


def _teacher_scores(row: Mapping[str, Any], positive_idx: np.ndarray, negative_idx: np.ndarray) -> list[float]:
    """The teacher's scores of the drawn positives, then of the drawn negatives (the columns' order)."""
    values: list[float] = []
    for field_name, indices in (("positive_scores", positive_idx), ("negative_scores", negative_idx)):
        scores = row[field_name]
        if len(indices) and not scores:
            raise UnifiedSchemaError(
                f"is empty, but the loss reads the teacher's score of each drawn text; mine negatives with scores "
                f"first (hf-unified-embed mine-negatives), query {row['query'][:60]!r}",
                task=row["task"],
                field=field_name,
            )
        values.extend(float(scores[i]) for i in indices)
    return values


def check_unified_collator(dataloader: Any) -> None:
    """Refuse a training dataloader that hands unified rows to sentence-transformers' own collator.

    Without ``data_collator=`` the trainer builds its stock collator, which tokenises every column and
    stops at the first list of texts (``positives``) with ``ValueError: Unsupported input type: list``, a
    message that names nothing of this package. Called when training begins, before the first batch.

    Args:
        dataloader: The trainer's training dataloader (``None``: nothing to check).

    Raises:
        ValueError: The dataloader's rows have the unified columns and its collator is a
            sentence-transformers collator other than :class:`UnifiedDataCollator`.
    """
    collate = getattr(dataloader, "collate_fn", None)
    if not isinstance(collate, BaseDataCollator) or isinstance(collate, UnifiedDataCollator):
        return
    datasets = getattr(dataloader.dataset, "datasets", [dataloader.dataset])
    if not any({"query", "positives"} <= set(getattr(dataset, "column_names", ())) for dataset in datasets):
        return
    raise ValueError(
        f"the trainer collates unified rows with {type(collate).__name__}, which cannot read their lists of "
        "positives and negatives; pass data_collator=UnifiedDataCollator.for_losses(model, train_dataset, losses) "
        "to SentenceTransformerTrainer, or build the trainer as "
        "SentenceTransformerTrainer(**unified_training(model, train_dataset, losses, args)), which passes it"
    )


class ResampleEachEpochCallback(TrainerCallback):
    """Hands the trainer's epoch to a :class:`UnifiedDataCollator` before each epoch's batches are drawn.

    ``on_epoch_begin`` runs before the trainer creates the epoch's dataloader iterator, so
    non-persistent dataloader workers receive the collator with the new epoch. Persistent workers
    (``dataloader_persistent_workers``) keep the collator they were started with: for them the epoch
    goes into shared memory (:meth:`UnifiedDataCollator.share_epoch`) before the first epoch's workers
    start, and they read each new epoch from there.

    When training begins it also checks that the trainer collates with a :class:`UnifiedDataCollator`
    (:func:`check_unified_collator`): a trainer built without ``data_collator=`` stops there, with an error
    that says what to pass.
    """

    def __init__(self, collator: UnifiedDataCollator) -> None:
        self.collator = collator

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        check_unified_collator(kwargs.get("train_dataloader"))
        if args.dataloader_num_workers > 0 and args.dataloader_persistent_workers:
            self.collator.share_epoch()

    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # state.epoch is fractional progress (e.g. 2.0 after two full epochs, 1.5 when resumed mid-epoch).
        self.collator.set_epoch(math.floor((state.epoch or 0.0) + 1e-6))
