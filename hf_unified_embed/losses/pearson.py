"""Pearson loss (Pcc-tuning, used by CoDiEmb Eq. 4): one minus the correlation of predicted and gold scores."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from hf_unified_embed.losses.common.citations import CODIEMB
from hf_unified_embed.losses.common.input_checks import zero_loss
from hf_unified_embed.losses.common.pair_scores import PairScoreLoss
from hf_unified_embed.losses.embedding_loss import MemoryBudget, MiniBatchOption

# Below this product of the two spreads the correlation is undefined; clamping keeps r = 0 and the gradient finite.
_MIN_SPREAD = 1e-12


class PearsonLoss(PairScoreLoss):
    def __init__(
        self,
        model: nn.Module,
        mini_batch_size: MiniBatchOption = None,
        mini_batch_num_tokens: MiniBatchOption = None,
        mini_batch_memory_budget: MemoryBudget = None,
    ) -> None:
        r"""``1 − r``, where ``r`` is Pearson's correlation between the predicted cosine scores of a batch of
        pairs and their gold similarity scores (CoDiEmb Eq. 4, from Pcc-tuning).

        ``r = Σ (x_i − x̄)(y_i − ȳ) / sqrt(Σ (x_i − x̄)² · Σ (y_i − ȳ)²)`` with ``x_i = cos(f(x1_i), f(x2_i))``.
        The loss lies in ``[0, 2]`` and only sees the batch's *linear* agreement with the labels, so it
        is invariant to any positive affine rescaling of the labels.

        Degenerate batches (a documented definition, not an error):

        - **All labels equal** (including a batch of one row): ``r`` is undefined; the loss is ``0`` with
          a zero gradient (the batch holds no ordering information), as in the official CoDiEmb code.
        - **All predicted scores equal** while the labels differ: the loss is ``1`` (``r`` taken as 0).

        Args:
            model: The SentenceTransformer model.
            mini_batch_size: Embed in mini-batches of this many rows with gradient caching (GradCache): the
                loss still ranks the whole batch, with the same value and gradients. ``None`` embeds the
                whole batch at once.
            mini_batch_num_tokens: Instead of ``mini_batch_size``, a token budget per mini-batch (rows sorted
                by length, the padded tokens of all columns counted). Either may be ``"auto"``: sized to the
                memory at the first step (see :class:`EmbeddingLoss`).
            mini_batch_memory_budget: Bytes one mini-batch's activations may take, for ``"auto"``.

        References:
            - CoDiEmb, Section 2.2, Equation 4: https://github.com/TencentCloudADP/youtu-embedding
            - Pcc-tuning (Zhang and Li, 2024), which introduced the Pearson loss for STS.

        Requirements:
            1. Sentence pairs with float similarity labels (any scale; the package normalises to [0, 1]).
            2. Batches of more than a handful of rows: a correlation over 2-3 pairs is very noisy.

        Inputs:
            +-----------------------------+-------------------------------+
            | Texts                       | Labels                        |
            +=============================+===============================+
            | (sentence1, sentence2)      | float similarity score        |
            +-----------------------------+-------------------------------+

        Relations:
            - :class:`CoDiEmbSTSLoss` combines this loss with :class:`RankKLLoss`, :class:`PROLoss` and
              :class:`MidLayerInfoNCELoss` (default weight 2).

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

                from hf_unified_embed.losses import PearsonLoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train_dataset = Dataset.from_dict({
                    "sentence1": ["A man is playing a guitar.", "A woman is slicing onions.", "Kids play soccer."],
                    "sentence2": ["A man plays the guitar.", "A man is eating pasta.", "Children are playing football."],
                    "score": [0.96, 0.04, 0.84],
                })
                loss = PearsonLoss(model)
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset, loss=loss)
                trainer.train()
        """
        super().__init__(model, mini_batch_size, mini_batch_num_tokens, mini_batch_memory_budget)

    def loss_from_scores(self, scores: Tensor, labels: Tensor) -> Tensor:
        if labels.numel() < 2:
            return zero_loss(scores)
        centred_scores = scores - scores.mean()
        centred_labels = labels - labels.mean()
        spread = torch.sqrt(((centred_scores**2).sum() * (centred_labels**2).sum()).clamp_min(_MIN_SPREAD))
        loss = 1.0 - (centred_scores * centred_labels).sum() / spread
        # Labels all equal: no correlation to learn, 0. Chosen on the device: an ``if`` would read the labels on
        # the host, which on a GPU waits for the forward pass queued before (losses/common/label_values.py).
        return torch.where((labels != labels[0]).any(), loss, zero_loss(scores))

    @property
    def citation(self) -> str:
        return CODIEMB
