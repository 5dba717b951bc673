"""CoDiEmb's retrieval loss: InfoNCE with several positives and hard negatives per query (Eq. 2)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from sentence_transformers.util import get_rank
from torch import Tensor, nn

from hf_unified_embed.losses._checks import as_float, require_columns
from hf_unified_embed.losses._citations import CODIEMB
from hf_unified_embed.losses._distributed import all_gather_with_grad
from hf_unified_embed.losses.base import EmbeddingLoss
from hf_unified_embed.losses.columns import ColumnLayout


class MultiPositiveInfoNCELoss(EmbeddingLoss):
    def __init__(
        self,
        model: nn.Module,
        positives_per_query: int = 1,
        temperature: float = 0.02,
        gather_across_devices: bool = False,
    ) -> None:
        r"""InfoNCE with K+ positives and K− hard negatives per query, the retrieval loss of CoDiEmb (Eq. 2).

        Each row holds a query ``q_i``, ``K+`` positive documents and ``K−`` hard negatives. Every positive
        ``d+_ic`` of query ``i`` is its own classification problem::

            loss = -mean_{i,c} log( e^{cos(q_i, d+_ic)/τ} / (e^{cos(q_i, d+_ic)/τ} + Z+_i + Z-_i) )
            Z+_i = Σ_{j≠i} Σ_k e^{cos(q_i, d+_jk)/τ}     (the positives of the *other* queries)
            Z-_i = Σ_j Σ_k e^{cos(q_i, d-_jk)/τ}          (the hard negatives of *every* query)

        A query's other positives are left out of its denominator: they are relevant documents, not
        negatives. With ``gather_across_devices=True`` the documents of all processes join every
        denominator (a differentiable all-gather, so gradients reach the process that embedded them);
        each process scores only its own queries, and the data-parallel gradient average then equals the
        gradient of the loss on the concatenated global batch.

        Args:
            model: The SentenceTransformer model.
            positives_per_query: ``K+``, the number of positive columns after the query column. All
                remaining columns are hard negatives (``K−`` may be 0).
            temperature: ``τ``. CoDiEmb uses 0.02 for retrieval.
            gather_across_devices: Add the documents of every process to the denominators. Needs the same
                batch size and column count on every process in a step (a task-homogeneous sampler with
                ``drop_last``).

        References:
            - CoDiEmb, Section 2.2, Equation 2: https://github.com/TencentCloudADP/youtu-embedding
            - ``docs/losses.md`` of this package for the decisions where the official code differs.

        Requirements:
            1. Rows of one query with ``K+`` positives and ``K−`` hard negatives (the training bridge's
               collator samples them with replacement when a row has fewer).
            2. Task-homogeneous batches: all documents of the batch come from the same corpus.

        Inputs:
            +--------------------------------------------------------------------------+--------+
            | Texts                                                                    | Labels |
            +==========================================================================+========+
            | (query, positive_1, ..., positive_K+, negative_1, ..., negative_K−)      | none   |
            +--------------------------------------------------------------------------+--------+

        Relations:
            - With ``positives_per_query=1`` this is sentence-transformers' ``MultipleNegativesRankingLoss``
              with ``scale = 1/τ``.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

                from hf_unified_embed.losses import MultiPositiveInfoNCELoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train_dataset = Dataset.from_dict({
                    "query": ["what is the capital of france", "who wrote hamlet"],
                    "positive_1": ["Paris is the capital of France.", "Hamlet is a tragedy by Shakespeare."],
                    "positive_2": ["France's capital city is Paris.", "Shakespeare wrote Hamlet around 1600."],
                    "negative_1": ["Lyon is a city in France.", "Macbeth is a play by Shakespeare."],
                })
                loss = MultiPositiveInfoNCELoss(model, positives_per_query=2)
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset, loss=loss)
                trainer.train()
        """
        super().__init__(model)
        if positives_per_query < 1:
            raise ValueError(f"positives_per_query must be at least 1, got {positives_per_query}.")
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}.")
        self.positives_per_query = positives_per_query
        self.temperature = temperature
        self.gather_across_devices = gather_across_devices

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None = None) -> Tensor:
        positives_per_query = self.positives_per_query
        require_columns(
            type(self).__name__,
            embeddings,
            1 + positives_per_query,
            f"query, {positives_per_query} positive(s), then any hard negatives",
        )
        queries = F.normalize(as_float(embeddings[0]), dim=-1)
        positives = torch.stack(embeddings[1 : 1 + positives_per_query], dim=1)  # (batch, K+, dim)
        negatives = embeddings[1 + positives_per_query :]
        batch_size = queries.size(0)
        offset = 0
        if self.gather_across_devices:
            positives = all_gather_with_grad(positives)
            negatives = [all_gather_with_grad(negative) for negative in negatives]
            offset = get_rank() * batch_size

        positives = F.normalize(as_float(positives), dim=-1)
        # (batch, global batch, K+): the score of query i against positive k of row j.
        positive_scores = (queries @ positives.flatten(0, 1).T).view(batch_size, -1, positives_per_query)
        positive_scores = positive_scores / self.temperature
        rows = torch.arange(batch_size, device=queries.device)
        own = positive_scores[rows, rows + offset]  # (batch, K+)
        is_own_row = torch.zeros(positive_scores.shape[:2], dtype=torch.bool, device=queries.device)
        is_own_row[rows, rows + offset] = True
        others = [positive_scores.masked_fill(is_own_row.unsqueeze(-1), float("-inf")).flatten(1)]
        if negatives:
            negative_docs = F.normalize(as_float(torch.cat(negatives)), dim=-1)
            others.append(queries @ negative_docs.T / self.temperature)
        rest = torch.cat(others, dim=1)  # (batch, M): the shared part of every denominator of query i

        # Each positive c of query i: own score against [own score, rest]; the own score keeps the
        # logsumexp finite (and its gradient defined) when `rest` is all -inf (one row, no negatives).
        logits = torch.cat([own.unsqueeze(-1), rest.unsqueeze(1).expand(-1, positives_per_query, -1)], dim=-1)
        return (torch.logsumexp(logits, dim=-1) - own).mean()

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        """The query, ``positives_per_query`` positives and ``negatives_per_query`` hard negatives per row."""
        return ColumnLayout(positives=self.positives_per_query, negatives=negatives_per_query)

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "positives_per_query": self.positives_per_query,
            "temperature": self.temperature,
            "gather_across_devices": self.gather_across_devices,
        }

    @property
    def citation(self) -> str:
        return CODIEMB
