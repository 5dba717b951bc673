"""MarginMSE distillation: the student's score margins between positives and negatives regress the teacher's."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor, nn

from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.losses.common.teacher_scores import TeacherScoreLoss
from hf_unified_embed.losses.embedding_loss import AtLeastOne, MemoryBudget, MiniBatchOption, Positive
from hf_unified_embed.losses.learns_from import LearnsFrom

MARGIN_MSE_CITATION = """
@misc{hofstaetter2021crossarchitecture,
    title={Improving Efficient Neural Ranking Models with Cross-Architecture Knowledge Distillation},
    author={Sebastian Hofst{\\"a}tter and Sophia Althammer and Michael Schr{\\"o}der and Mete Sertkan and Allan Hanbury},
    year={2021},
    eprint={2010.02666},
    archivePrefix={arXiv},
    primaryClass={cs.IR},
}
"""


class DistillMarginMSELoss(TeacherScoreLoss):
    #: What it learns from (:mod:`hf_unified_embed.losses.learns_from`). A margin needs a positive and a hard negative of the row's own.
    learns_from = LearnsFrom(candidates=2, recommended_for=("retrieval",))

    def __init__(
        self,
        model: nn.Module,
        positives_per_query: AtLeastOne = 1,
        teacher_scale: Positive = 2.0,
        mini_batch_size: MiniBatchOption = None,
        mini_batch_num_tokens: MiniBatchOption = None,
        mini_batch_memory_budget: MemoryBudget = None,
    ) -> None:
        r"""MarginMSE (Hofstätter et al.): the student's margin between each positive and each hard negative
        regresses the teacher's margin::

            loss = mean_{i, c, j} ( (cos(q_i, d+_ic) − cos(q_i, d−_ij)) − s · (t+_ic − t−_ij) )²

        over the ``K+`` positives ``c`` and ``K−`` hard negatives ``j`` of each row, with the teacher's
        scores ``t`` from the unified ``positive_scores`` / ``negative_scores``. With one positive this is
        sentence-transformers' ``MarginMSELoss`` on several negatives, with cosine student scores instead
        of dot products (this package's models are trained on cosines).

        ``hf-unified-embed mine-negatives`` stores a bi-encoder teacher's cosine as ``(cos + 1) / 2``, so
        teacher margins are half the cosine margins: the default ``s = 2`` undoes that and a student whose
        cosines equal the teacher's has zero loss. For cross-encoder scores (sigmoids) choose ``s`` to
        match the range of the student's cosine margins.

        Args:
            model: The SentenceTransformer model.
            positives_per_query: ``K+``, positive columns after the query (the rest are hard negatives, K− ≥ 1).
            teacher_scale: ``s``, the factor from the stored teacher margins to cosine margins.
            mini_batch_size: Embed in mini-batches of this many rows with gradient caching (GradCache);
                ``None`` embeds the whole batch at once.
            mini_batch_num_tokens: Instead of ``mini_batch_size``, a token budget per mini-batch (rows sorted
                by length, the padded tokens of all columns counted). Either may be ``"auto"``: sized to the
                memory at the first step (see :class:`EmbeddingLoss`).
            mini_batch_memory_budget: Bytes one mini-batch's activations may take, for ``"auto"``.

        References:
            - Hofstätter et al., "Improving Efficient Neural Ranking Models with Cross-Architecture Knowledge
              Distillation" (2020): https://arxiv.org/abs/2010.02666

        Requirements:
            1. Rows with teacher scores for every positive and hard negative (``mine-negatives`` writes them).
            2. At least one hard negative per row (``negatives_per_query`` ≥ 1).

        Inputs:
            +-----------------------------------------------------------------------+-------------------------------------------+
            | Texts                                                                 | Labels                                    |
            +=======================================================================+===========================================+
            | (query, positive_1, ..., positive_K+, negative_1, ..., negative_K−)   | teacher score of each document, (B, K)    |
            +-----------------------------------------------------------------------+-------------------------------------------+

        Relations:
            - :class:`DistillKLLoss` distils the whole score distribution of a query's documents.

        Example:
            ::

                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

                from hf_unified_embed import DistillMarginMSELoss, UnifiedDataCollator, load_unified, losses_for_tasks

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train = load_unified("outputs/mined")  # written by `hf-unified-embed mine-negatives`
                losses = losses_for_tasks(model, train, {"retrieval": DistillMarginMSELoss})
                collator = UnifiedDataCollator.for_losses(model, train, losses, negatives_per_query=4)
                trainer = SentenceTransformerTrainer(
                    model=model, train_dataset=train, loss=losses, data_collator=collator,
                    callbacks=[collator.epoch_callback()],
                )
                trainer.train()
        """
        super().__init__(model, positives_per_query, mini_batch_size, mini_batch_num_tokens, mini_batch_memory_budget)
        if not teacher_scale > 0:
            raise ValueError(f"teacher_scale must be positive, got {teacher_scale}.")
        self.teacher_scale = teacher_scale

    def loss_from_scores(self, student: Tensor, teacher: Tensor) -> Tensor:
        k = self.positives_per_query
        if student.size(1) <= k:
            raise ValueError(f"{type(self).__name__} needs at least one hard negative column after {k} positive(s).")
        student_margins = student[:, :k, None] - student[:, None, k:]  # (batch, K+, K−)
        teacher_margins = (teacher[:, :k, None] - teacher[:, None, k:]) * self.teacher_scale
        return (student_margins - teacher_margins).pow(2).mean()

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        """As for every teacher-score loss, with at least one hard negative of its own per row: a margin needs one."""
        if negatives_per_query < 1:
            raise ValueError(f"{type(self).__name__} needs negatives_per_query >= 1, got {negatives_per_query}.")
        return dataclasses.replace(super().column_layout(task_type, negatives_per_query), hard_negatives=True)

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "positives_per_query": self.positives_per_query,
            "teacher_scale": self.teacher_scale,
            **super().get_config_dict(),
        }

    @property
    def citation(self) -> str:
        return MARGIN_MSE_CITATION
