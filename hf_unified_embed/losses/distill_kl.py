"""List-wise distillation: KL divergence between the teacher's and the student's score distributions per query."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from hf_unified_embed.losses.common.teacher_scores import TeacherScoreLoss
from hf_unified_embed.losses.embedding_loss import AtLeastOne, MemoryBudget, MiniBatchOption, Positive
from hf_unified_embed.losses.learns_from import LearnsFrom

RANKING_DISTILLATION_CITATION = """
@inproceedings{ren2021rocketqav2,
    title={RocketQAv2: A Joint Training Method for Dense Passage Retrieval and Passage Re-ranking},
    author={Ruiyang Ren and Yingqi Qu and Jing Liu and Wayne Xin Zhao and Qiaoqiao She and Hua Wu and Haifeng Wang and Ji-Rong Wen},
    booktitle={Proceedings of the 2021 Conference on Empirical Methods in Natural Language Processing},
    year={2021},
}
"""


class DistillKLLoss(TeacherScoreLoss):
    #: What it learns from (:mod:`hf_unified_embed.losses.learns_from`). A distribution over one document is constant: a row needs two documents of its own.
    learns_from = LearnsFrom(candidates=2, recommended_for=("retrieval",))

    def __init__(
        self,
        model: nn.Module,
        positives_per_query: AtLeastOne = 1,
        student_temperature: Positive = 0.02,
        teacher_temperature: Positive = 0.01,
        scale_by_student_temperature: bool = True,
        mini_batch_size: MiniBatchOption = None,
        mini_batch_num_tokens: MiniBatchOption = None,
        mini_batch_memory_budget: MemoryBudget = None,
    ) -> None:
        r"""List-wise knowledge distillation: for each query, the KL divergence from the teacher's softmax over
        its documents to the student's (RocketQAv2's list-wise distillation; FlagEmbedding's
        ``knowledge_distillation`` up to the teacher's entropy, a constant)::

            p_ij = softmax_j(t_ij / τ_t),   q_ij = softmax_j(cos(q_i, d_ij) / τ_s)
            loss = τ_s² · (1 / B) Σ_i Σ_j p_ij (log p_ij − log q_ij)

        over the row's own documents ``d_i1..d_iK`` (``K+`` positives then ``K−`` hard negatives) with the
        teacher's scores ``t_ij`` from the unified ``positive_scores`` / ``negative_scores``. No in-batch
        documents: the teacher has scored only the row's own.

        The ``τ_s²`` factor is sentence-transformers' ``DistillKLDivLoss`` scaling (Hinton et al.'s
        distillation), so the loss, its gradient and a learning rate carry over between the two: this
        loss equals ``DistillKLDivLoss(model, similarity_fct=pairwise_cos_sim, student_temperature=τ_s,
        teacher_temperature=τ_t)`` on the same columns and labels (tested, values and gradients). At a
        small ``τ_s`` it is a small number (0.0004 × the bare KL at 0.02); ``scale_by_student_temperature=False``
        gives the bare KL, a cross-entropy on the scale of an InfoNCE loss at the same temperature (what
        :class:`KeepBaseLoss` adds to a task loss).

        ``hf-unified-embed mine-negatives`` stores a bi-encoder teacher's cosine as ``t = (cos + 1) / 2``,
        so ``softmax(t / τ_t) = softmax(cos / (2 τ_t))``: with the defaults ``τ_t = τ_s / 2`` a student
        whose cosines equal the teacher's has zero loss. For a cross-encoder teacher (``t`` = sigmoid of
        its logit) tune ``τ_t``: smaller sharpens the target.

        Args:
            model: The SentenceTransformer model.
            positives_per_query: ``K+``, positive columns after the query (the rest are hard negatives).
            student_temperature: ``τ_s`` of the student's softmax (0.02, CoDiEmb's retrieval temperature).
            teacher_temperature: ``τ_t`` of the teacher's softmax, on the stored [0, 1] score scale.
            scale_by_student_temperature: Multiply the KL divergence by ``τ_s²`` as sentence-transformers'
                ``DistillKLDivLoss`` does (default); ``False`` leaves the bare KL divergence.
            mini_batch_size: Embed in mini-batches of this many rows with gradient caching (GradCache);
                ``None`` embeds the whole batch at once.
            mini_batch_num_tokens: Instead of ``mini_batch_size``, a token budget per mini-batch (rows sorted
                by length, the padded tokens of all columns counted). Either may be ``"auto"``: sized to the
                memory at the first step (see :class:`EmbeddingLoss`).
            mini_batch_memory_budget: Bytes one mini-batch's activations may take, for ``"auto"``.

        References:
            - RocketQAv2 (Ren et al., 2021), list-wise distillation: https://arxiv.org/abs/2110.07367
            - FlagEmbedding ``knowledge_distillation`` (the bare KL); sentence-transformers' ``DistillKLDivLoss``
              (student and teacher temperatures, dot-product student scores by default, ``τ_s²`` scaling).

        Requirements:
            1. Rows with teacher scores for every positive and hard negative (``mine-negatives`` writes them).
            2. The training bridge's collator, which passes those scores as labels aligned with the drawn columns.

        Inputs:
            +-----------------------------------------------------------------------+-------------------------------------------+
            | Texts                                                                 | Labels                                    |
            +=======================================================================+===========================================+
            | (query, positive_1, ..., positive_K+, negative_1, ..., negative_K−)   | teacher score of each document, (B, K)    |
            +-----------------------------------------------------------------------+-------------------------------------------+

        Relations:
            - :class:`DistillMarginMSELoss` distils score *differences* instead of a distribution.

        Example:
            ::

                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

                from hf_unified_embed import DistillKLLoss, UnifiedDataCollator, load_unified, losses_for_tasks

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train = load_unified("outputs/mined")  # written by `hf-unified-embed mine-negatives`
                losses = losses_for_tasks(model, train, {"retrieval": DistillKLLoss})
                collator = UnifiedDataCollator.for_losses(model, train, losses, negatives_per_query=4)
                trainer = SentenceTransformerTrainer(
                    model=model, train_dataset=train, loss=losses, data_collator=collator,
                    callbacks=[collator.epoch_callback()],
                )
                trainer.train()
        """
        super().__init__(model, positives_per_query, mini_batch_size, mini_batch_num_tokens, mini_batch_memory_budget)
        for name, value in (
            ("student_temperature", student_temperature),
            ("teacher_temperature", teacher_temperature),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value}.")
        self.student_temperature = student_temperature
        self.teacher_temperature = teacher_temperature
        self.scale_by_student_temperature = scale_by_student_temperature

    def loss_from_scores(self, student: Tensor, teacher: Tensor) -> Tensor:
        log_target = F.log_softmax(teacher / self.teacher_temperature, dim=1)
        log_predicted = F.log_softmax(student / self.student_temperature, dim=1)
        loss = F.kl_div(log_predicted, log_target, reduction="batchmean", log_target=True)
        return loss * self.student_temperature**2 if self.scale_by_student_temperature else loss

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "positives_per_query": self.positives_per_query,
            "student_temperature": self.student_temperature,
            "teacher_temperature": self.teacher_temperature,
            "scale_by_student_temperature": self.scale_by_student_temperature,
            **super().get_config_dict(),
        }

    @property
    def citation(self) -> str:
        return RANKING_DISTILLATION_CITATION
