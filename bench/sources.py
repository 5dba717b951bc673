"""Raw sources shaped like a user's: one big BEIR source, real text lengths (the scale benchmarks' input).

N unified rows in the shape of MS MARCO, NQ or a company's search log, where one source holds most rows:

* ``stsb.tsv`` — an STS Benchmark-format tab file of 0.3 N pairs (genre, file, year, id, score, s1, s2);
* ``beir/`` — ONE BEIR folder of 0.4 N queries over a corpus of 0.4 N passages (``corpus.jsonl``,
  ``queries.jsonl``, graded ``qrels/train.tsv`` with one or two judgements per query, and a
  mined-negatives file ``negatives.jsonl`` with four passage ids per query);
* ``triplets.jsonl`` — 0.3 N rows of anchor, positive and four negatives.

Texts are the real ones of ``../shared/data`` (STS-B and SICK sentences, WikiQA/TrecQA/MS MARCO
questions, MS MARCO passages and WikiQA answer sentences), so lengths are real: passages average about
350 characters, queries 35. Every pass over a pool changes one word of each text (a word of the pool's
own vocabulary, seeded by pass and position), so texts stay (nearly) unique as in real data. The
recipe ``recipe.yaml`` builds the three sources into three tasks of 0.3 N, 0.4 N and 0.3 N rows.

    .venv/bin/python bench/sources.py /tmp/scale/raw-1m --rows 1000000
"""

from __future__ import annotations

import argparse
import csv
import json
import random
from collections.abc import Iterator
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SHARES = {"stsb": 0.3, "beir": 0.4, "triplets": 0.3}


def _tsv(path: Path) -> Iterator[list[str]]:
    with path.open(encoding="utf-8", errors="replace", newline="") as handle:
        yield from csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)


def _pools(data: Path) -> dict[str, list[str]]:
    """The real texts, by kind: sentences (STS), questions, passages (long documents), answers (sentences)."""
    sentences = []
    for row in _tsv(data / "sts" / "stsbenchmark" / "sts-train.csv"):
        if len(row) >= 7:
            sentences += [row[5], row[6]]
    for row in _tsv(data / "sts" / "sick2014" / "SICK_train.txt"):
        if len(row) >= 3 and row[0] != "pair_ID":
            sentences += [row[1], row[2]]
    questions, answers = [], []
    for row in _tsv(data / "ir" / "wikiqa" / "train.tsv"):
        if len(row) >= 5 and row[0] != "QuestionID":
            questions.append(row[1])
            answers.append(row[3])
    msmarco = data / "ir" / "msmarco-dl-subset"
    passages = [json.loads(line)["text"] for line in (msmarco / "corpus.jsonl").open(encoding="utf-8")]
    questions += [json.loads(line)["text"] for line in (msmarco / "queries.jsonl").open(encoding="utf-8")]
    clean = {
        "sentences": sentences,
        "questions": list(dict.fromkeys(questions)),
        "answers": list(dict.fromkeys(answers)),
        "passages": passages,
    }
    return {kind: [" ".join(text.split()) for text in texts if text.strip()] for kind, texts in clean.items()}


class _Texts:
    """Texts of one pool, endlessly: pass p > 0 changes one word of each (seeded), so texts stay unique."""

    def __init__(self, pool: list[str], seed: int) -> None:
        self.pool, self.seed = pool, seed
        self.vocabulary = sorted({word for text in pool[:5000] for word in text.split() if word.isalpha()})

    def __getitem__(self, index: int) -> str:
        passes, position = divmod(index, len(self.pool))
        text = self.pool[position]
        if passes == 0:
            return text
        rng = random.Random(self.seed * 1_000_003 + index)
        words = text.split()
        words[rng.randrange(len(words))] = f"{rng.choice(self.vocabulary)}{passes}"
        return " ".join(words)


