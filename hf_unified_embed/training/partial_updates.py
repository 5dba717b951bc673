"""Which weights move, and how far: frozen lower layers and layer-wise learning-rate decay.

Fine-tuning every weight at one learning rate moves the lower layers — the general lexical and syntactic
features a pre-trained encoder is valued for — as far as the top ones. Two standard levers limit that:

* :func:`freeze_lower_layers` keeps the embeddings and the lowest ``n`` transformer layers at their
  pre-trained values (``requires_grad = False``; the optimizer never sees them);
* :func:`layerwise_lr_mapping` gives each depth its own learning rate, ``lr × decay^(L + 1 − d)`` for
  depth ``d`` (embeddings 0, layer ``i`` at ``i + 1``, what sits above the last layer — a pooler, a final
  norm, a Dense head — at ``L + 1`` with the full rate): layer-wise learning-rate decay as ELECTRA
  (Clark et al., 2020) and BEiT fine-tune. It returns sentence-transformers' own
  ``learning_rate_mapping`` (parameter-name pattern → rate), so the stock trainer builds the optimizer's
  parameter groups.

Depths come from the model itself, for any backbone: the layers are the ``ModuleList`` of
``config.num_hidden_layers`` blocks (``encoder.layer`` in BERT, ``layers`` in Qwen2 and Llama), the
embeddings everything registered before its first block. A LoRA adapter's weights live inside the blocks,
so they decay with their block. The recipe keys are ``model.freeze_layers`` and
``model.layerwise_lr_decay`` (:class:`~hf_unified_embed.training.backbones.ModelConfig`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from torch import nn

from hf_unified_embed.errors import shown


@dataclass(frozen=True)
class Depths:
    """Each trainable weight of a sentence-transformers model by depth: embeddings 0, block ``i`` at ``i + 1``,
    everything above the last block at ``layers + 1``."""

    layers: int
    #: Name prefix of the blocks in ``model.named_parameters()`` (``"0.auto_model.encoder.layer"``).
    block_prefix: str
    #: Full names of the weights below the first block (word, position and type embeddings and their norm).
    embeddings: tuple[str, ...]

    def depth(self, name: str) -> int:
        """The depth of the weight ``name`` (as ``model.named_parameters()`` names it)."""
        if name in self.embeddings:
            return 0
        if name.startswith(self.block_prefix + "."):
            return int(name[len(self.block_prefix) + 1 :].split(".", 1)[0]) + 1
        return self.layers + 1


def _blocks(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The transformer's blocks: the ``ModuleList`` holding ``config.num_hidden_layers`` modules."""
    transformer = model[0].auto_model if isinstance(model, nn.Sequential) else model
    layers = getattr(getattr(transformer, "config", None), "num_hidden_layers", None)
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == layers and len(module) > 0:
            return name, module
    raise ValueError(
        f"no stack of {layers} transformer layers found in {type(transformer).__name__}: freezing lower layers and "
        "layer-wise learning-rate decay need a model whose config states num_hidden_layers"
    )


def model_depths(model: nn.Module) -> Depths:
    """The :class:`Depths` of ``model`` (a ``SentenceTransformer`` or a transformers model)."""
    prefix, blocks = _blocks(model)
    embeddings: list[str] = []
    for name, _ in model.named_parameters():
        if name.startswith(prefix + "."):
            break
        embeddings.append(name)
    return Depths(len(blocks), prefix, tuple(embeddings))


def freeze_lower_layers(model: nn.Module, layers: int) -> list[str]:
    """Freeze the embeddings and the lowest ``layers`` transformer layers of ``model`` (in place).

    Args:
        model: a ``SentenceTransformer`` (or a transformers model).
        layers: how many layers above the embeddings to freeze, ``0 ≤ layers < L`` (``0``: the embeddings
            alone); at least the top layer keeps learning.

    Returns:
        The names of the weights frozen.

    Example::

        model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
        freeze_lower_layers(model, 2)  # embeddings and layers 0-1 keep their pre-trained values
    """
    depths = model_depths(model)
    if isinstance(layers, bool) or not isinstance(layers, int) or not 0 <= layers < depths.layers:
        raise ValueError(
            f"freeze_layers must be an integer from 0 to {depths.layers - 1} (the model has {depths.layers} "
            f"layers; at least the top one trains), got {shown(layers)}"
        )
    frozen = []
    for name, parameter in model.named_parameters():
        if depths.depth(name) <= layers:
            parameter.requires_grad_(False)
            frozen.append(name)
    return frozen


