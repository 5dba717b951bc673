"""GUR's pre-training objective: span-masked language modelling plus CLIP-style contrastive learning."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
import torch.nn.functional as F
from annotated_types import Gt, Le, Lt
from safetensors import safe_open
from safetensors.torch import save_file
from sentence_transformers.base.losses.merged_forward import merge_feature_batches
from torch import Tensor, nn
from transformers.activations import ACT2FN

from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.losses.common.input_checks import as_float, zero_loss
from hf_unified_embed.losses.common.text_identity import copies_elsewhere, text_ids_of
from hf_unified_embed.losses.embedding_loss import (
    FINAL,
    AtLeastOne,
    Embedded,
    EmbeddingLoss,
    MemoryBudget,
    MiniBatchOption,
    NonNegative,
    Positive,
)
from hf_unified_embed.losses.parts import LossParts

logger = logging.getLogger(__name__)

GUR_CITATION = """
@misc{xue2023gur,
    title={Generate to Understand for Representation},
    author={Changshang Xue and Xiande Zhong and Xiaoqing Liu},
    year={2023},
    url={https://github.com/laohur/GUR},
}
"""

#: File written by :meth:`GURLoss.save_mlm_head` and looked for next to the model's weights.
MLM_HEAD_FILE = "mlm_head.safetensors"
_IGNORE_INDEX = -100
# Where a batch's feature dict keeps its span-masking draw (see GURLoss._masked_columns).
_MASKED = "gur_masked"

# Where pretrained masked-LM heads keep the transform and output bias, by checkpoint family.
_PRETRAINED_HEAD_KEYS = {
    "BERT": {
        "dense.weight": "cls.predictions.transform.dense.weight",
        "dense.bias": "cls.predictions.transform.dense.bias",
        "layer_norm.weight": "cls.predictions.transform.LayerNorm.weight",
        "layer_norm.bias": "cls.predictions.transform.LayerNorm.bias",
        "bias": "cls.predictions.bias",
    },
    "RoBERTa/XLM-R/MPNet": {
        "dense.weight": "lm_head.dense.weight",
        "dense.bias": "lm_head.dense.bias",
        "layer_norm.weight": "lm_head.layer_norm.weight",
        "layer_norm.bias": "lm_head.layer_norm.bias",
        "bias": "lm_head.bias",
    },
}


def hump_geometric(p: float, mode: int, max_span: int) -> Tensor:
    """GUR Eq. 3: ``P(k) ∝ p^|k − mode|`` for span lengths ``k = 1 … max_span``."""
    lengths = torch.arange(1, max_span + 1, dtype=torch.float64)
    weights = p ** (lengths - mode).abs()
    return weights / weights.sum()


def sample_span_mask(maskable: Tensor, mask_ratio: float, span_probs: Tensor, rng: np.random.Generator) -> Tensor:
    """Choose spans covering ``round(mask_ratio · n)`` of each row's ``n`` maskable tokens (at least one).

    Span lengths are drawn from ``span_probs`` (index 0 = length 1) and cut to the remaining budget;
    a span runs over consecutive maskable tokens. Returns a boolean mask shaped like ``maskable``.
    """
    chosen = np.zeros(tuple(maskable.shape), dtype=bool)
    probs = span_probs.numpy()
    for row, flags in enumerate(maskable.cpu().numpy()):
        positions = np.flatnonzero(flags)
        count = positions.size
        if count == 0:
            continue
        budget = max(1, round(mask_ratio * count))
        covered = np.zeros(count, dtype=bool)
        # Overlapping spans add fewer new tokens; the attempt cap only matters for tiny rows.
        for _ in range(8 * budget):
            remaining = budget - int(covered.sum())
            if remaining <= 0:
                break
            length = min(int(rng.choice(probs.size, p=probs)) + 1, remaining, count)
            start = int(rng.integers(0, count - length + 1))
            covered[start : start + length] = True
        chosen[row, positions[covered]] = True
    return torch.from_numpy(chosen).to(maskable.device)


class MaskedLMHead(nn.Module):
    """BERT's prediction head (dense → activation → LayerNorm → vocabulary) with a tied decoder.

    The decoder matrix is the encoder's input embedding matrix, passed in at call time, so the head
    owns only the transform and the output bias.
    """

    def __init__(self, hidden_size: int, vocab_size: int, activation: str = "gelu", layer_norm_eps: float = 1e-12):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = ACT2FN[activation]
        self.layer_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: Tensor, decoder_weight: Tensor) -> Tensor:
        return F.linear(self.layer_norm(self.activation(self.dense(hidden))), decoder_weight, self.bias)


class GURLoss(EmbeddingLoss):
    span_probs: Tensor
    special_ids: Tensor

    def __init__(
        self,
        model: nn.Module,
        mlm_weight: NonNegative = 1.0,
        temperature: Positive = 0.1,
        mask_ratio: Annotated[float, Gt(0), Lt(1)] = 0.15,
        span_p: Annotated[float, Gt(0), Le(1)] = 0.66,
        span_mode: AtLeastOne = 3,
        max_span: AtLeastOne = 10,
        mask_false_negatives: bool = True,
        mini_batch_size: MiniBatchOption = None,
        mini_batch_num_tokens: MiniBatchOption = None,
        mini_batch_memory_budget: MemoryBudget = None,
    ) -> None:
        r"""GUR's joint objective: masked-LM on span-masked inputs plus symmetric in-batch InfoNCE (Eq. 1–3).

        Both sentences of every pair are span-masked: span lengths follow the hump-geometric
        distribution ``P(k) ∝ p^|k − mode|`` (Eq. 3, clipped at ``max_span``) until ``mask_ratio`` of
        each sentence's real tokens (not padding, special or prompt tokens) is covered; each chosen token
        becomes ``[MASK]`` (80%), a random token (10%) or stays (10%), BERT's rule. One forward pass of
        the masked inputs gives

        * the masked-LM loss: cross-entropy of the original tokens at the masked positions only, from
          an MLM head on the token embeddings whose decoder is tied to the input embeddings;
        * the contrastive loss (Eq. 2, CLIP's symmetric form): with ``S_ij = cos(a_i, b_j) / τ`` over
          the pooled sentence embeddings of the ``N`` pairs ``(a_i, b_i)``,
          ``L_CL = ½ (CE(S, diag) + CE(Sᵀ, diag))``.

        ``total = mlm_weight · L_MLM + L_CL`` (Eq. 1 with α = 1/mlm_weight; the paper uses α = 1).
        ``forward`` returns ``{"mlm": mlm_weight · L_MLM, "contrastive": L_CL}``; the trainer sums and
        logs both.

        The MLM head lives in this loss, is trained with it (the trainer optimises loss parameters)
        and is not part of the saved SentenceTransformer; :meth:`save_mlm_head` writes it next to a
        saved model, where a later ``GURLoss`` finds it. It is initialised, in this order, from
        ``mlm_head.safetensors`` in the model folder, from a pretrained MLM head in the checkpoint
        (BERT ``cls.predictions.*``, RoBERTa/XLM-R/MPNet ``lm_head.*``), or else randomly (the tied
        decoder still starts from the pretrained embeddings) — the case for all-MiniLM-L6-v2, whose
        checkpoint is a bare ``BertModel``; a warning says so.

        Args:
            model: A SentenceTransformer whose first module is a ``Transformer`` with a tokenizer that
                has a mask token.
            mlm_weight: Weight of the masked-LM part (1.0 = the paper's α = 1).
            temperature: ``τ`` of Eq. 2; GUR fixes it at 0.1.
            mask_ratio: Share of each sentence's real tokens to mask (15%).
            span_p: ``p`` of the hump-geometric span-length distribution (0.66).
            span_mode: Its most likely span length (3).
            max_span: Longest span (10).
            mask_false_negatives: In the contrastive part, leave a sentence identical to the row's own
                partner sentence out of its denominator (identity read from the unmasked token ids).
            mini_batch_size: Embed in mini-batches of this many rows with gradient caching (GradCache): the
                contrastive part still sees the whole batch (same value and gradients), and the masked-LM
                part, a mean over the masked tokens, is computed mini-batch by mini-batch. ``None`` embeds
                the whole batch at once.
            mini_batch_num_tokens: Instead of ``mini_batch_size``, a token budget per mini-batch (rows sorted
                by length, the padded tokens of all columns counted). Either may be ``"auto"``: sized to the
                memory at the first step (see :class:`EmbeddingLoss`).
            mini_batch_memory_budget: Bytes one mini-batch's activations may take, for ``"auto"``.

        References:
            - GUR: Generate to Understand for Representation, Section III-A/B, Eq. 1–3
              (code: https://github.com/laohur/GUR)
            - SpanBERT (span masking): https://arxiv.org/abs/1907.10529
            - ``docs/gur.md`` for pair mining and where this implementation departs from the paper.

        Requirements:
            1. Pairs of related sentences, e.g. mined from raw documents with
               :func:`hf_unified_embed.gur_pairs.mine_dataset` (``raw-text`` source format).
            2. Few duplicate texts within a batch (in-batch negatives); the miner deduplicates pairs, and
               ``mask_false_negatives`` keeps the remaining ones out of each other's denominators.
            3. A transformer with token embeddings, a tokenizer with a ``[MASK]`` token.

        Inputs:
            +---------------------------------+--------+
            | Texts                           | Labels |
            +=================================+========+
            | (sentence_A, sentence_B) pairs  | none   |
            +---------------------------------+--------+

        Relations:
            - The contrastive part is ``MultipleNegativesSymmetricRankingLoss`` with ``scale = 1/τ``,
              computed on masked inputs; the MLM part is BERT's objective with span masking.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

                from hf_unified_embed.losses import GURLoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train_dataset = Dataset.from_dict({
                    "anchor": ["Spike is chasing Tom.", "北京是中国的首都。"],
                    "positive": ["Spike is chasing Jerry.", "北京有很多名胜古迹。"],
                })
                loss = GURLoss(model)
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset, loss=loss)
                trainer.train()
                loss.save_mlm_head("output/final")  # only when the MLM head should be kept
        """
        super().__init__(model, mini_batch_size, mini_batch_num_tokens, mini_batch_memory_budget)
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}.")
        if not mlm_weight >= 0:
            raise ValueError(f"mlm_weight must be >= 0, got {mlm_weight}.")
        if not 0 < mask_ratio < 1:
            raise ValueError(f"mask_ratio must be in (0, 1), got {mask_ratio}.")
        if not 0 < span_p <= 1:
            raise ValueError(f"span_p must be in (0, 1], got {span_p}.")
        if not 1 <= span_mode <= max_span:
            raise ValueError(f"need 1 <= span_mode <= max_span, got span_mode={span_mode}, max_span={max_span}.")
        self.mlm_weight = mlm_weight
        self.temperature = temperature
        self.mask_ratio = mask_ratio
        self.span_p = span_p
        self.span_mode = span_mode
        self.max_span = max_span
        self.mask_false_negatives = mask_false_negatives
        self.register_buffer("span_probs", hump_geometric(span_p, span_mode, max_span), persistent=False)

        transformer = self._transformer()
        tokenizer = transformer.tokenizer
        if tokenizer.mask_token_id is None:
            raise ValueError(f"GURLoss needs a tokenizer with a mask token; {type(tokenizer).__name__} has none.")
        self.mask_token_id = int(tokenizer.mask_token_id)
        self.register_buffer("special_ids", torch.tensor(sorted(tokenizer.all_special_ids)), persistent=False)
        config = transformer.auto_model.config
        embeddings = transformer.auto_model.get_input_embeddings().weight
        self.mlm_head = MaskedLMHead(
            embeddings.size(1),
            embeddings.size(0),
            getattr(config, "hidden_act", "gelu"),
            getattr(config, "layer_norm_eps", 1e-12),
        ).to(embeddings.device)
        self._init_mlm_head(
            Path(getattr(config, "_name_or_path", "") or "."), getattr(config, "initializer_range", 0.02)
        )

    def _transformer(self) -> Any:
        model = getattr(self.model, "module", self.model)  # DDP-wrapped during distributed training
        for module in model.children():
            if hasattr(module, "auto_model") and hasattr(module, "tokenizer"):
                return module
        raise ValueError("GURLoss needs a SentenceTransformer whose modules include a Transformer (auto_model).")

    def _init_mlm_head(self, folder: Path, initializer_range: float) -> None:
        own = folder / MLM_HEAD_FILE
        if own.is_file():
            with safe_open(str(own), "pt") as handle:
                self.mlm_head.load_state_dict({key: handle.get_tensor(key) for key in handle.keys()})  # noqa: SIM118
            logger.info("GURLoss: MLM head loaded from %s", own)
            return
        for checkpoint in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
            with safe_open(str(checkpoint), "pt") as handle:
                names = list(handle.keys())
                for family, layout in _PRETRAINED_HEAD_KEYS.items():
                    found = {
                        ours: next((n for n in names if n.endswith(theirs)), None) for ours, theirs in layout.items()
                    }
                    if all(found.values()):
                        state = {ours: handle.get_tensor(name) for ours, name in found.items() if name}
                        if state["bias"].shape != self.mlm_head.bias.shape:
                            logger.warning(
                                "GURLoss: %s MLM head in %s has another vocabulary size; not used", family, checkpoint
                            )
                            continue
                        self.mlm_head.load_state_dict(state)
                        logger.info("GURLoss: MLM head initialised from the %s head in %s", family, checkpoint)
                        return
        nn.init.normal_(self.mlm_head.dense.weight, std=initializer_range)
        nn.init.zeros_(self.mlm_head.dense.bias)
        logger.warning(
            "GURLoss: the checkpoint at %s has no pretrained MLM head; the head's transform starts random "
            "(its decoder is tied to the pretrained input embeddings). Expect a high masked-LM loss at first.",
            folder,
        )

    def save_mlm_head(self, output_dir: str | Path) -> Path:
        """Write the MLM head to ``output_dir/mlm_head.safetensors`` (e.g. next to a saved model) and return the path."""
        path = Path(output_dir) / MLM_HEAD_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {key: value.detach().contiguous().cpu() for key, value in self.mlm_head.state_dict().items()}
        temporary = path.with_name(f".{path.name}.tmp")
        save_file(state, str(temporary), metadata={"format": "pt", "written_by": "hf_unified_embed.GURLoss"})
        temporary.replace(path)
        return path

    def mask_features(self, features: dict[str, Tensor], rng: np.random.Generator) -> tuple[dict[str, Tensor], Tensor]:
        """A span-masked copy of tokenized ``features`` and the MLM targets (-100 where nothing is predicted)."""
        input_ids = features["input_ids"]
        maskable = features["attention_mask"].bool() & ~torch.isin(input_ids, self.special_ids)
        if "prompt_length" in features:
            # Prompt (instruction) tokens are context, not text to reconstruct.
            prompt = torch.as_tensor(features["prompt_length"], device=input_ids.device).reshape(-1, 1)
            maskable &= torch.arange(input_ids.size(1), device=input_ids.device) >= prompt
        chosen = sample_span_mask(maskable, self.mask_ratio, self.span_probs.cpu(), rng)
        targets = torch.where(chosen, input_ids, torch.full_like(input_ids, _IGNORE_INDEX))
        # BERT's 80/10/10 rule from one uniform draw per position.
        draw = torch.from_numpy(rng.random(tuple(input_ids.shape))).to(input_ids.device)
        random_tokens = torch.from_numpy(rng.integers(0, self.mlm_head.bias.numel(), tuple(input_ids.shape)))
        corrupted = torch.where(chosen & (draw < 0.8), torch.full_like(input_ids, self.mask_token_id), input_ids)
        corrupted = torch.where(chosen & (draw >= 0.8) & (draw < 0.9), random_tokens.to(input_ids), corrupted)
        return {**features, "input_ids": corrupted}, targets

    def forward(
        self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None
    ) -> dict[str, Tensor]:
        features = list(sentence_features)
        if len(features) != 2:
            raise ValueError(f"GURLoss expects exactly 2 input columns (sentence_A, sentence_B), got {len(features)}.")
        inputs = self.loss_inputs(features)  # identity of the texts before masking
        masked, targets = self._masked_columns(features)
        return self.loss_from_features(masked, labels, inputs, context=targets)  # type: ignore[return-value]

    def _masked_columns(self, features: list[dict[str, Tensor]]) -> tuple[list[dict[str, Tensor]], list[Tensor]]:
        """The span-masked copy of every column and its MLM targets, drawn once per batch.

        The collator tokenizes plain text, so masking happens here; seeding from torch's generator keeps
        runs reproducible under the trainer's seed. The draw is kept in the batch's own feature dicts, so
        a wrapper that calls the loss several times on one batch (``MatryoshkaLoss``, ``AdaptiveLayerLoss``)
        scores the same masked inputs each time (and finds the hidden states it cached in them).
        """
        if not all(_MASKED in column for column in features):
            rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,)).item()))
            for column in features:
                column[_MASKED] = self.mask_features(column, rng)  # type: ignore[assignment]
        drawn: list[tuple[dict[str, Tensor], Tensor]] = [column[_MASKED] for column in features]  # type: ignore[misc]
        return [masked for masked, _ in drawn], [targets for _, targets in drawn]

    def loss_inputs(self, sentence_features: list[dict[str, Any]]) -> dict[str, Any]:
        return {"text_ids": text_ids_of(sentence_features)} if self.mask_false_negatives else {}

    def embed(self, sentence_features: list[dict[str, Any]], context: Any, rows: slice | Tensor) -> Embedded:
        """Sentence embeddings of the masked inputs and the summed masked-LM loss of their masked tokens."""
        # The targets of these rows, cut to the width of their (possibly trimmed) mini-batch.
        targets = [t[rows, : column["input_ids"].size(1)] for t, column in zip(context, sentence_features)]
        merged = merge_feature_batches(sentence_features)
        if merged is not None:
            # Both columns are sentences of the same kind: one forward pass for the whole batch.
            output = self.model(merged)
            width = output["token_embeddings"].size(1)
            target = torch.cat([F.pad(t, (0, width - t.size(1)), value=_IGNORE_INDEX) for t in targets])
            token_embeddings, target_list = [output["token_embeddings"]], [target]
            embeddings = list(output["sentence_embedding"].chunk(2))
        else:
            outputs = [self.model(column) for column in sentence_features]
            token_embeddings = [output["token_embeddings"] for output in outputs]
            target_list = targets
            embeddings = [output["sentence_embedding"] for output in outputs]
        hidden = torch.cat([t[y != _IGNORE_INDEX] for t, y in zip(token_embeddings, target_list)])
        gold = torch.cat([y[y != _IGNORE_INDEX] for y in target_list])
        # Rows with no maskable token (only special tokens) have nothing to reconstruct.
        mlm = self.masked_lm_loss(hidden, gold, reduction="sum") if gold.numel() else zero_loss(token_embeddings[0])
        return Embedded({FINAL: embeddings}, means={"mlm": (self.mlm_weight * mlm, gold.numel())})

    def masked_lm_loss(self, hidden: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
        """Cross-entropy of the MLM head on the hidden states of the masked tokens only (their mean or sum)."""
        weight = self._transformer().auto_model.get_input_embeddings().weight
        logits = self.mlm_head(hidden, weight)
        return F.cross_entropy(as_float(logits), targets, reduction=reduction)

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None = None, text_ids: list[Tensor] | None = None
    ) -> dict[str, Tensor]:
        """The contrastive part (Eq. 2, symmetric) on the two columns' sentence embeddings; ``text_ids`` (one id
        per row and column, equal ids = identical texts) enables the false-negative mask."""
        first, second = (F.normalize(as_float(e), dim=-1) for e in embeddings)
        scores = first @ second.T / self.temperature
        target = torch.arange(scores.size(0), device=scores.device)
        by_row, by_column = scores, scores.T
        if text_ids is not None and self.mask_false_negatives:
            by_row = by_row.masked_fill(copies_elsewhere(text_ids[1]), float("-inf"))
            by_column = by_column.masked_fill(copies_elsewhere(text_ids[0]), float("-inf"))
        return LossParts({"contrastive": (F.cross_entropy(by_row, target) + F.cross_entropy(by_column, target)) / 2})

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        """Sentence pairs without labels: the other pairs of the batch are the negatives."""
        return ColumnLayout.pair()

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "mlm_weight": self.mlm_weight,
            "temperature": self.temperature,
            "mask_ratio": self.mask_ratio,
            "span_p": self.span_p,
            "span_mode": self.span_mode,
            "max_span": self.max_span,
            "mask_false_negatives": self.mask_false_negatives,
            **super().get_config_dict(),
        }

    @property
    def citation(self) -> str:
        return GUR_CITATION
