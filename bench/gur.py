"""GUR pair mining speed: suffix-automaton LCS vs the O(n·m) dynamic programme, and end-to-end mining.

1. The same candidate pairs (sentences of generated documents, each with its next ``window``
   neighbours) are scored by both compiled implementations; pairs checked per second and the ratio.
2. ``mine_dataset`` over 100k generated documents (JSON lines) with ``num_proc=2``: pairs/s and peak
   resident memory of the main process and of the largest worker.

Run: ``.venv/bin/python bench/gur.py [--documents 100000] [--num-proc 2]``.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from hf_unified_embed.gur_pairs import PairMiningConfig, mine_dataset
from hf_unified_embed.gur_pairs.lcs import CharWeights, codes_of, weighted_lcs_dp, weighted_lcs_sam
from hf_unified_embed.gur_pairs.sentences import normalize, split_sentences

WORDS = (  # noqa: SIM905 (a word list reads better as one string)
    "the cat dog river city garden music light energy history science village market winter summer "
    "train station bridge mountain forest ocean island museum library school teacher student doctor"
).split()
HANZI = "北京上海天安门故宫长城历史文化科学音乐城市花园河流山脉森林海洋岛屿博物馆图书馆学校老师学生医生"


def make_document(rng: random.Random) -> dict[str, str]:
    """A document of 6–14 sentences that reuse a few topic phrases, some in Chinese."""
    topic = " ".join(rng.choices(WORDS, k=3))
    sentences = []
    for _ in range(rng.randint(6, 14)):
        if rng.random() < 0.3:
            sentences.append("".join(rng.choices(HANZI, k=rng.randint(8, 30))) + "。")
        else:
            words = rng.choices(WORDS, k=rng.randint(6, 20))
            if rng.random() < 0.5:
                words.insert(rng.randint(0, len(words)), topic)
            sentences.append(" ".join(words).capitalize() + ".")
    return {"title": topic.title(), "text": " ".join(sentences)}


def lcs_ratio(documents: list[dict[str, str]], window: int, repeats: int) -> None:
    weights = CharWeights()
    pairs = []
    for document in documents:
        keys = [normalize(s) for s in split_sentences(document["text"])]
        codes = [codes_of(k) for k in keys]
        for i in range(len(codes)):
            for j in range(i + 1, min(len(codes), i + window + 1)):
                pairs.append((codes[i], codes[j], weights.of(codes[j])))
    weighted_lcs_sam(*pairs[0]), weighted_lcs_dp(*pairs[0])  # compile outside the timing

    def run(function) -> tuple[float, list[float]]:  # type: ignore[no-untyped-def]
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            scores = [function(a, b, w) for a, b, w in pairs]
            best = min(best, time.perf_counter() - start)
        return best, scores

    dp_time, dp_scores = run(weighted_lcs_dp)
    sam_time, sam_scores = run(weighted_lcs_sam)
    assert np.allclose(dp_scores, sam_scores), "the two implementations disagree"
    lengths = [len(a) for a, _, _ in pairs]
    print(
        f"LCS on {len(pairs):,} candidate pairs (mean sentence length {np.mean(lengths):.0f} characters, best of {repeats}):"
    )
    print(f"  dynamic programme O(n·m): {len(pairs) / dp_time:>12,.0f} pairs/s")
    print(f"  suffix automaton O(n+m):  {len(pairs) / sam_time:>12,.0f} pairs/s")
    print(f"  ratio automaton / DP:     {dp_time / sam_time:>12.2f}x")
    # Long sentences show the asymptotics: the DP grows with n·m, the automaton with n + m.
    long_pairs = [
        (np.concatenate([a] * 8), np.concatenate([b] * 8), np.concatenate([w] * 8)) for a, b, w in pairs[:2000]
    ]
    start = time.perf_counter()
    for a, b, w in long_pairs:
        weighted_lcs_dp(a, b, w)
    long_dp = time.perf_counter() - start
    start = time.perf_counter()
    for a, b, w in long_pairs:
        weighted_lcs_sam(a, b, w)
    long_sam = time.perf_counter() - start
    print(
        f"  same pairs repeated 8x (mean {8 * np.mean(lengths):.0f} characters): ratio automaton / DP {long_dp / long_sam:.2f}x"
    )


def end_to_end(documents: list[dict[str, str]], num_proc: int, window: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "documents.jsonl"
        with open(path, "w", encoding="utf-8") as handle:
            for document in documents:
                handle.write(json.dumps(document, ensure_ascii=False) + "\n")
        start = time.perf_counter()
        dataset = mine_dataset(
            [path], PairMiningConfig(window=window), num_proc=num_proc, cache_dir=str(Path(folder) / "cache")
        )
        elapsed = time.perf_counter() - start
        print(f"end-to-end mine_dataset, {len(documents):,} documents, num_proc={num_proc}:")
        print(
            f"  {len(dataset):,} pairs in {elapsed:.1f} s: {len(dataset) / elapsed:,.0f} pairs/s, {len(documents) / elapsed:,.0f} documents/s"
        )
    main_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    worker_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"  peak RSS: main process {main_peak:,.0f} MiB, largest worker {worker_peak:,.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--lcs-documents", type=int, default=2_000)
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    documents = [make_document(rng) for _ in range(args.documents)]
    lcs_ratio(documents[: args.lcs_documents], args.window, repeats=3)
    end_to_end(documents, args.num_proc, args.window)


if __name__ == "__main__":
    main()
