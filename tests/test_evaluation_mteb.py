"""The harness proof: all-MiniLM-L6-v2 reproduces its published MTEB STS13 / STS15 Spearman."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hf_unified_embed.evaluation import run_suite

# MTEB results of sentence-transformers/all-MiniLM-L6-v2 (cosine Spearman, test split).
PUBLISHED = {"sts13": 0.80603, "sts15": 0.85390}


@pytest.mark.real_model
def test_minilm_matches_published_mteb_sts13_and_sts15(minilm_path: str, shared_data: Path) -> None:
    from sentence_transformers import SentenceTransformer

    suite: dict[str, Any] = {
        "data_root": str(shared_data / "sts" / "semeval"),
        "batch_size": 64,
        "diagnostics": False,
        "evaluations": [
            {"name": "sts13", "kind": "sts", "source": "semeval-sts", "data_files": "2013/*.tsv"},
            {"name": "sts15", "kind": "sts", "source": "semeval-sts", "data_files": "2015/*.tsv"},
        ],
    }
    results = run_suite(SentenceTransformer(minilm_path, device="cpu"), suite, show_progress_bar=False)
    assert results["sts13"].num_examples == 1500  # 2013: headlines 750 + OnWN 561 + FNWN 189
    assert results["sts15"].num_examples == 3000  # 2015: the labelled rows of five files
    for name, published in PUBLISHED.items():
        assert results[name].metrics["spearman_cosine"] == pytest.approx(published, abs=1e-4), name
