"""Raw documents mined into sentence pairs with GUR's longest-common-substring rule (``raw-text``).

Inputs: a text file with one document per line, a JSON-lines file with a ``text`` field (and an
optional ``title``), or a folder of .txt files (one document each). Each kept pair becomes a
retrieval row: query = one sentence, positives = [the other]. The mining itself and its
defaults are :mod:`hf_unified_embed.gur_pairs` (see ``docs/gur.md``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from hf_unified_embed.data.source_formats import AdapterContext, SourceRow, register_source_format


@register_source_format("raw-text")
def read_raw_text(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    text_field: str = "text",
    title_field: str = "title",
    window: int = 3,
    title_pairs: bool = True,
    min_lcs: float = 3.0,
    short_min_lcs: float = 2.0,
    short_length: int = 16,
    repeat: int = 1,
    lowercase: bool = True,
    min_length: int = 5,
    max_length: int = 512,
    cjk_weight: float = 1.0,
    letter_weight: float = 0.3,
    other_weight: float = 0.1,
    space_weight: float = 0.0,
    num_proc: int = 1,
) -> Iterator[SourceRow]:
    """Raw documents (lines, JSON lines with text/title, or .txt folders) mined into similar-sentence pairs (GUR).

    Rows carry ``task_type`` ``retrieval``; duplicates across documents are dropped. With
    ``num_proc > 1`` the documents are mined in that many processes through ``datasets`` first.
    """
    # Imported here: the miner compiles with numba, whose import (0.14 s) every command that looks up a source
    # format would pay when the registry loads this adapter.
    from hf_unified_embed.gur_pairs.documents import iter_documents
    from hf_unified_embed.gur_pairs.lcs import CharWeights
    from hf_unified_embed.gur_pairs.pair_mining import PairMiningConfig, mine_dataset, mine_document
    from hf_unified_embed.gur_pairs.sentences import SentenceBounds

    config = PairMiningConfig(
        window=window,
        title_pairs=title_pairs,
        min_lcs=min_lcs,
        short_min_lcs=short_min_lcs,
        short_length=short_length,
        repeat=repeat,
        lowercase=lowercase,
        bounds=SentenceBounds(min_length, max_length),
        weights=CharWeights(cjk=cjk_weight, letter=letter_weight, other=other_weight, space=space_weight),
        task=context.source or "gur-pairs",
    )
    if num_proc > 1:
        label = str(files[0]) if len(files) == 1 else f"{files[0]} (+{len(files) - 1} more)"
        for number, row in enumerate(
            mine_dataset(files, config, num_proc=num_proc, text_field=text_field, title_field=title_field)
        ):
            yield (
                f"{label}, pair {number + 1}",
                {"query": row["query"], "positives": row["positives"], "task_type": "retrieval"},
            )
        return
    seen: set[int] = set()
    for _, document in iter_documents(files, text_field=text_field, title_field=title_field):
        pairs = mine_document(document, config)
        if not pairs:
            context.skip("document without a similar sentence pair")
        for pair in pairs:
            if pair.key in seen:
                context.skip("pair already mined from an earlier document")
                continue
            seen.add(pair.key)
            yield document.location, {"query": pair.query, "positives": [pair.positive], "task_type": "retrieval"}
