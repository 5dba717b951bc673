"""How a bidirectional decoder is kept in a sentence-transformers folder, and loaded back.

A **full model** (trained, merged, or with its LoRA adapter merged) is saved self-contained: its first
module is sentence-transformers' own ``Transformer``, and the transformer's ``config.json`` names the
remote code copied beside it (its decoder's ``Bidirectional*Config`` writes both when it saves).
``SentenceTransformer(path, trust_remote_code=True)`` and ``AutoModel.from_pretrained(path,
trust_remote_code=True)`` then run it bidirectional where this package is not installed; without the
flag transformers refuses the folder's unknown ``model_type``, never building a causal model.

A **LoRA adapter folder** has no ``config.json`` of its own: peft and transformers load its base, which
is causal. It is saved with :class:`BidirectionalTransformer` (import path :data:`CLASS_REF`, a stable
name: saved folders refer to it) and two more keys in ``sentence_bert_config.json``, ``attention`` and
``first_bidirectional_layer``, so the folder runs as trained wherever hf_unified_embed is installed;
elsewhere it does not load at all (:func:`bidirectional_adapter_problem` says why and what to publish
instead). Where the setting cannot be applied (an architecture this transformers cannot switch, a layer
index past the model, a ``config.json`` that records something else) loading stops with one
:class:`~hf_unified_embed.errors.InputError` line instead of running the model causally.

In memory every bidirectional module is a :class:`BidirectionalTransformer`; it picks the form when it
saves (adapter or not). sentence-transformers 6 imports a module class from outside its own package only
when the caller passes ``trust_remote_code=True``: :func:`load_sentence_transformer` passes it for a local
folder only when this package's own code is the only code it would admit.
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
    is_own_remote_code,
    recorded_attention,
    register_bidirectional_classes,
    saved_attention,
    unsupported_reason,
    write_bidirectional_config,
)

#: How ``modules.json`` names this class.
CLASS_REF = "hf_unified_embed.training.bidirectional_transformer.BidirectionalTransformer"
#: How ``modules.json`` names sentence-transformers' own ``Transformer`` (what ``SentenceTransformer.save`` writes).
TRANSFORMER_REF = f"{Transformer.__module__}.{Transformer.__name__}"


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

    def save(self, output_path: str, *args: Any, **kwargs: Any) -> None:
        """Save as an adapter folder that names this class, or, for a full model, in the self-contained form.

        A full model leaves this class for sentence-transformers' own ``Transformer``, so ``modules.json``
        names nothing of this package; its decoder's config (a ``Bidirectional*Config``) keeps the attention
        and saves the remote code. Adding an adapter to it afterwards needs :func:`set_attention
        <hf_unified_embed.training.backbones.set_attention>` again to save it as an adapter folder.
        """
        if has_adapter(self):
            super().save(output_path, *args, **kwargs)
            return
        # The decoder's Bidirectional*Config writes the remote code and names it in config.json by itself.
        self.__class__ = Transformer  # type: ignore[assignment]
        del self.attention, self.first_bidirectional_layer
        self.save(output_path, *args, **kwargs)

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


def make_self_contained(folder: str | Path) -> bool:
    """Rewrite a saved full model whose ``modules.json`` names :class:`BidirectionalTransformer` in the
    self-contained form (sentence-transformers' ``Transformer``, ``config.json`` naming the remote code).

    For folders assembled file by file (a merge of adapter inputs copies the adapter's ``modules.json``
    beside merged weights). Returns whether it rewrote anything; an adapter folder is left as it is.
    """
    folder = Path(folder).expanduser()
    modules_file = folder / "modules.json"
    try:
        entries = json.loads(modules_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    changed = False
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("type") != CLASS_REF:
            continue
        module_dir = folder / str(entry.get("path", ""))
        if (module_dir / "adapter_config.json").is_file():
            continue
        module_config = module_dir / "sentence_bert_config.json"
        settings = json.loads(module_config.read_text(encoding="utf-8"))
        setting = AttentionSetting(
            settings.pop("attention", "bidirectional"), settings.pop("first_bidirectional_layer", 0)
        )
        if setting.bidirectional:
            write_bidirectional_config(module_dir, setting)
        module_config.write_text(json.dumps(settings, indent=4) + "\n", encoding="utf-8")
        entry["type"] = TRANSFORMER_REF
        changed = True
    if changed:
        modules_file.write_text(json.dumps(entries, indent=2), encoding="utf-8")
    return changed


def bidirectional_adapter_problem(folder: str | Path) -> str | None:
    """Why the model folder ``folder`` would run wrong for people without hf_unified_embed; ``None`` when it would not.

    That is a LoRA adapter of a bidirectional decoder: peft and transformers load the adapter's base,
    which is causal, and sentence-transformers cannot import this package's module class. Its merged
    form carries the remote code and loads anywhere with ``trust_remote_code=True``.
    """
    folder = Path(folder).expanduser()
    for module_dir in dict.fromkeys([folder, *(folder / path for path in _module_fields(folder, "path"))]):
        if not (module_dir / "adapter_config.json").is_file():
            continue
        attention = saved_attention([module_dir])
        if attention.startswith("bidirectional"):
            return (
                f"{module_dir} is a LoRA adapter of a decoder with {attention} attention: peft and transformers "
                "load its causal base model, so it runs causal (or, with sentence-transformers, does not load) "
                "without hf-unified-embed; publish the merged model instead (peft.merge_adapter: true in the "
                "recipe), which loads anywhere with trust_remote_code=True"
            )
    return None


def needs_trust_remote_code(folder: str | Path) -> bool:
    """Whether loading the model folder ``folder`` runs code it carries (an ``auto_map`` in a module's
    ``config.json``, as a self-contained bidirectional decoder has): its users pass ``trust_remote_code=True``."""
    folder = Path(folder).expanduser()
    for module_dir in dict.fromkeys([folder, *(folder / path for path in _module_fields(folder, "path"))]):
        try:
            config = json.loads((module_dir / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and config.get("auto_map"):
            return True
    return False


def names_this_class(path: str | Path) -> bool:
    """Whether the ``modules.json`` of folder ``path`` names :class:`BidirectionalTransformer`."""
    return CLASS_REF in _module_fields(Path(path).expanduser(), "type")


def _module_fields(folder: Path, key: str) -> list[str]:
    """Field ``key`` (``type``, ``path``) of every module ``modules.json`` in ``folder`` lists; none if unreadable."""
    try:
        entries = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        return [str(entry.get(key, "")) for entry in entries]
    except (OSError, ValueError, AttributeError, TypeError):
        return []


#: Files whose ``auto_map`` makes transformers import code from the model's repository.
_AUTO_MAP_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")


def other_code(folder: str | Path) -> str | None:
    """What ``trust_remote_code=True`` would let run from local folder ``folder`` besides this package's class;
    ``None`` when nothing: its module classes are sentence-transformers' and :class:`BidirectionalTransformer`,
    and neither it nor an adapter's base holds Python files or an ``auto_map`` (code from the repository)
    other than an unchanged copy of this package's remote code."""
    folder = Path(folder).expanduser()
    others = [
        ref
        for ref in _module_fields(folder, "type")
        if ref != CLASS_REF and not ref.startswith("sentence_transformers.")
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
        scripts = sorted(place.rglob("*.py")) if place.is_dir() else []
        if (script := next((file for file in scripts if not is_own_remote_code(file)), None)) is not None:
            return f"it holds Python code ({script})"
        for name in _AUTO_MAP_FILES:
            try:
                settings = json.loads((place / name).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            auto_map = settings.get("auto_map") if isinstance(settings, dict) else None
            if auto_map and not _names_own_code(place, auto_map):
                return f"{place / name} names repository code (auto_map)"
    return None


def _names_own_code(place: Path, auto_map: Any) -> bool:
    """Whether every class of ``auto_map`` is in this package's remote code, copied unchanged into ``place``."""
    from hf_unified_embed.training.attention import REMOTE_CODE_FILE

    module = REMOTE_CODE_FILE.removesuffix(".py")
    return (
        isinstance(auto_map, dict)
        and all(isinstance(ref, str) and ref.split("--")[-1].startswith(f"{module}.") for ref in auto_map.values())
        and is_own_remote_code(place / REMOTE_CODE_FILE)
    )


def load_sentence_transformer(path: str, **kwargs: Any) -> Any:
    """``SentenceTransformer(path, **kwargs)``, which loads a local folder that names :class:`BidirectionalTransformer`
    without the caller's ``trust_remote_code``, when this package's class is the only code that would run.

    sentence-transformers imports a module class from outside its own package only with
    ``trust_remote_code=True``, a flag that also admits any code the folder brings; here it is passed only
    after :func:`other_code` found none (another module class, a Python file, an ``auto_map``). Otherwise
    the folder is refused in one line, asking for ``trust_remote_code`` explicitly.
    """
    from sentence_transformers import SentenceTransformer

    register_bidirectional_classes()  # a self-contained bidirectional folder then needs no trust_remote_code
    if kwargs.get("trust_remote_code") or not names_this_class(path):
        return SentenceTransformer(path, **kwargs)
    reason = other_code(path)
    if reason is not None:
        raise InputError(
            f"{path}: a bidirectional model loads only with trust_remote_code=True (model.trust_remote_code: true "
            f"in a recipe) here, because {reason}"
        )
    return SentenceTransformer(path, **{**kwargs, "trust_remote_code": True})
