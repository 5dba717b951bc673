"""Qwen2, Qwen3, Llama and Mistral decoders with bidirectional attention, in every layer or from a start layer on.

This file travels with a model trained as a text embedder with the causal mask removed (BiLLM /
AnglE-LLaMA, LLM2Vec, NV-Embed, GritLM). Its ``config.json`` names the classes here and the first
layer that attends both ways::

    "model_type": "bidirectional_qwen2",
    "first_bidirectional_layer": 2,
    "auto_map": {"AutoConfig": "modeling_bidirectional.BidirectionalQwen2Config",
                 "AutoModel": "modeling_bidirectional.BidirectionalQwen2Model"}

so that ``AutoModel.from_pretrained(folder, trust_remote_code=True)`` and
``SentenceTransformer(folder, trust_remote_code=True)`` run the model as it was trained. Without
``trust_remote_code`` transformers does not know the ``model_type`` and refuses to load the folder,
instead of building the causal model of the family. The weights are the family's own (same tensor
names), and the file imports only torch and transformers (>= 5.2).

No modelling code is copied and no ``forward`` is replaced; transformers' own switches do it:

* **every layer** (``first_bidirectional_layer: 0``): the config's ``is_causal = False``, with which the
  model builds the padding-only mask of ``create_bidirectional_mask`` (a symmetric window for
  sliding-window layers) and hands ``is_causal=False`` to every attention call;
* **from layer k > 0** (BiLLM's start index): the attention modules from layer ``k`` on get
  ``is_causal = False``, and a forward pre-hook on each of those decoder layers (PyTorch's) replaces the
  causal mask it receives by ``create_bidirectional_mask`` of the same padding. Layers before ``k``
  keep the causal mask.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import torch
from transformers import (
    LlamaConfig,
    LlamaModel,
    MistralConfig,
    MistralModel,
    Qwen2Config,
    Qwen2Model,
    Qwen3Config,
    Qwen3Model,
)
from transformers.masking_utils import create_bidirectional_mask, create_bidirectional_sliding_window_mask

#: ``model_type`` of a bidirectional config: this prefix and the family's own ``model_type``.
MODEL_TYPE_PREFIX = "bidirectional_"


def set_first_bidirectional_layer(model: Any, first: int | None) -> None:
    """Make decoder ``model`` (a ``*Model`` or ``*ForCausalLM``) attend both ways from layer ``first`` on.

    ``None`` makes every layer causal again; any earlier setting is replaced. Only the attention
    modules, the layers' hooks and the config's ``is_causal`` are touched. A ``first`` outside the model
    raises ``ValueError``: a model is never left causal where it was trained bidirectional.
    """
    base = getattr(model, "base_model", model)
    layers = base.layers
    if first is not None and not (isinstance(first, int) and 0 <= first < len(layers)):
        raise ValueError(
            f"first_bidirectional_layer must be a layer of this {len(layers)}-layer model (0 to {len(layers) - 1}), "
            f"got {first!r}"
        )
    for layer in layers:
        for handle_id, hook in list(layer._forward_pre_hooks.items()):
            if getattr(hook, "__name__", None) == _bidirectional_layer_inputs.__name__:
                del layer._forward_pre_hooks[handle_id]
                layer._forward_pre_hooks_with_kwargs.pop(handle_id, None)
    stop = len(layers) if first is None else first
    for index, layer in enumerate(layers):
        layer.self_attn.is_causal = index < stop
    if "is_causal" in vars(base.config):
        delattr(base.config, "is_causal")
    if first is None:
        return
    if first == 0:
        base.config.is_causal = False  # transformers' own switch: masks and attention calls follow it
        return
    for layer in layers:
        layer.register_forward_pre_hook(_bidirectional_layer_inputs, with_kwargs=True)


def _layer_type(attention_module: Any) -> str:
    config = attention_module.config
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return str(layer_types[attention_module.layer_idx])
    return "sliding_attention" if getattr(config, "sliding_window", None) else "full_attention"


def _padding_of(mask: Any) -> Any:
    """The 2D padding mask (``True``: a real token) behind the causal mask a decoder layer receives.

    The model builds that mask from the padding alone (``create_causal_mask``), so its last query row,
    which the causal pattern leaves whole, is the padding: a boolean row for sdpa, an additive one for
    eager (0 where attended), the 2D mask itself for flash attention; ``None`` where the model skipped
    the mask (sdpa without padding).
    """
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"bidirectional layers from a start layer need eager, sdpa or flash attention, not a {type(mask).__name__} mask"
        )
    if mask.ndim == 2:
        return mask
    row = mask[:, 0, -1, :]
    return row if row.dtype == torch.bool else row == 0


def _bidirectional_layer_inputs(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Forward pre-hook of a decoder layer: a bidirectional one (its attention's ``is_causal`` is false) gets
    ``create_bidirectional_mask`` of the call's padding and ``is_causal=False``.

    A hook on the layer, not on the model: sentence-transformers calls the model's ``forward`` itself,
    which skips the model's own hooks. Everything comes from the layer's own call, so a gradient-
    checkpointing recompute rebuilds the mask of its own batch.
    """
    attention = module.self_attn
    if attention.is_causal:
        return None
    positional_mask = len(args) > 1  # the modelling code passes the mask by name; by position is handled too
    mask = args[1] if positional_mask else kwargs.get("attention_mask")
    hidden_states = args[0] if args else kwargs["hidden_states"]
    create = (
        create_bidirectional_sliding_window_mask
        if _layer_type(attention) == "sliding_attention"
        else create_bidirectional_mask
    )
    bidirectional = create(
        config=attention.config,
        inputs_embeds=hidden_states,  # only its batch size, length, dtype and device are read
        # The padding row spans every key (a cache's too), so no cache is passed: mid-forward, the model's
        # cache already holds this call's keys of the earlier layers.
        attention_mask=_padding_of(mask),
    )
    if positional_mask:
        args = (args[0], bidirectional, *args[2:])
    else:
        kwargs = {**kwargs, "attention_mask": bidirectional}
    return args, {**kwargs, "is_causal": False}


