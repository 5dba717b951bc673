"""Backbones as the recipe's ``model:`` section describes them — encoders and decoder LLMs alike.

The model is always sentence-transformers' own ``Transformer`` + ``Pooling`` (+ ``Normalize``), so
a trained folder loads with a plain ``SentenceTransformer(path)``. What an LLM embedder needs on top
(Qwen3-Embedding, NV-Embed, GritLM, AnglE-LLaMA) is configuration:

* ``pooling``: ``mean`` (CoDiEmb, INSTRUCTOR), ``lasttoken`` (decoders: the last real token has seen
  the whole text) or ``cls``;
* ``padding_side``: decoders usually pad on the left; instruction tokens stay out of pooling either way
  (sentence-transformers' ``Pooling`` masks padding + prompt from the first real token);
* ``append_eos``: with last-token pooling the pooled token should be an EOS appended to every text,
  not the text's last word. The tokenizer's post-processor is changed, so the saved ``tokenizer.json``
  does it at inference too;
* ``torch_dtype``, ``attn_implementation``, ``gradient_checkpointing`` and k-bit ``quantization``
  (QLoRA; needs ``bitsandbytes`` and a CUDA device);
* ``attention``: ``bidirectional`` removes the causal mask of a Qwen2 / Qwen3 / Llama / Mistral decoder
  (BiLLM, LLM2Vec, NV-Embed, GritLM), from ``first_bidirectional_layer`` on; the saved folder carries
  the modelling code that re-applies it when it loads, with or without this package
  (:mod:`hf_unified_embed.training.attention`). Pooling then defaults to ``mean``.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hf_unified_embed.errors import RecipeError, shown
from hf_unified_embed.training.attention import ATTENTION_MODES, AttentionSetting
from hf_unified_embed.utils.model_files import model_files_problem

logger = logging.getLogger(__name__)

POOLING_MODES = ("mean", "lasttoken", "cls", "max", "weightedmean")
PADDING_SIDES = ("left", "right")
TORCH_DTYPES = ("auto", "float32", "bfloat16", "float16")
ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2")
QUANTIZATIONS = ("4bit", "8bit")


@dataclass
class ModelConfig:
    """The recipe's ``model:`` section; every field left ``None`` keeps what the base model has.

    Args:
        pooling: ``mean``, ``lasttoken``, ``cls``, ``max`` or ``weightedmean`` (default: the base
            model's pooling; ``mean`` for a plain transformers checkpoint).
        padding_side: ``left`` or ``right`` (default: the tokenizer's).
        append_eos: append the tokenizer's EOS token to every text (default: on for ``lasttoken``).
        torch_dtype: ``float32``, ``bfloat16``, ``float16`` or ``auto`` (the checkpoint's).
        attn_implementation: ``eager``, ``sdpa`` or ``flash_attention_2``.
        gradient_checkpointing: recompute activations in the backward pass (less memory, ~30% more time).
        normalize: add a ``Normalize`` module (unit-length embeddings, dot product = cosine).
        quantization: ``4bit`` or ``8bit`` k-bit loading for QLoRA (needs ``bitsandbytes`` and CUDA).
        trust_remote_code: allow the checkpoint's own modelling code.
        attention: ``causal`` or ``bidirectional`` (Qwen2, Qwen3, Llama, Mistral decoders; default: what
            the base model records, causal for a plain checkpoint). Sets the default pooling: ``mean``
            for bidirectional, ``lasttoken`` for causal.
        first_bidirectional_layer: with ``attention: bidirectional``, the first layer without the causal
            mask; the layers before it stay causal (BiLLM's start index; default 0: every layer).
        freeze_layers: keep the embeddings and the lowest N transformer layers at their pre-trained values
            (``0``: the embeddings alone; :func:`~hf_unified_embed.training.partial_updates.freeze_lower_layers`).
        layerwise_lr_decay: train depth ``d`` at ``learning_rate × decay^(L + 1 − d)``, the top layer fastest
            (:func:`~hf_unified_embed.training.partial_updates.layerwise_lr_mapping`).
    """

    pooling: str | None = None
    padding_side: str | None = None
    append_eos: bool | None = None
    torch_dtype: str | None = None
    attn_implementation: str | None = None
    gradient_checkpointing: bool = False
    normalize: bool = False
    quantization: str | None = None
    trust_remote_code: bool = False
    attention: str | None = None
    first_bidirectional_layer: int | None = None
    freeze_layers: int | None = None
    layerwise_lr_decay: float | None = None

    def __post_init__(self) -> None:
        for name, allowed in (
            ("pooling", POOLING_MODES),
            ("padding_side", PADDING_SIDES),
            ("torch_dtype", TORCH_DTYPES),
            ("attn_implementation", ATTENTION_IMPLEMENTATIONS),
            ("quantization", QUANTIZATIONS),
            ("attention", ATTENTION_MODES),
        ):
            value = getattr(self, name)
            if value is not None and value not in allowed:
                raise ValueError(f"{name} must be one of {list(allowed)}, got {shown(value)}")
        if self.first_bidirectional_layer is not None:
            if self.attention != "bidirectional":
                raise ValueError("first_bidirectional_layer needs attention: bidirectional")
            self.attention_setting  # noqa: B018 -- the value's own check (an integer >= 0)
        if self.freeze_layers is not None and (
            isinstance(self.freeze_layers, bool) or not isinstance(self.freeze_layers, int) or self.freeze_layers < 0
        ):
            raise ValueError(f"freeze_layers must be an integer >= 0, got {shown(self.freeze_layers)}")
        decay = self.layerwise_lr_decay
        if decay is not None and (
            isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 < decay <= 1
        ):
            raise ValueError(f"layerwise_lr_decay must be a number in (0, 1], got {shown(decay)}")

    @property
    def attention_setting(self) -> AttentionSetting | None:
        """The attention asked for; ``None`` keeps what the base model records."""
        if self.attention is None:
            return None
        return AttentionSetting(self.attention, self.first_bidirectional_layer or 0)

    @property
    def resolved_pooling(self) -> str | None:
        """``pooling``, else the default of the attention asked for (``None``: the base model's pooling)."""
        if self.pooling is not None or self.attention is None:
            return self.pooling
        return "mean" if self.attention == "bidirectional" else "lasttoken"

    @property
    def wants_eos(self) -> bool:
        return self.append_eos if self.append_eos is not None else self.resolved_pooling == "lasttoken"

    def model_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``AutoModel.from_pretrained``."""
        import torch

        kwargs: dict[str, Any] = {}
        if self.torch_dtype is not None:
            kwargs["torch_dtype"] = (
                self.torch_dtype if self.torch_dtype == "auto" else getattr(torch, self.torch_dtype)
            )
        if self.attn_implementation is not None:
            kwargs["attn_implementation"] = self.attn_implementation
        if self.quantization is not None:
            from transformers import BitsAndBytesConfig

            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=self.quantization == "4bit",
                load_in_8bit=self.quantization == "8bit",
                bnb_4bit_compute_dtype=torch.bfloat16,
                bnb_4bit_quant_type="nf4",
            )
        return kwargs

    def check_environment(self, origin: str) -> None:
        """Refuse options whose backend is missing, before anything loads."""
        if self.quantization is None:
            return
        import torch

        from hf_unified_embed.utils import stack

        stack.check(
            f"model.quantization {shown(self.quantization)} (QLoRA)", stack.quantization_needs(), origin=origin
        )
        if not torch.cuda.is_available():
            raise RecipeError(
                f"{origin}: model.quantization {shown(self.quantization)} (QLoRA) needs a CUDA device; run it on a GPU "
                "machine or remove model.quantization"
            )


@contextlib.contextmanager
def without_cudnn_attention() -> Iterator[None]:
    """Keep PyTorch's cuDNN attention kernel out of a training run on CUDA; restore the setting afterwards.

    Since torch 2.11, the cuDNN backend of ``scaled_dot_product_attention`` (the default for bf16/fp16
    on Hopper GPUs) can return NaN query gradients when an attention mask is passed — which every padded
    batch does (pytorch/pytorch#196678, huggingface/trl#7181). Measured on an H100 with torch 2.11: a
    Qwen2 embedder trained in bf16 with left padding had a NaN gradient norm within its first ten steps
    and saved an all-NaN model, under plain ``train`` and under FSDP alike, while the same runs in
    float32 were clean. With the cuDNN kernel off, PyTorch picks its memory-efficient kernel, which is
    correct for these masks and about as fast at embedding-model shapes.
    """
    import torch

    if not torch.cuda.is_available():
        yield
        return
    enabled = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(enabled)


def is_sentence_transformers_folder(path: str) -> bool:
    return (Path(path).expanduser() / "modules.json").is_file()


#: A folder :func:`build_model` can load holds one of these: a sentence-transformers model, a transformers
#: checkpoint, a PEFT adapter (whose config names its base).
MODEL_FOLDER_FILES = ("modules.json", "config.json", "adapter_config.json")


def model_folder_problem(base: str) -> str | None:
    """Why the local path ``base`` is not a model folder :func:`build_model` can load; ``None`` when it may be one
    (or does not exist, which the caller reports). Only its files are looked at: nothing is imported or loaded."""
    path = Path(base).expanduser()
    if not path.exists():
        return None
    if not path.is_dir():
        return "is a file, not a model folder"
    if not any((path / name).is_file() for name in MODEL_FOLDER_FILES):
        dataset = (path / "README.md").is_file() and (path / "data").is_dir()
        hint = "; it looks like a unified dataset folder, which goes under data.path" if dataset else ""
        return (
            "is not a model folder: it has no modules.json (sentence-transformers), config.json (transformers) "
            f"or adapter_config.json (PEFT adapter){hint}"
        )
    config = Path(transformer_folder(base)) / "config.json"
    if config.is_file():
        try:
            settings = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            return f"is not a model folder: {config} is not JSON ({error})"
        if not isinstance(settings, dict):
            return f"is not a model folder: {config} is not a JSON object"
    damaged = model_files_problem(path)
    return f"has a damaged file: {damaged}" if damaged else None


def build_model(base: str, config: ModelConfig | None, *, max_seq_length: int | None = None, **kwargs: Any) -> Any:
    """A ``SentenceTransformer`` for ``base`` configured by ``config`` (``kwargs`` go to its constructor).

    A sentence-transformers folder keeps its modules (the pooling mode is changed if asked); a plain
    transformers checkpoint gets ``Transformer`` + ``Pooling`` (+ ``Normalize``). ``config.attention``
    switches the decoder's attention (:func:`set_attention`); a base that records bidirectional attention
    keeps it unless ``attention`` says otherwise.
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling

    from hf_unified_embed.training.attention import register_bidirectional_classes
    from hf_unified_embed.training.bidirectional_transformer import load_sentence_transformer

    register_bidirectional_classes()  # a saved bidirectional decoder loads as the class its config.json names
    config = config or ModelConfig()
    model_kwargs = config.model_kwargs()
    processor_kwargs = {"padding_side": config.padding_side} if config.padding_side else {}
    common = {"trust_remote_code": config.trust_remote_code, **kwargs}
    pooling_mode = config.resolved_pooling
    if is_sentence_transformers_folder(base) or config == ModelConfig():
        # A bidirectional folder names this package's module class, which sentence-transformers imports only when trusted.
        model = load_sentence_transformer(base, model_kwargs=model_kwargs, processor_kwargs=processor_kwargs, **common)
        if pooling_mode is not None:
            pooling = [module for module in model.modules() if isinstance(module, Pooling)]
            if not pooling:
                raise RecipeError(f"model.pooling: {base} has no Pooling module to set to {shown(pooling_mode)}")
            for module in pooling:
                module.pooling_mode = pooling_mode
    else:
        transformer = Transformer(
            base,
            model_kwargs={**model_kwargs, "trust_remote_code": config.trust_remote_code},
            processor_kwargs={**processor_kwargs, "trust_remote_code": config.trust_remote_code},
            config_kwargs={"trust_remote_code": config.trust_remote_code},
        )
        modules: list[Any] = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode or "mean")]
        model = SentenceTransformer(modules=modules, **kwargs)
    set_attention(model, config.attention_setting, base)
    if config.normalize and not any(isinstance(module, Normalize) for module in model):
        model.append(Normalize())
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    tokenizer = model.tokenizer
    if config.padding_side is not None:
        tokenizer.padding_side = config.padding_side
    if tokenizer.pad_token is None:
        # Llama-family tokenizers have no pad token; padding is masked, so any special token does.
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    auto_config = getattr(getattr(model[0], "auto_model", None), "config", None)
    if auto_config is not None and getattr(auto_config, "pad_token_id", None) is None:
        auto_config.pad_token_id = tokenizer.pad_token_id  # else transformers warns at the first step
    if config.wants_eos:
        append_eos_token(tokenizer)
    if config.gradient_checkpointing:
        auto_model: Any = model[0].auto_model
        auto_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        auto_model.config.use_cache = False
    return model


def set_attention(model: Any, setting: AttentionSetting | None, base: str = "model") -> None:
    """Make the first module of ``model`` (a ``SentenceTransformer``) run ``setting`` (``None``: what its
    transformers config records — a merged bidirectional checkpoint is never silently loaded causal).

    A bidirectional setting turns the module into a
    :class:`~hf_unified_embed.training.bidirectional_transformer.BidirectionalTransformer`, which saves it
    and re-applies it on load; a causal one leaves (or makes) it a plain ``Transformer``.
    """
    from sentence_transformers.base.modules import Transformer

    from hf_unified_embed.training.attention import (
        BIDIRECTIONAL_MODEL_TYPES,
        family_of,
        recorded_attention,
        unsupported_reason,
    )
    from hf_unified_embed.training.bidirectional_transformer import BidirectionalTransformer

    module = model[0]
    if not isinstance(module, Transformer):
        if setting is not None:
            raise RecipeError(f"model.attention: {base} has no transformers module ({type(module).__name__})")
        return
    model_config = module.auto_model.config
    if setting is None:
        if isinstance(module, BidirectionalTransformer):  # loaded with its own setting
            return
        try:
            setting = recorded_attention(model_config)
        except ValueError as error:
            raise RecipeError(f"model.attention: {base}: config.json: {error}") from None
        if setting is None or family_of(getattr(model_config, "model_type", None)) not in BIDIRECTIONAL_MODEL_TYPES:
            return  # nothing recorded, or a family whose own flag transformers applies by itself
    reason = unsupported_reason(model_config, setting)
    if reason is not None:
        raise RecipeError(f"model.attention: {base}: {reason}")
    BidirectionalTransformer.from_transformer(module, setting, origin=base)


def attention_problem(base: str, config: ModelConfig | None) -> str | None:
    """Why ``config.attention`` cannot be applied to ``base``, read from its configuration alone (no weights);
    ``None`` when it can, when nothing is asked, or when the configuration cannot be read here."""
    setting = config.attention_setting if config is not None else None
    if setting is None:
        return None
    from transformers import AutoConfig

    from hf_unified_embed.training.attention import register_bidirectional_classes, unsupported_reason

    register_bidirectional_classes()
    try:
        model_config = AutoConfig.from_pretrained(transformer_folder(base), trust_remote_code=config.trust_remote_code)  # type: ignore[union-attr]
    except (OSError, ValueError):
        return None  # loading the model reports it
    return unsupported_reason(model_config, setting)


def transformer_folder(base: str) -> str:
    """Where the transformers checkpoint of ``base`` is: the ``Transformer`` module's folder of a
    sentence-transformers model, else ``base`` itself (a transformers folder or a Hub id)."""
    modules = Path(base).expanduser() / "modules.json"
    if not modules.is_file():
        return base
    try:
        entries = json.loads(modules.read_text(encoding="utf-8"))
        path = next(entry.get("path", "") for entry in entries if str(entry.get("type", "")).endswith("Transformer"))
    except (ValueError, StopIteration, AttributeError, TypeError):  # not the modules.json sentence-transformers writes
        return base
    return str(Path(base).expanduser() / path)


def meta_transformer(base: str, config: ModelConfig | None) -> Any | None:
    """The transformers model of ``base`` built from its configuration on the meta device: no weight is read or allocated.

    transformers' own checks run as they would when the weights load (an ``attn_implementation`` the
    installed packages or the architecture cannot provide raises ``ImportError`` or ``ValueError``), and
    the modules exist with their real names (what a LoRA ``target_modules`` must match). ``None`` when
    the configuration cannot be read here (a Hub id outside the cache offline, a PEFT adapter folder):
    loading the model reports that itself.
    """
    import torch
    from transformers import AutoConfig, AutoModel

    from hf_unified_embed.training.attention import register_bidirectional_classes

    register_bidirectional_classes()
    config = config or ModelConfig()
    try:
        model_config = AutoConfig.from_pretrained(transformer_folder(base), trust_remote_code=config.trust_remote_code)
    except (OSError, ValueError):
        return None
    kwargs = {"attn_implementation": config.attn_implementation} if config.attn_implementation else {}
    with torch.device("meta"):
        return AutoModel.from_config(model_config, trust_remote_code=config.trust_remote_code, **kwargs)


def append_eos_token(tokenizer: Any) -> None:
    """Make ``tokenizer`` end every text with its EOS token (kept in the saved ``tokenizer.json``).

    Leaves the tokenizer as it is when it already ends texts with EOS. Any token the tokenizer puts
    before the text (a BOS) stays.
    """
    from tokenizers.processors import TemplateProcessing

    eos, eos_id = tokenizer.eos_token, tokenizer.eos_token_id
    if eos is None or eos_id is None:
        raise RecipeError("model.append_eos: the tokenizer has no eos_token; set one or turn append_eos off")
    ids = tokenizer("a")["input_ids"]
    if ids and ids[-1] == eos_id:
        return
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    if backend is None:
        raise RecipeError("model.append_eos needs a fast tokenizer (tokenizer.json)")
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    prefix_ids = ids[: len(ids) - len(plain)] if ids[len(ids) - len(plain) :] == plain else []
    prefix = [tokenizer.convert_ids_to_tokens(token) for token in prefix_ids]
    specials = {token: tokenizer.convert_tokens_to_ids(token) for token in [*prefix, eos]}
    head = " ".join(prefix)
    backend.post_processor = TemplateProcessing(
        single=f"{head} $A:0 {eos}:0".strip(),
        pair=f"{head} $A:0 {eos}:0 $B:1 {eos}:1".strip(),
        special_tokens=list(specials.items()),
    )
    logger.info("tokenizer now appends %s to every text (last-token pooling)", eos)


def merge_adapter(model: Any) -> Any:
    """Fold the trained LoRA weights of ``model`` into its base weights and remove the adapter (in place).

    What ``peft``'s ``merge_and_unload`` does for a ``PeftModel``, for the adapter sentence-transformers
    injects with ``model.add_adapter`` or loads from an adapter folder. The result saves and loads as an
    ordinary full model, with a card that no longer calls it an adapter. Returns ``model``.
    """
    from peft.tuners.tuners_utils import BaseTunerLayer

    auto_model: Any = model[0].auto_model
    for name, module in list(auto_model.named_modules()):
        if not isinstance(module, BaseTunerLayer):
            continue
        module.merge()
        parent_name, _, child = name.rpartition(".")
        parent = auto_model.get_submodule(parent_name) if parent_name else auto_model
        setattr(parent, child, module.get_base_layer())
    if hasattr(auto_model, "peft_config"):
        del auto_model.peft_config
    auto_model._hf_peft_config_loaded = False
    # transformers 5 keeps the key renamings it used for the last checkpoint it loaded, and reverses them
    # when saving. After ``load_adapter`` those are PEFT's (``base_model.model.`` dropped, ``lora_A`` →
    # ``lora_A.default``): every merged weight would be written as ``base_model.model.*``, which no loader
    # maps back (the model reloads with random weights). Without the adapter the model saves as
    # transformers saves one it did not load: with its architecture's own mapping.
    auto_model._weight_conversions = None
    _card_without_adapter(model)
    return model


def _card_without_adapter(model: Any) -> None:
    """The model's card, minus ``base_model_relation: adapter``: a merged model is a full fine-tune."""
    card_data: Any = getattr(model, "model_card_data", None)
    if getattr(card_data, "base_model_relation", None) == "adapter":
        card_data.base_model_relation = None
    text = getattr(model, "_model_card_text", None)
    if text:  # the README of the adapter folder the model was loaded from, which saving would copy
        from huggingface_hub import ModelCard

        card = ModelCard(text)
        metadata: Any = card.data
        if getattr(metadata, "base_model_relation", None) == "adapter":
            metadata.base_model_relation = None
            model._model_card_text = str(card)
