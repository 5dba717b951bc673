"""Sentence embeddings of an intermediate Transformer layer, taken from the same forward pass as the final ones.

The model is not reloaded with ``output_hidden_states=True``: the flag is switched on for the duration of
the forward pass only (as sentence-transformers' ``AdaptiveLayerLoss`` does), and the chosen layer's token
embeddings are sent through the model's own post-Transformer modules (pooling, normalisation, ...).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sentence_transformers.base.losses.merged_forward import merge_feature_batches
from sentence_transformers.base.model import BaseModel
from sentence_transformers.base.modules import Transformer
from torch import Tensor, nn


def unwrap_model(model: nn.Module) -> BaseModel:
    """The sentence-transformers model inside DDP (``.module``) or ``torch.compile`` (``._orig_mod``) wrappers."""
    unwrapped: Any = model
    while not isinstance(unwrapped, BaseModel):
        if hasattr(unwrapped, "_orig_mod"):
            unwrapped = unwrapped._orig_mod
        elif hasattr(unwrapped, "module"):
            unwrapped = unwrapped.module
        else:
            raise TypeError(
                f"Cannot reach the sentence-transformers model inside {type(model).__name__}; intermediate-layer "
                "losses need a SentenceTransformer (optionally wrapped by DDP or torch.compile)."
            )
    return unwrapped


def _forward_with_hidden_states(
    model: nn.Module, transformer: Transformer, features: dict[str, Any]
) -> dict[str, Any]:
    config = transformer.auto_model.config
    original = config.output_hidden_states
    config.output_hidden_states = True
    try:
        return model(features)
    finally:
        config.output_hidden_states = original


def embed_columns_with_layer(
    model: nn.Module, sentence_features: Iterable[dict[str, Any]], layer: int | None
) -> tuple[list[Tensor], list[Tensor]]:
    """Final and intermediate-layer sentence embeddings of every column.

    Args:
        model: The (possibly DDP-wrapped) SentenceTransformer whose first module is a ``Transformer``.
        sentence_features: One tokenised feature dict per input column.
        layer: Index into the Transformer's hidden states (0 is the embedding layer, -1 the last layer);
            ``None`` picks ``len(hidden_states) // 2`` like the CoDiEmb code.

    Returns:
        ``(final, intermediate)``: one ``(batch, dim)`` tensor per column in each list.
    """
    unwrapped = unwrap_model(model)
    modules = list(unwrapped.children())
    transformer = modules[0]
    if not isinstance(transformer, Transformer):
        raise TypeError(
            f"Intermediate-layer losses need a Transformer as the model's first module, got {type(transformer).__name__}."
        )
    columns = list(sentence_features)
    merged = merge_feature_batches(columns) if len(columns) > 1 else None
    batches = [merged] if merged is not None else columns

    finals: list[Tensor] = []
    intermediates: list[Tensor] = []
    for features in batches:
        output = _forward_with_hidden_states(model, transformer, features)
        hidden_states = output.get("all_layer_embeddings")
        if hidden_states is None:
            raise RuntimeError(
                f"{type(transformer.auto_model).__name__} returned no hidden states although output_hidden_states "
                "was switched on; this architecture cannot serve an intermediate-layer loss."
            )
        index = len(hidden_states) // 2 if layer is None else layer
        if not -len(hidden_states) <= index < len(hidden_states):
            raise ValueError(
                f"layer={layer} is out of range: the model has {len(hidden_states)} hidden states "
                f"(0 = embeddings, {len(hidden_states) - 1} = last layer)."
            )
        layer_features = {
            key: value for key, value in output.items() if key not in ("sentence_embedding", "all_layer_embeddings")
        }
        layer_features["token_embeddings"] = hidden_states[index]
        for module in modules[1:]:
            layer_features = module(layer_features)
        finals.append(output["sentence_embedding"])
        intermediates.append(layer_features["sentence_embedding"])

    if merged is not None:
        return list(finals[0].chunk(len(columns))), list(intermediates[0].chunk(len(columns)))
    return finals, intermediates
