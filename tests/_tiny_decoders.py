"""Small random decoder LLMs with a real tokenizer of their family: for smoke runs, examples and tests.

No decoder LLM is small enough to download into a CI run, and none may be downloaded at all here,
so :func:`make_tiny_decoder` builds one: a randomly initialised Qwen2 or Llama of a few layers, with a
tokenizer trained on the given texts through the family's own pipeline and rebuilt by its
transformers class from the vocabulary and merges, as a Hub checkpoint's would be. Qwen2 is byte-level
BPE with its split regex (no BOS, pads with ``<|endoftext|>``); Llama is SentencePiece-style BPE with
byte fallback, a BOS and no pad token. Neither appends an EOS, as their Hub tokenizers do not.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

FAMILIES = ("qwen2", "llama")


def make_tiny_decoder(
    folder: str | Path,
    family: Literal["qwen2", "llama"],
    corpus: Iterable[str],
    *,
    hidden_size: int = 32,
    num_layers: int = 4,
    vocab_size: int = 1500,
    seed: int = 0,
) -> Path:
    """Save a random ``family`` decoder and its tokenizer (trained on ``corpus``) to ``folder``; return it."""
    import torch
    from tokenizers import Tokenizer, models, trainers
    from tokenizers.pre_tokenizers import ByteLevel, Metaspace
    from transformers import LlamaConfig, LlamaModel, LlamaTokenizer, Qwen2Config, Qwen2Model, Qwen2Tokenizer

    if family not in FAMILIES:
        raise ValueError(f"family must be one of {list(FAMILIES)}, got {family!r}")
    texts = list(corpus)
    llama = family == "llama"
    template = LlamaTokenizer() if llama else Qwen2Tokenizer()
    backend = Tokenizer(models.BPE(byte_fallback=llama, unk_token="<unk>" if llama else None))
    backend.normalizer = template.backend_tokenizer.normalizer
    # SentencePiece learns pieces within words ("▁what"); Llama's own pre-tokenizer then keeps the text whole.
    backend.pre_tokenizer = (
        Metaspace(replacement="▁", prepend_scheme="first", split=True)
        if llama
        else template.backend_tokenizer.pre_tokenizer
    )
    specials = ["<unk>", "<s>", "</s>", *(f"<0x{byte:02X}>" for byte in range(256))] if llama else ["<|endoftext|>"]
    alphabet = sorted({char for text in texts for char in text}) if llama else ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, initial_alphabet=alphabet)
    backend.train_from_iterator(texts, trainer)
    model_json = json.loads(backend.to_str())["model"]
    vocab = model_json["vocab"]
    merges: Any = [tuple(merge) for merge in model_json["merges"]]  # transformers types them as strings
    tokenizer = (
        LlamaTokenizer(vocab=vocab, merges=merges, add_bos_token=True)
        if llama
        else Qwen2Tokenizer(vocab=vocab, merges=merges)
    )
    torch.manual_seed(seed)
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaModel(LlamaConfig(**common)) if llama else Qwen2Model(Qwen2Config(**common))
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def bundled_corpus(data_dir: str | Path) -> list[str]:
    """Sentences of the bundled sample (STS-B and WikiQA under ``examples/data``) to train a tokenizer on."""
    data_dir = Path(data_dir)
    texts = [line.split("\t")[-1] for line in (data_dir / "stsb-train.tsv").read_text(encoding="utf-8").splitlines()]
    wikiqa = (data_dir / "wikiqa-train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return texts + [line.split("\t")[-2] for line in wikiqa]
