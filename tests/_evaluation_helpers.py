"""Tiny evaluation files in each supported layout, for the evaluation tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

STS_ROWS = [
    ("5.0", "A man is playing a guitar.", "A man plays the guitar."),
    ("4.2", "A woman is slicing onions.", "A woman cuts an onion."),
    ("3.0", "Two dogs run in a field.", "Dogs are running outside."),
    ("", "An unlabeled row is skipped.", "Nobody scored it."),
    ("1.4", "A man is playing a guitar.", "A child is eating cake."),
    ("0.2", "The stock market fell today.", "A cat sleeps on the sofa."),
    ("2.5", "A woman is slicing onions.", "A woman is cooking."),
]

MSRP_ROWS = [
    ("1", "The company reported strong profits.", "Profits at the firm were strong."),
    ("0", "The company reported strong profits.", "The weather was cold on Monday."),
    ("1", "He left the meeting early.", "He departed the meeting before it ended."),
    ("0", "He left the meeting early.", "Prices of oil went up sharply."),
]

TRECQA_ROWS = [
    ("Who wrote Hamlet ?", "1", "Hamlet was written by William Shakespeare ."),
    ("Who wrote Hamlet ?", "0", "Hamlet is set in Denmark ."),
    ("Who wrote Hamlet ?", "0", "The play is long ."),
    ("What is the capital of France ?", "1", "Paris is the capital of France ."),
    ("What is the capital of France ?", "0", "France is in Europe ."),
    ("How tall is Everest ?", "1", "Everest is 8,849 metres tall ."),  # no negative: not rankable
]

BEIR_CORPUS = {
    "d1": ("", "Paris is the capital and largest city of France."),
    "d2": ("Berlin", "Berlin is the capital of Germany."),
    "d3": ("", "The Eiffel Tower is in Paris."),
    "d4": ("", "Bananas are rich in potassium."),
    "d5": ("", "Apples grow on trees."),
}
BEIR_QUERIES = {"q1": "capital of France", "q2": "fruit nutrition"}
BEIR_QRELS = [("q1", "d1", 2), ("q1", "d3", 1), ("q2", "d4", 3)]


def write_evaluation_files(root: Path) -> Path:
    """Write one small file per source format under ``root``; returns ``root``."""
    (root / "sts").mkdir(parents=True)
    (root / "sts" / "a.test.tsv").write_text("".join(f"{s}\t{a}\t{b}\n" for s, a, b in STS_ROWS[:4]), encoding="utf-8")
    (root / "sts" / "b.test.tsv").write_text("".join(f"{s}\t{a}\t{b}\n" for s, a, b in STS_ROWS[4:]), encoding="utf-8")
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    body = "".join(f"{q}\t{i}\t{i + 100}\t{a}\t{b}\n" for i, (q, a, b) in enumerate(MSRP_ROWS))
    (root / "msrp.tsv").write_text(header + body, encoding="utf-8")
    lines = ["qtext,label,atext"] + [f'{q},{label},"{a}"' for q, label, a in TRECQA_ROWS]
    (root / "trecqa.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    with open(beir / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for doc_id, (title, text) in BEIR_CORPUS.items():
            handle.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with open(beir / "queries.jsonl", "w", encoding="utf-8") as handle:
        for query_id, text in BEIR_QUERIES.items():
            handle.write(json.dumps({"_id": query_id, "text": text}) + "\n")
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in BEIR_QRELS), encoding="utf-8"
    )
    return root


def all_kinds_suite(root: Path) -> dict[str, Any]:
    """A suite dict with one entry of every kind over :func:`write_evaluation_files`."""
    return {
        "name": "tiny-suite",
        "data_root": str(root),
        "batch_size": 4,
        "diagnostics": {"max_texts": 8, "batch_size": 4},
        "evaluations": [
            {
                "name": "sts",
                "kind": "sts",
                "source": "semeval-sts",
                "data_files": "sts/*.tsv",
                "dataset_id": "org/sts",
            },
            {"name": "retrieval", "kind": "retrieval", "source": "beir", "data_files": "beir", "split": "test"},
            {"name": "rerank", "kind": "reranking", "source": "trecqa", "data_files": "trecqa.csv"},
            {"name": "paraphrase", "kind": "pair_classification", "source": "msrp", "data_files": "msrp.tsv"},
        ],
    }