def layerwise_lr_mapping(model: nn.Module, learning_rate: float, decay: float) -> dict[str, float]:
    """sentence-transformers' ``learning_rate_mapping`` for layer-wise learning-rate decay.

    Depth ``d`` trains at ``learning_rate × decay^(L + 1 − d)``: the embeddings at
    ``learning_rate × decay^(L + 1)``, the top layer at ``learning_rate × decay``, what sits above it at
    ``learning_rate`` (it needs no entry). The patterns match the weights wherever the trainer names them
    (each loss holds the model as ``<task>.model.…``).

    Args:
        model: the ``SentenceTransformer`` to train.
        learning_rate: the top rate (``training_args.learning_rate``).
        decay: the factor per layer, ``0 < decay ≤ 1`` (``1``: no decay).

    Example::

        args = SentenceTransformerTrainingArguments(
            "out", learning_rate=2e-5, learning_rate_mapping=layerwise_lr_mapping(model, 2e-5, 0.8)
        )
    """
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 < decay <= 1:
        raise ValueError(f"layerwise_lr_decay must be a number in (0, 1], got {shown(decay)}")
    depths = model_depths(model)
    top = depths.layers + 1
    mapping = {}
    if depths.embeddings:
        names = "|".join(re.escape(name) for name in depths.embeddings)
        mapping[rf"(^|\.)({names})$"] = learning_rate * decay**top
    for layer in range(depths.layers):
        mapping[rf"(^|\.){re.escape(depths.block_prefix)}\.{layer}\."] = learning_rate * decay ** (top - layer - 1)
    return mapping


def apply_partial_updates(model: nn.Module, config: Any, args: Any) -> None:
    """The recipe's ``model.freeze_layers`` and ``model.layerwise_lr_decay``: ``model`` frozen in place, the
    decay written into the run's training arguments ``args`` as their ``learning_rate_mapping``."""
    if config is None:
        return
    if config.freeze_layers is not None:
        freeze_lower_layers(model, config.freeze_layers)
    if config.layerwise_lr_decay is not None:
        args.learning_rate_mapping = layerwise_lr_mapping(model, args.learning_rate, config.layerwise_lr_decay)


def check_partial_updates(recipe: Any, peft_config: Any | None, origin: str) -> None:
    """Refuse, before any data or weight loads, a ``model.freeze_layers`` / ``model.layerwise_lr_decay`` that
    cannot do what it says: a layer count past the base model's, freezing beside LoRA (which trains only
    its adapters already), and a decay beside a ``training_args.learning_rate_mapping`` of the user's own."""
    from hf_unified_embed.errors import RecipeError

    config = recipe.model
    if config is None or (config.freeze_layers is None and config.layerwise_lr_decay is None):
        return
    if config.freeze_layers is not None and peft_config is not None:
        raise RecipeError(
            f"{origin}: model.freeze_layers: with peft the base weights stay frozen and only the LoRA adapters "
            "train; to keep adapters out of the lower layers use peft.layers_to_transform"
        )
    if config.layerwise_lr_decay is not None and recipe.training_args.get("learning_rate_mapping"):
        raise RecipeError(
            f"{origin}: model.layerwise_lr_decay sets training_args.learning_rate_mapping; give one of the two"
        )
    if config.freeze_layers is None:
        return
    from transformers import AutoConfig

    from hf_unified_embed.training.backbones import transformer_folder

    try:
        layers = AutoConfig.from_pretrained(transformer_folder(recipe.resolved_base_model())).num_hidden_layers
    except (OSError, ValueError, AttributeError):  # not readable here (offline, no config): the load reports it
        return
    if config.freeze_layers >= layers:
        raise RecipeError(
            f"{origin}: model.freeze_layers: {config.freeze_layers} freezes every layer of the base model, which "
            f"has {layers}; give at most {layers - 1} so that the top layer trains"
        )
