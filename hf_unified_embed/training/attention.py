"""Bidirectional attention for decoder embedders, through transformers' own switches, kept in every artifact.

BiLLM / AnglE-LLaMA (Li & Li 2023), LLM2Vec (BehnamGhader et al. 2024), NV-Embed (Lee et al. 2024) and
GritLM (Muennighoff et al. 2024) train a decoder LLM as an embedder with the causal mask removed, in
every layer or (BiLLM) from a start layer on. The recipe's ``model.attention: bidirectional`` (and
``model.first_bidirectional_layer``) asks for that on Qwen2, Qwen3, Llama and Mistral
(:data:`BIDIRECTIONAL_MODEL_TYPES`); no modelling code is copied and no ``forward`` is replaced:

* **every layer** (``first_bidirectional_layer: 0``): transformers' own flag ``config.is_causal =
  False`` (transformers >= 5.2). ``create_causal_mask`` then builds the padding-only mask of
  ``create_bidirectional_mask`` (a symmetric window for sliding-window layers), and the model's
  ``merge_with_config_defaults`` hands ``is_causal=False`` to every attention call, which the sdpa and
  flash-attention functions take over the module attribute; eager attention has only the mask. The
  flag is saved in ``config.json``, so any loader with transformers >= 5.2 applies it by itself.
* **from layer k > 0** (BiLLM): the config stays causal. The attention modules from layer ``k`` on
  get ``is_causal = False`` (the attribute transformers' attention functions read), and a forward
  pre-hook on each decoder layer (PyTorch's, not a replaced ``forward``) hands such a layer
  transformers' ``create_bidirectional_mask`` of the call's padding and ``is_causal=False``, as the
  model itself does for every layer under ``is_causal: false``. Layers before ``k`` keep the model's
  causal mask.

The setting is recorded in the transformer's ``config.json`` under :data:`CONFIG_KEY` (``{"attention":
"bidirectional", "first_bidirectional_layer": k}``) and in ``sentence_bert_config.json`` of
:class:`~hf_unified_embed.training.bidirectional_transformer.BidirectionalTransformer`, the
sentence-transformers module that re-applies it when ``SentenceTransformer(path)`` loads the folder
(a LoRA adapter folder has no ``config.json`` of its own: the module's config is what it keeps).

Nothing here imports torch at module level: the recipe's ``model:`` section reads the names first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hf_unified_embed.errors import shown

ATTENTION_MODES = ("causal", "bidirectional")
#: ``model_type`` of the configs whose attention can be switched (transformers 5.21 modelling code:
#: the mask comes from ``create_causal_mask``, each attention module has ``is_causal``). The Gemma
#: family has its own ``use_bidirectional_attention`` config flag instead and is not switched here.
BIDIRECTIONAL_MODEL_TYPES = ("qwen2", "qwen3", "llama", "mistral")
#: The key in the transformer's ``config.json`` that records the setting.
CONFIG_KEY = "hf_unified_embed_attention"


@dataclass(frozen=True)
class AttentionSetting:
    """Causal attention, or bidirectional attention from ``first_bidirectional_layer`` on (0: every layer)."""

    attention: str = "causal"
    first_bidirectional_layer: int = 0

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_MODES:
            raise ValueError(f"attention must be one of {list(ATTENTION_MODES)}, got {shown(self.attention)}")
        first = self.first_bidirectional_layer
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            raise ValueError(f"first_bidirectional_layer must be an integer >= 0, got {shown(first)}")
        if first and not self.bidirectional:
            raise ValueError("first_bidirectional_layer needs attention: bidirectional")

    @property
    def bidirectional(self) -> bool:
        return self.attention == "bidirectional"

    def to_dict(self) -> dict[str, Any]:
        return {"attention": self.attention, "first_bidirectional_layer": self.first_bidirectional_layer}

    @classmethod
    def from_dict(cls, value: Any) -> AttentionSetting:
        if not isinstance(value, dict) or set(value) - {"attention", "first_bidirectional_layer"}:
            raise ValueError(
                f"{CONFIG_KEY} must be {{'attention': ..., 'first_bidirectional_layer': ...}}, got {shown(value)}"
            )
        return cls(**value)

    def __str__(self) -> str:
        if not self.bidirectional:
            return "causal"
        first = self.first_bidirectional_layer
        return "bidirectional" if first == 0 else f"bidirectional from layer {first}"


CAUSAL = AttentionSetting()


def recorded_attention(config: Any) -> AttentionSetting | None:
    """The bidirectional setting a transformers config records, or ``None`` (causal, or nothing said).

    :data:`CONFIG_KEY` first; else transformers' own ``is_causal: false`` (every layer bidirectional).
    Raises ``ValueError`` for a malformed :data:`CONFIG_KEY`.
    """
    value = getattr(config, CONFIG_KEY, None)
    if value is not None:
        setting = AttentionSetting.from_dict(value)
        return setting if setting.bidirectional else None
    if getattr(config, "is_causal", True) is False:
        return AttentionSetting("bidirectional", 0)
    return None


def saved_attention(folders: list[Path]) -> str:
    """The attention a saved model runs, read from the files of ``folders`` (later folders win: a LoRA
    adapter's after its base's): the module's ``sentence_bert_config.json``, else ``config.json``.

    ``causal``, ``bidirectional`` or ``bidirectional from layer k``; for checks that compare models (a merge).
    """
    setting: AttentionSetting | None = None
    for folder in folders:
        for name in ("config.json", "sentence_bert_config.json"):
            try:
                saved = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if not isinstance(saved, dict):
                continue
            try:
                if name == "sentence_bert_config.json" and "attention" in saved:
                    setting = AttentionSetting(saved["attention"], saved.get("first_bidirectional_layer", 0))
                elif name == "config.json":
                    setting = recorded_attention(SimpleNamespace(**saved)) or setting
            except (TypeError, ValueError) as error:
                return f"unreadable ({Path(folder) / name}: {error})"
    return str(setting or CAUSAL)


def unsupported_reason(config: Any, setting: AttentionSetting) -> str | None:
    """Why ``setting`` cannot be applied to a model with transformers config ``config``; ``None`` if it can."""
    model_type = getattr(config, "model_type", None)
    if model_type not in BIDIRECTIONAL_MODEL_TYPES:
        flag = (
            " (its config has its own use_bidirectional_attention flag)"
            if hasattr(config, "use_bidirectional_attention")
            else ""
        )
        return (
            f"attention can be set for {', '.join(BIDIRECTIONAL_MODEL_TYPES)} decoders, "
            f"not for a {shown(model_type)} model{flag}"
        )
    layers = getattr(config, "num_hidden_layers", None)
    first = setting.first_bidirectional_layer
    if isinstance(layers, int) and first >= layers:
        return f"first_bidirectional_layer {first} is past the last layer of this {layers}-layer model (0 to {layers - 1})"
    return None


def decoder_layers(model: Any) -> Any:
    """The decoder layers of a Qwen2 / Qwen3 / Llama / Mistral model (its ``*Model`` or ``*ForCausalLM``)."""
    return getattr(model, "base_model", model).layers


def current_attention(model: Any) -> AttentionSetting:
    """What ``model`` (a transformers model) runs: read back from its attention modules and config."""
    base = getattr(model, "base_model", model)
    layers = getattr(base, "layers", None)
    if layers is None:
        return CAUSAL
    causal = [bool(getattr(layer.self_attn, "is_causal", True)) for layer in layers]
    if getattr(base.config, "is_causal", True) is False:
        return AttentionSetting("bidirectional", 0)
    if all(causal):
        return CAUSAL
    return AttentionSetting("bidirectional", causal.index(False))


def apply_attention(model: Any, setting: AttentionSetting) -> None:
    """Make transformers model ``model`` run ``setting`` (see the module docstring); replaces any earlier one.

    The caller checks :func:`unsupported_reason` first. Records the setting in ``model.config`` (so
    ``save_pretrained`` writes it to ``config.json``); a causal setting removes every trace.
    """
    base = getattr(model, "base_model", model)
    config = base.config
    layers = decoder_layers(base)
    _remove_hooks(layers)
    first = setting.first_bidirectional_layer if setting.bidirectional else len(layers)
    for index, layer in enumerate(layers):
        layer.self_attn.is_causal = index < first
    _delete(config, "is_causal")
    _delete(config, CONFIG_KEY)
    if not setting.bidirectional:
        return
    setattr(config, CONFIG_KEY, setting.to_dict())
    if first == 0:
        config.is_causal = False  # transformers' own switch: masks and attention calls follow it
        return
    for layer in layers:
        layer.register_forward_pre_hook(_use_bidirectional_mask, with_kwargs=True)


def _delete(config: Any, name: str) -> None:
    if name in vars(config):
        delattr(config, name)


def _remove_hooks(layers: Any) -> None:
    for module in layers:
        for handle_id, hook in list(module._forward_pre_hooks.items()):
            if hook is _use_bidirectional_mask:
                del module._forward_pre_hooks[handle_id]
                module._forward_pre_hooks_with_kwargs.pop(handle_id, None)


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
    import torch

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


def _use_bidirectional_mask(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Forward pre-hook of a decoder layer: a bidirectional one (its attention's ``is_causal`` is false) gets
    transformers' ``create_bidirectional_mask`` of the call's padding and ``is_causal=False``.

    A hook on the layer, not on the model: sentence-transformers calls the model's ``forward`` itself,
    which skips the model's own hooks. Everything comes from the layer's own call, so a gradient-
    checkpointing recompute rebuilds the mask of its own batch.
    """
    attention = module.self_attn
    if attention.is_causal:
        return None
    from transformers.masking_utils import create_bidirectional_mask, create_bidirectional_sliding_window_mask

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