class _BidirectionalConfig:
    """What every bidirectional config adds to its family's: ``first_bidirectional_layer`` (0: every layer),
    and a ``save_pretrained`` that writes this file beside ``config.json`` and names it in ``auto_map``."""

    first_bidirectional_layer: int
    # transformers' own hook: a config class with an auto class copies its module file when it saves.
    _auto_class: ClassVar[str | None] = "AutoConfig"

    def to_diff_dict(self) -> dict[str, Any]:
        diff: dict[str, Any] = super().to_diff_dict()  # type: ignore[misc]
        # Written even at its default: a reader of config.json sees where the causal mask ends.
        diff["first_bidirectional_layer"] = self.first_bidirectional_layer
        model = type(self).__name__.removesuffix("Config") + "Model"
        module = __name__.rsplit(".", 1)[-1]  # this file, wherever transformers imported it from
        diff["architectures"] = [model]
        diff["auto_map"] = {"AutoConfig": f"{module}.{type(self).__name__}", "AutoModel": f"{module}.{model}"}
        return diff


class _BidirectionalDecoder:
    """The family's decoder, bidirectional from ``config.first_bidirectional_layer`` on once built."""

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)  # type: ignore[call-arg]
        set_first_bidirectional_layer(self, config.first_bidirectional_layer)


class BidirectionalQwen2Config(_BidirectionalConfig, Qwen2Config):
    model_type = MODEL_TYPE_PREFIX + "qwen2"
    first_bidirectional_layer: int = 0


class BidirectionalQwen2Model(_BidirectionalDecoder, Qwen2Model):
    config_class = BidirectionalQwen2Config


class BidirectionalQwen3Config(_BidirectionalConfig, Qwen3Config):
    model_type = MODEL_TYPE_PREFIX + "qwen3"
    first_bidirectional_layer: int = 0


class BidirectionalQwen3Model(_BidirectionalDecoder, Qwen3Model):
    config_class = BidirectionalQwen3Config


class BidirectionalLlamaConfig(_BidirectionalConfig, LlamaConfig):
    model_type = MODEL_TYPE_PREFIX + "llama"
    first_bidirectional_layer: int = 0


class BidirectionalLlamaModel(_BidirectionalDecoder, LlamaModel):
    config_class = BidirectionalLlamaConfig


class BidirectionalMistralConfig(_BidirectionalConfig, MistralConfig):
    model_type = MODEL_TYPE_PREFIX + "mistral"
    first_bidirectional_layer: int = 0


class BidirectionalMistralModel(_BidirectionalDecoder, MistralModel):
    config_class = BidirectionalMistralConfig


class Family(NamedTuple):
    """A decoder family's own config and model classes, and their bidirectional subclasses here."""

    config: type[Any]
    model: type[Any]
    bidirectional_config: type[Any]
    bidirectional_model: type[Any]


#: The family's ``model_type`` → its classes.
FAMILIES: dict[str, Family] = {
    "qwen2": Family(Qwen2Config, Qwen2Model, BidirectionalQwen2Config, BidirectionalQwen2Model),
    "qwen3": Family(Qwen3Config, Qwen3Model, BidirectionalQwen3Config, BidirectionalQwen3Model),
    "llama": Family(LlamaConfig, LlamaModel, BidirectionalLlamaConfig, BidirectionalLlamaModel),
    "mistral": Family(MistralConfig, MistralModel, BidirectionalMistralConfig, BidirectionalMistralModel),
}