def write_sources(folder: Path, rows: int, *, seed: int = 0, data: Path = DATA) -> Path:
    """Write the raw files and ``recipe.yaml`` for ``rows`` unified rows into ``folder``; return the recipe."""
    folder.mkdir(parents=True, exist_ok=True)
    pools = _pools(data)
    sentences = _Texts(pools["sentences"], seed)
    questions = _Texts(pools["questions"], seed + 1)
    passages = _Texts(pools["passages"], seed + 2)
    answers = _Texts(pools["answers"], seed + 3)
    rng = random.Random(seed)
    counts = {name: int(rows * share) for name, share in SHARES.items()}
    counts["triplets"] = rows - counts["stsb"] - counts["beir"]

    with (folder / "stsb.tsv").open("w", encoding="utf-8") as out:
        genres = ("main-captions", "main-news", "main-forums")
        for i in range(counts["stsb"]):
            score = rng.randint(0, 50) / 10
            out.write(
                f"{genres[i % 3]}\tMSRvid\t2012test\t{i:07d}\t{score:.3f}\t{sentences[2 * i]}\t{sentences[2 * i + 1]}\n"
            )

    beir = folder / "beir"
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    queries = documents = counts["beir"]
    with (beir / "corpus.jsonl").open("w", encoding="utf-8") as corpus:
        for d in range(documents):
            corpus.write(json.dumps({"_id": f"d{d}", "title": "", "text": passages[d]}) + "\n")
    with (beir / "queries.jsonl").open("w", encoding="utf-8") as out:
        for q in range(queries):
            out.write(json.dumps({"_id": f"q{q}", "text": questions[q]}) + "\n")
    with (beir / "qrels" / "train.tsv").open("w") as qrels, (beir / "negatives.jsonl").open("w") as negatives:
        qrels.write("query-id\tcorpus-id\tscore\n")
        for q in range(queries):
            qrels.write(f"q{q}\td{q}\t{rng.randint(2, 3)}\n")
            if q % 3 == 0:  # a second, weaker judgement for a third of the queries
                qrels.write(f"q{q}\td{(q + 1) % documents}\t1\n")
            mined = [f"d{(q + 7919 * k) % documents}" for k in range(1, 5)]
            negatives.write(json.dumps({"query-id": f"q{q}", "corpus-ids": mined}) + "\n")

    with (folder / "triplets.jsonl").open("w", encoding="utf-8") as out:
        offset = counts["beir"]  # other questions than the BEIR source's
        for i in range(counts["triplets"]):
            negatives = [answers[4 * i + k + 1] for k in range(4)]
            row = {"anchor": questions[offset + i], "positive": answers[4 * i], "negative": negatives}
            out.write(json.dumps(row) + "\n")

    sources = [
        {"name": "stsb", "format": "stsb", "data_files": "stsb.tsv", "task_type": "sts"},
        {
            "name": "msmarco",
            "format": "beir",
            "data_files": "beir",
            "task_type": "retrieval",
            "options": {"negatives_file": "negatives.jsonl"},
        },
        {"name": "triplets", "format": "triplets", "data_files": "triplets.jsonl", "task_type": "retrieval"},
    ]
    recipe = folder / "recipe.yaml"
    recipe.write_text(json.dumps({"sources": sources}, indent=1))  # JSON is YAML
    (folder / "shape.json").write_text(json.dumps({"rows": rows, "tasks": counts, "seed": seed}, indent=1))
    return recipe


def raw_loads(folder: Path) -> list[tuple[str, dict[str, object]]]:
    """``datasets.load_dataset`` calls that read the same raw files (the baseline of ``bench/build.py``)."""
    tab = {"delimiter": "\t", "quoting": 3}
    return [
        ("csv", {"data_files": str(folder / "stsb.tsv"), **tab, "column_names": [f"c{i}" for i in range(7)]}),
        ("json", {"data_files": str(folder / "beir" / "corpus.jsonl")}),
        ("json", {"data_files": str(folder / "beir" / "queries.jsonl")}),
        ("csv", {"data_files": str(folder / "beir" / "qrels" / "train.tsv"), **tab}),
        ("json", {"data_files": str(folder / "beir" / "negatives.jsonl")}),
        ("json", {"data_files": str(folder / "triplets.jsonl")}),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data folder (default: ../shared/data)")
    args = parser.parse_args()
    print(write_sources(args.folder, args.rows, seed=args.seed, data=args.data))


if __name__ == "__main__":
    main()
