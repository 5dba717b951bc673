"""GUR pair mining: similar sentence pairs from raw documents by weighted longest common substring.

``mine_dataset(paths, PairMiningConfig(...), num_proc=2)`` returns unified retrieval rows;
``mine_pairs(documents)`` streams :class:`MinedPair` objects. The ``raw-text`` source format of
``hf-unified-embed build`` runs the same code. See ``docs/gur.md``.
"""

from hf_unified_embed.gur_pairs.documents import Document, iter_documents
from hf_unified_embed.gur_pairs.lcs import CharWeights, weighted_lcs, weighted_lcs_dp, weighted_lcs_sam
from hf_unified_embed.gur_pairs.pair_mining import (
    MinedPair,
    PairMiningConfig,
    mine_dataset,
    mine_document,
    mine_pairs,
    pair_row,
)
from hf_unified_embed.gur_pairs.sentences import SentenceBounds, normalize, split_sentences

__all__ = [
    "CharWeights",
    "Document",
    "MinedPair",
    "PairMiningConfig",
    "SentenceBounds",
    "iter_documents",
    "mine_dataset",
    "mine_document",
    "mine_pairs",
    "normalize",
    "pair_row",
    "split_sentences",
    "weighted_lcs",
    "weighted_lcs_dp",
    "weighted_lcs_sam",
]
