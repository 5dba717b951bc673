"""Loss classes (one per file) following the sentence-transformers loss API."""

from hf_unified_embed.losses.base import EmbeddingLoss

__all__ = ["EmbeddingLoss"]
