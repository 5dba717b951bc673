"""Hard-negative mining on unified retrieval tasks (``hf-unified-embed mine-negatives``).

``mine_hard_negatives(tasks, model, HardNegativeConfig(...))`` mines a ``{task: Dataset}`` mapping;
``mine_negatives_folder(data, out, model)`` mines a unified folder into a new one with a card
section. Exact search in blocks over disk-backed embeddings keeps memory independent of the corpus
size; positive-aware filters follow NV-Retriever. See ``docs/mining.md``.
"""

from hf_unified_embed.negatives.candidates import ExternalCorpus
from hf_unified_embed.negatives.exact_search import Corpus, SearchResult, search
from hf_unified_embed.negatives.folder import mine_negatives_folder, read_corpus
from hf_unified_embed.negatives.hard_negative_config import HardNegativeConfig, MiningReport
from hf_unified_embed.negatives.miner import MiningResult, mine_hard_negatives
from hf_unified_embed.negatives.store import EmbeddingFile

__all__ = [
    "Corpus",
    "EmbeddingFile",
    "ExternalCorpus",
    "HardNegativeConfig",
    "MiningReport",
    "MiningResult",
    "SearchResult",
    "mine_hard_negatives",
    "mine_negatives_folder",
    "read_corpus",
    "search",
]
