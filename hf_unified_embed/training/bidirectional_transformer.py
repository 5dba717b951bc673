"""The sentence-transformers module of a bidirectional decoder: re-applies the attention when the folder loads.

``SentenceTransformer(path)`` builds each module from the class ``modules.json`` names, by import path,
and passes it the keys of the module's ``sentence_bert_config.json``. A model trained with
``model.attention: bidirectional`` is saved with this class (import path :data:`CLASS_REF`, a stable
name: saved folders refer to it) and two more keys in that file, ``attention`` and
``first_bidirectional_layer``, so the folder runs the decoder exactly as it was trained wherever
hf_unified_embed is installed — a LoRA adapter folder included, whose ``config.json`` is its causal
base's. Where the setting cannot be applied (an architecture this transformers cannot switch, a layer
index past the model, a ``config.json`` that records something else) loading stops with one
:class:`~hf_unified_embed.errors.InputError` line instead of running the model causally.

sentence-transformers 6 imports a module class from outside its own package only when the caller
passes ``trust_remote_code=True``: such a folder loads with ``SentenceTransformer(path,
trust_remote_code=True)`` or with :func:`load_sentence_transformer` (which passes the flag for a local
folder only when this class is the only code it would admit); a plain ``SentenceTransformer(path)`` stops with sentence-transformers' own error, never
with a causal model. A full model that is bidirectional in every layer needs neither:
:func:`plain_transformer_module` makes its module a stock ``Transformer``, and transformers applies
the ``is_causal: false`` its ``config.json`` records by itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sentence_transformers.base.modules import Transformer

from hf_unified_embed.errors import InputError
from hf_unified_embed.training.attention import (
    AttentionSetting,
    apply_attention,
    recorded_attention,
    unsupported_reason,
)

#: How ``modules.json`` names this class.
CLASS_REF = "hf_unified_embed.training.bidirectional_transformer.BidirectionalTransformer"


class BidirectionalTransformer(Transformer):
    """sentence-transformers' ``Transformer`` whose decoder runs bidirectional attention (from a start layer).

    Args:
        model_name_or_path: as for ``Transformer``.
        attention: ``bidirectional`` (the class exists for it; ``causal`` is accepted for completeness).
        first_bidirectional_layer: layers before it stay causal (BiLLM's start index); 0: every layer.
        **kwargs: ``Transformer``'s own arguments.
    """

    # sentence-transformers declares it as a plain list attribute
    config_keys: list[str] = [*Transformer.config_keys, "attention", "first_bidirectional_layer"]  # noqa: RUF012

    def __init__(
        self,
        model_name_or_path: str,
        *,
        attention: str = "bidirectional",
        first_bidirectional_layer: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(model_name_or_path, **kwargs)
        try:
            setting = AttentionSetting(attention, first_bidirectional_layer)
            self._recorded_attention = recorded_attention(self.model.config)
        except ValueError as error:
            raise InputError(f"{model_name_or_path}: {error}") from None
        self.set_attention(setting, origin=model_name_or_path)

    @property
    def attention_setting(self) -> AttentionSetting:
        return AttentionSetting(self.attention, self.first_bidirectional_layer)

    def set_attention(self, setting: AttentionSetting, *, origin: str = "model") -> None:
        """Run ``setting`` from now on (and save it with the module)."""
        reason = unsupported_reason(self.model.config, setting)
        if reason is not None:
            raise InputError(f"{origin}: {setting} attention cannot be applied: {reason}")
        apply_attention(self.model, setting)
        self.attention = setting.attention
        self.first_bidirectional_layer = setting.first_bidirectional_layer

    @classmethod
    def load(cls, model_name_or_path: str, *args: Any, **kwargs: Any) -> BidirectionalTransformer:
        """As ``Transformer.load``; a ``config.json`` that records another bidirectional setting is refused."""
        module = super().load(model_name_or_path, *args, **kwargs)
        recorded = module._recorded_attention
        if recorded is not None and recorded != module.attention_setting:
            raise InputError(
                f"{model_name_or_path}: config.json records {recorded} attention, sentence_bert_config.json "
                f"{module.attention_setting}; one of them was edited — make them agree"
            )
        return module

    @classmethod
    def from_transformer(cls, module: Transformer, setting: AttentionSetting, *, origin: str = "model") -> Transformer:
        """``module`` (a loaded ``Transformer``) running ``setting``, in place: a causal setting gives back a plain
        ``Transformer`` (nothing of this package is needed to load it), a bidirectional one this class."""
        if not setting.bidirectional:
            apply_attention(module.model, setting)
            if isinstance(module, cls):
                module.__class__ = Transformer
                del module.attention, module.first_bidirectional_layer
            return module
        module.__class__ = cls  # the same object and weights, with this class's saving and loading
        module.set_attention(setting, origin=origin)  # type: ignore[attr-defined]
        return module


def has_adapter(module: Transformer) -> bool:
    """Whether the transformers model of ``module`` carries a PEFT adapter (it then saves as an adapter folder)."""
    return bool(getattr(module.model, "_hf_peft_config_loaded", False))


def plain_transformer_module(model: Any) -> bool:
    """Make the first module of ``model`` a stock ``Transformer`` where ``config.json`` alone keeps its attention.

    That is a full model (no adapter) bidirectional in every layer: transformers applies the
    ``is_causal: false`` it records on every load, so the saved folder loads with a plain
    ``SentenceTransformer(path)``, even where hf_unified_embed is not installed. Returns whether it did;
    any other model is left as it is (an adapter folder or a start layer needs this class to load).
    """
    module = model[0]
    if not isinstance(module, BidirectionalTransformer) or has_adapter(module):
        return False
    if module.attention_setting.first_bidirectional_layer != 0:
        return False
    module.__class__ = Transformer
    del module.attention, module.first_bidirectional_layer
    return True


def names_this_class(path: str | Path) -> bool:
    """Whether the ``modules.json`` of folder ``path`` names :class:`BidirectionalTransformer`."""
    return CLASS_REF in _module_classes(Path(path).expanduser())


def _module_classes(folder: Path) -> list[str]:
    try:
        entries = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        return [str(entry.get("type", "")) for entry in entries]
    except (OSError, ValueError, AttributeError, TypeError):
        return []


#: Files whose ``auto_map`` makes transformers import code from the model's repository.
_AUTO_MAP_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")


def other_code(folder: str | Path) -> str | None:
    """What ``trust_remote_code=True`` would let run from local folder ``folder`` besides this package's class;
    ``None`` when nothing: its module classes are sentence-transformers' and :class:`BidirectionalTransformer`,
    and neither it nor an adapter's base holds Python files or an ``auto_map`` (code from the repository)."""
    folder = Path(folder).expanduser()
    others = [
        ref for ref in _module_classes(folder) if ref != CLASS_REF and not ref.startswith("sentence_transformers.")
    ]
    if others:
        return f"its modules.json names {others[0]}"
    folders = [folder]
    try:
        base = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))["base_model_name_or_path"]
    except (OSError, ValueError, KeyError, TypeError):
        base = None
    if base is not None:
        if not Path(base).expanduser().is_dir():
            return f"its adapter's base {base} is not a local folder to look into"
        folders.append(Path(base).expanduser())
    for place in folders:
        if place.is_dir() and (script := next(iter(sorted(place.rglob("*.py"))), None)) is not None:
            return f"it holds Python code ({script})"
        for name in _AUTO_MAP_FILES:
            try:
                settings = json.loads((place / name).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(settings, dict) and settings.get("auto_map"):
                return f"{place / name} names repository code (auto_map)"
    return None


def load_sentence_transformer(path: str, **kwargs: Any) -> Any:
    """``SentenceTransformer(path, **kwargs)``, which loads a local folder that names :class:`BidirectionalTransformer`
    without the caller's ``trust_remote_code``, when this package's class is the only code that would run.

    sentence-transformers imports a module class from outside its own package only with
    ``trust_remote_code=True``, a flag that also admits any code the folder brings; here it is passed only
    after :func:`other_code` found none (another module class, a Python file, an ``auto_map``). Otherwise
    the folder is refused in one line, asking for ``trust_remote_code`` explicitly.
    """
    from sentence_transformers import SentenceTransformer

    if kwargs.get("trust_remote_code") or not names_this_class(path):
        return SentenceTransformer(path, **kwargs)
    reason = other_code(path)
    if reason is not None:
        raise InputError(
            f"{path}: a bidirectional model loads only with trust_remote_code=True (model.trust_remote_code: true "
            f"in a recipe) here, because {reason}"
        )
    return SentenceTransformer(path, **{**kwargs, "trust_remote_code": True})
