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
  flash-attention functions take over the module attribute; eager attention has only the mask.
* **from layer k > 0** (BiLLM): the config stays causal. The attention modules from layer ``k`` on
  get ``is_causal = False`` (the attribute transformers' attention functions read), and a forward
  pre-hook on each decoder layer (PyTorch's, not a replaced ``forward``) hands such a layer
  transformers' ``create_bidirectional_mask`` of the call's padding and ``is_causal=False``, as the
  model itself does for every layer under ``is_causal: false``. Layers before ``k`` keep the model's
  causal mask.

The mechanism lives in :mod:`hf_unified_embed.training.remote_code.modeling_bidirectional`, a file that
imports only torch and transformers: a full model is saved with it (its ``config.json`` gets the
``model_type`` ``bidirectional_<family>``, ``first_bidirectional_layer`` and an ``auto_map`` naming that
file), so ``AutoModel.from_pretrained(folder, trust_remote_code=True)`` and ``SentenceTransformer(folder,
trust_remote_code=True)`` run it bidirectional without this package, and a plain load without the flag
fails on the unknown ``model_type`` instead of running it causal. In memory the decoder's config becomes
the family's ``Bidirectional*Config`` of that file (:func:`apply_attention`); inside this package they are registered with the Auto
classes (:func:`register_bidirectional_classes`), so the package loads such folders without the flag. A
LoRA adapter folder has no ``config.json`` of its own: the setting is kept in the ``sentence_bert_config.json``
of :class:`~hf_unified_embed.training.bidirectional_transformer.BidirectionalTransformer`, which
re-applies it when the folder loads. Folders of earlier versions record the setting under
:data:`CONFIG_KEY`, which is still read.

Nothing here imports torch at module level: the recipe's ``model:`` section reads the names first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hf_unified_embed.errors import shown

#: ``model_type`` of a saved bidirectional config: this prefix and the family's (the remote code's own constant).
MODEL_TYPE_PREFIX = "bidirectional_"

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

    A ``bidirectional_<family>`` config's ``first_bidirectional_layer``; else :data:`CONFIG_KEY` (folders of
    earlier versions); else transformers' own ``is_causal: false`` (every layer bidirectional). Raises
    ``ValueError`` for a malformed setting.
    """
    if str(getattr(config, "model_type", "")).startswith(MODEL_TYPE_PREFIX):
        return AttentionSetting("bidirectional", getattr(config, "first_bidirectional_layer", 0))
    value = getattr(config, CONFIG_KEY, None)
    if value is not None:
        setting = AttentionSetting.from_dict(value)
        return setting if setting.bidirectional else None
    if getattr(config, "is_causal", True) is False:
        return AttentionSetting("bidirectional", 0)
    return None


def family_of(model_type: Any) -> Any:
    """The decoder family of a ``model_type``: ``bidirectional_qwen2`` is a ``qwen2``; others are themselves."""
    if isinstance(model_type, str) and model_type.startswith(MODEL_TYPE_PREFIX):
        return model_type[len(MODEL_TYPE_PREFIX) :]
    return model_type


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
    model_type = family_of(getattr(config, "model_type", None))
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


def register_bidirectional_classes() -> None:
    """Register the ``bidirectional_<family>`` config and model classes with transformers' Auto classes.

    A saved bidirectional folder then loads in this process without ``trust_remote_code`` (transformers
    prefers registered classes to a folder's own copy of the same file). Idempotent.
    """
    from transformers import AutoConfig, AutoModel

    from hf_unified_embed.training.remote_code.modeling_bidirectional import FAMILIES

    for family in FAMILIES.values():
        AutoConfig.register(family.bidirectional_config.model_type, family.bidirectional_config, exist_ok=True)
        AutoModel.register(family.bidirectional_config, family.bidirectional_model, exist_ok=True)


def apply_attention(model: Any, setting: AttentionSetting) -> None:
    """Make transformers model ``model`` run ``setting`` (see the module docstring); replaces any earlier one.

    The caller checks :func:`unsupported_reason` first. The model's config becomes the family's
    ``Bidirectional*Config`` of the remote code (the model keeps its class: it has no state of its own),
    so ``save_pretrained`` writes the setting into ``config.json``; a causal setting turns it back into
    the family's config. A config of another class records the setting under :data:`CONFIG_KEY`.
    """
    from hf_unified_embed.training.remote_code.modeling_bidirectional import FAMILIES, set_first_bidirectional_layer

    base = getattr(model, "base_model", model)
    config = base.config
    _delete(config, CONFIG_KEY)
    _delete(config, "first_bidirectional_layer")
    family = FAMILIES.get(family_of(config.model_type))
    if family is not None and type(config) is family.bidirectional_config:  # back to the family's config first
        config.__class__ = family.config
    _delete(config, "model_type")  # a loaded config may hold its file's model_type; the class says it
    if not setting.bidirectional:
        set_first_bidirectional_layer(base, None)
        return
    first = setting.first_bidirectional_layer
    if family is not None and type(config) is family.config:
        # The same object, with the class whose model_type and first_bidirectional_layer save the setting.
        config.__class__ = family.bidirectional_config
        config.first_bidirectional_layer = first
    else:
        setattr(config, CONFIG_KEY, setting.to_dict())
    set_first_bidirectional_layer(base, first)


def _delete(config: Any, name: str) -> None:
    if name in vars(config):
        delattr(config, name)


#: The remote-code file a saved bidirectional folder carries (package data of :mod:`~hf_unified_embed.training.remote_code`).
REMOTE_CODE_FILE = "modeling_bidirectional.py"


def write_bidirectional_config(folder: Path, setting: AttentionSetting | None = None) -> None:
    """Make the transformers checkpoint in ``folder`` self-contained: its ``config.json`` names the remote code.

    The config gets the ``bidirectional_<family>`` ``model_type``, ``first_bidirectional_layer`` (from
    ``setting``, else what it records), ``is_causal: false`` for every layer, the ``Bidirectional*Model``
    architecture and an ``auto_map`` for ``AutoConfig`` and ``AutoModel``; :data:`REMOTE_CODE_FILE` is copied
    beside it. The weights are the family's own, so nothing else changes.
    """
    import shutil

    from hf_unified_embed.training.remote_code import REMOTE_CODE_DIR
    from hf_unified_embed.training.remote_code.modeling_bidirectional import FAMILIES

    path = Path(folder) / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    setting = setting or recorded_attention(SimpleNamespace(**config))
    family = FAMILIES.get(family_of(config.get("model_type")))
    if setting is None or not setting.bidirectional or family is None:
        raise ValueError(f"{path}: not a bidirectional {', '.join(BIDIRECTIONAL_MODEL_TYPES)} decoder config")
    config.pop(CONFIG_KEY, None)
    config.pop("is_causal", None)
    module = REMOTE_CODE_FILE.removesuffix(".py")
    config.update(
        model_type=family.bidirectional_config.model_type,
        architectures=[family.bidirectional_model.__name__],
        first_bidirectional_layer=setting.first_bidirectional_layer,
        auto_map={
            "AutoConfig": f"{module}.{family.bidirectional_config.__name__}",
            "AutoModel": f"{module}.{family.bidirectional_model.__name__}",
        },
    )
    if setting.first_bidirectional_layer == 0:
        config["is_causal"] = False
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    shutil.copyfile(REMOTE_CODE_DIR / REMOTE_CODE_FILE, Path(folder) / REMOTE_CODE_FILE)


def is_own_remote_code(file: Path) -> bool:
    """Whether ``file`` is a byte-for-byte copy of the remote code this package writes."""
    from hf_unified_embed.training.remote_code import REMOTE_CODE_DIR

    try:
        return file.name == REMOTE_CODE_FILE and file.read_bytes() == (REMOTE_CODE_DIR / REMOTE_CODE_FILE).read_bytes()
    except OSError:
        return False
