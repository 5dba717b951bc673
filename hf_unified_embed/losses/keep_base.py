"""Self-distillation from the frozen base: a task loss plus a term that keeps the base model's in-batch scores."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from sentence_transformers.util import all_gather, get_rank
from torch import Tensor, nn

from hf_unified_embed.errors import shown
from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.losses.common.distributed import all_gather_with_grad
from hf_unified_embed.losses.common.input_checks import as_float
from hf_unified_embed.losses.common.teacher_scores import TeacherScoreLoss
from hf_unified_embed.losses.distill_kl import DistillKLLoss
from hf_unified_embed.losses.embedding_loss import Embedded, EmbeddingLoss, NonNegative
from hf_unified_embed.losses.gradcache.auto_mini_batch import device_of
from hf_unified_embed.losses.gradcache.minibatches import plan_minibatches
from hf_unified_embed.losses.parts import LossOutput, LossParts

LEARNING_WITHOUT_FORGETTING = """
@article{li2017learning,
    title={Learning without Forgetting},
    author={Zhizhong Li and Derek Hoiem},
    journal={IEEE Transactions on Pattern Analysis and Machine Intelligence},
    volume={40},
    number={12},
    pages={2935--2947},
    year={2017},
}
"""

#: The loss part under which the distillation term is logged.
KEEP_BASE = "keep_base"


class KeepBaseLoss(EmbeddingLoss):
    def __init__(
        self,
        loss: EmbeddingLoss,
        weight: NonNegative = 1.0,
        distillation: TeacherScoreLoss | None = None,
        base: nn.Module | str | None = None,
        gather_across_devices: bool | None = None,
    ) -> None:
        r"""A task loss plus self-distillation from the frozen base model, so fine-tuning keeps what the base could do.

        Every query (first column) of a batch is scored against every document of the batch — its own
        positives and hard negatives (mined ones when the rows were mined) and the other rows' — by the
        model being trained (the student) and by a frozen copy of the base model (the teacher). The
        ``distillation`` loss then pulls the student's scores toward the base's, and the total is::

            loss = task_loss + weight · distillation(student scores, base scores)

        This is Learning without Forgetting (Li & Hoiem) for embedding models: the old model's outputs
        on the new data are the targets that hold its behaviour in place, with no data of the old
        tasks and no labels. Unlike LM-Cocktail (a merge after training that needs few-shot data per
        task) it runs inside the ordinary training step. The teacher's cosines enter the distillation
        loss as ``(cos + 1) / 2``, the scale ``hf-unified-embed mine-negatives`` stores, so the
        distillation losses' defaults give zero loss for a student whose cosines equal the base's.

        The scores of query ``i`` are ordered with its own documents first (its positives, then its hard
        negatives), then every other document of the batch, so :class:`DistillMarginMSELoss` reads
        margins between the row's positives and everything else. For a pair task (STS: ``sentence1,
        sentence2``) the candidates are every row's second sentence.

        Cost per step: one more forward pass of the base model (no gradient, no activations kept) over
        every column, and a ``(batch × batch·K)`` score matrix; ``bench/keep_base.py`` measures the ratio.

        Args:
            loss: The task loss (any of this package's losses that embed with the standard
                ``forward``: its columns, labels, gradient caching and extra views are kept).
            weight: The weight of the distillation term.
            distillation: The distillation loss whose ``loss_from_scores(student, teacher)`` compares the
                scores; default :class:`DistillKLLoss` at the task temperature (``τ_s = 0.02``,
                ``τ_t = 0.01`` on the ``(cos + 1) / 2`` scale, so both sides are cosines over 0.02) without
                the ``τ_s²`` factor, i.e. a cross-entropy on the scale of the InfoNCE task loss.
            base: The frozen base model: a ``SentenceTransformer``, a path or Hub id, or ``None`` (default)
                for a copy of ``loss.model`` as it is now — before training, that is the base.
            gather_across_devices: Score each query against the documents of every process (as the task
                loss does with ``gather_across_devices``; default: the task loss's setting), so the
                data-parallel average equals the loss on the concatenated global batch.

        References:
            - Li & Hoiem, Learning without Forgetting: https://arxiv.org/abs/1606.09282
            - LM-Cocktail (the merge-based alternative): https://arxiv.org/abs/2311.13534

        Requirements:
            1. A task loss of this package with the standard ``forward`` (``GURLoss`` has its own).
            2. The same tokenizer for the base and the trained model (a copy of the model has it).

        Inputs:
            +----------------------------------------------+------------------------------+
            | Texts                                        | Labels                       |
            +==============================================+==============================+
            | the task loss's columns (query first)        | the task loss's labels       |
            +----------------------------------------------+------------------------------+

        Relations:
            - :class:`DistillKLLoss` / :class:`DistillMarginMSELoss` distil a stored teacher's scores of the
              row's own documents; here the teacher is the base, computed online, over the whole batch.
            - ``merge search`` with a ``constraint`` is the after-training way to keep the base.

        Example:
            ::

                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

                from hf_unified_embed import KeepBaseLoss, MultiPositiveInfoNCELoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                loss = KeepBaseLoss(MultiPositiveInfoNCELoss(model), weight=1.0)  # the base: a frozen copy
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset, loss=loss)
                trainer.train()  # the checkpoint holds the trained model only
        """
        if not isinstance(loss, EmbeddingLoss) or type(loss).forward is not EmbeddingLoss.forward:
            raise ValueError(
                f"KeepBaseLoss wraps a loss of this package with the standard forward; got {type(loss).__name__}."
            )
        if not weight >= 0:
            raise ValueError(f"weight must be non-negative, got {weight}.")
        super().__init__(loss.model, loss.mini_batch_size, loss.mini_batch_num_tokens, loss.mini_batch_memory_budget)
        self.loss = loss
        self.weight = weight
        if distillation is None:
            distillation = DistillKLLoss(loss.model, scale_by_student_temperature=False)
        if not isinstance(distillation, TeacherScoreLoss):
            raise ValueError(
                f"distillation must be a teacher-score loss (DistillKLLoss, ...), got {shown(distillation)}."
            )
        distillation.positives_per_query = getattr(loss, "positives_per_query", 1)
        self.distillation = distillation
        if base is None:
            base = copy.deepcopy(loss.model)
        elif isinstance(base, str):
            from sentence_transformers import SentenceTransformer

            from hf_unified_embed.utils.model_loading import resolve_model

            base = SentenceTransformer(resolve_model(base), device=str(next(loss.model.parameters()).device))
        base.requires_grad_(False)
        self.base = base.eval()
        if gather_across_devices is None:
            gather_across_devices = bool(getattr(loss, "gather_across_devices", False))
        self.gather_across_devices = gather_across_devices

    @classmethod
    def for_tasks(
        cls,
        task_losses: Mapping[str, nn.Module],
        weight: NonNegative = 1.0,
        distillation: Callable[[nn.Module], TeacherScoreLoss] | None = None,
        base: nn.Module | str | None = None,
    ) -> dict[str, nn.Module]:
        """Wrap every loss of ``{task: loss}`` (as ``losses_for_tasks`` returns) with one shared frozen base.

        Args:
            task_losses: the task losses; all must train the same model.
            weight: the distillation weight of every task.
            distillation: ``f(model)`` building each task's distillation loss (e.g. ``DistillMarginMSELoss``);
                default as in :class:`KeepBaseLoss`.
            base: the frozen base (default: one copy of the model as it is now, shared by all tasks).
        """
        models = {id(loss.model) for loss in task_losses.values() if isinstance(loss, EmbeddingLoss)}
        if len(models) != 1 or not all(isinstance(loss, EmbeddingLoss) for loss in task_losses.values()):
            raise ValueError("KeepBaseLoss.for_tasks needs this package's losses, all on one model.")
        first = next(iter(task_losses.values()))
        assert isinstance(first, EmbeddingLoss)
        if base is None:
            base = copy.deepcopy(first.model)
        elif isinstance(base, str):
            from sentence_transformers import SentenceTransformer

            from hf_unified_embed.utils.model_loading import resolve_model

            base = SentenceTransformer(resolve_model(base), device=str(next(first.model.parameters()).device))
        return {
            task: cls(
                loss,  # type: ignore[arg-type]  # checked above
                weight=weight,
                distillation=distillation(first.model) if distillation is not None else None,
                base=base,
            )
            for task, loss in task_losses.items()
        }

    def train(self, mode: bool = True) -> KeepBaseLoss:
        super().train(mode)
        self.base.eval()  # the teacher never trains: no dropout, whatever the trainer switches
        return self

    def embed(self, sentence_features: list[dict[str, Any]], context: Any, rows: slice | Tensor) -> Embedded:
        return self.loss.embed(sentence_features, context, rows)

    def loss_inputs(self, sentence_features: list[dict[str, Any]]) -> dict[str, Any]:
        return {**self.loss.loss_inputs(sentence_features), "base_embeddings": self.base_embeddings(sentence_features)}

    @torch.no_grad()
    def base_embeddings(self, sentence_features: list[dict[str, Any]]) -> list[Tensor]:
        """The frozen base's embedding of every column (in the task's mini-batches when it has them)."""
        from sentence_transformers.base.losses.merged_forward import embed_columns

        device = device_of(sentence_features)
        parameter = next(self.base.parameters(), None)
        if parameter is not None and parameter.device != device:
            self.base.to(device)
        if not self.uses_gradient_cache:
            return embed_columns(self.base, sentence_features)
        plan = plan_minibatches(sentence_features, *self.mini_batch_sizes(sentence_features, None))
        parts = [embed_columns(self.base, plan.features(sentence_features, index)) for index in range(len(plan))]
        columns = [torch.cat([part[column] for part in parts]) for column in range(len(sentence_features))]
        order = plan.batch_order()
        return columns if order is None else [column.index_select(0, order) for column in columns]

    def compute_loss_from_embeddings(
        self,
        embeddings: list[Tensor],
        labels: Tensor | None,
        base_embeddings: list[Tensor] | None = None,
        **inputs: Any,
    ) -> LossOutput:
        """The task loss on ``embeddings`` plus ``weight`` × the distillation term against ``base_embeddings``."""
        task = self.loss.compute_loss_from_embeddings(embeddings, labels, **inputs)
        if base_embeddings is None:
            raise ValueError("KeepBaseLoss needs the base's embeddings (loss_inputs computes them from the batch).")
        keep = self.weight * self.distillation_term(embeddings, base_embeddings)
        parts = LossParts(task) if isinstance(task, dict) else LossParts({"task": task})
        return parts + {KEEP_BASE: keep}

    def distillation_term(self, student: list[Tensor], base: list[Tensor]) -> Tensor:
        """``distillation.loss_from_scores`` over each query against every document of the (global) batch."""
        if len(student) < 2:
            raise ValueError("KeepBaseLoss needs a query column and at least one document column.")
        student_scores, base_scores = (
            self._ordered_scores(columns, gather=self.gather_across_devices) for columns in (student, base)
        )
        return self.distillation.loss_from_scores(student_scores, (base_scores.detach() + 1) / 2)

    def _ordered_scores(self, columns: list[Tensor], gather: bool) -> Tensor:
        """``(batch, G·K)`` cosines of each query with its own K documents first, then the rest in batch order."""
        queries = F.normalize(as_float(columns[0]), dim=-1)
        documents = torch.stack([as_float(column) for column in columns[1:]], dim=1)  # (batch, K, dim)
        batch, per_row = documents.shape[:2]
        offset = 0
        if gather:
            documents = all_gather_with_grad(documents) if documents.requires_grad else all_gather(documents)
            offset = get_rank() * batch
        scores = queries @ F.normalize(documents.flatten(0, 1), dim=-1).T  # (batch, G·K)
        rows = torch.arange(batch, device=scores.device)
        own = ((rows + offset) * per_row).unsqueeze(1) + torch.arange(per_row, device=scores.device)  # (batch, K)
        is_own = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, own, True)
        others = torch.arange(scores.size(1), device=scores.device).expand_as(scores)[~is_own].view(batch, -1)
        return scores.gather(1, torch.cat([own, others], dim=1))

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        return self.loss.column_layout(task_type, negatives_per_query)

    def get_config_dict(self) -> dict[str, Any]:
        config = super().get_config_dict()  # what "auto" chose: the wrapper runs the gradient cache
        return {
            "loss": type(self.loss).__name__,
            **self.loss.get_config_dict(),
            "keep_base_weight": self.weight,
            "keep_base_distillation": {
                "name": type(self.distillation).__name__,
                **{k: v for k, v in self.distillation.get_config_dict().items() if k != "mini_batch_size"},
            },
            "keep_base_gather_across_devices": self.gather_across_devices,
            **({"mini_batch_chosen": config["mini_batch_chosen"]} if "mini_batch_chosen" in config else {}),
        }

    @property
    def citation(self) -> str:
        return self.loss.citation + LEARNING_WITHOUT_FORGETTING
