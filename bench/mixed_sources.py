"""Nine short synthetic sources, one per source format (``bench/build.py --inputs mixed``).

N output rows in all, in the shapes of the shared sets: an STS Benchmark tab file (20 % of the rows;
every tenth line with the two trailing source fields), a SICK file (10 %), two SemEval STS files (10 %,
plus a fifth as many unlabeled lines, which are skipped), an MSRP file with a byte-order mark (10 %), a
WikiQA file (10 % answered questions of four candidates, plus half as many unanswered ones, skipped), a
quoted TrecQA csv (5 %), an MS MARCO-like BEIR folder (15 %: two graded judgements and four mined
negatives per query), a pairs JSON-lines file with scores (10 %) and a triplets Parquet file (10 %).

Sentences of a small vocabulary, 8-16 words: every format's parsing path, not a user's text lengths
(for those, ``bench/sources.py``, whose interface this shares: :func:`write_sources`, :func:`raw_loads`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

_VOCABULARY = (
    "a man woman child dog cat plane car train city river mountain house street market school player team "
    "game music flute guitar piano book story paper news report court police government minister election "
    "is are was were has had takes playing running eating reading writing riding sitting standing walking "
    "large small old young red blue green quick slow happy sad new early late first last other same on in "
    "at with from into over under near after before during about against between through"
)
WORDS = tuple(_VOCABULARY.split())
GENRES = ("main-captions", "main-news", "main-forums")


def sentence(rng: random.Random, words: int = 12) -> str:
    """A sentence of ``words`` ± 4 words of the small vocabulary."""
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(max(1, words - 4), words + 4)))
    return text[0].upper() + text[1:] + "."


def shares(n: int) -> dict[str, int]:
    """Rows per source of ``n`` in all."""
    fractions = {
        "stsb": 0.2,
        "sick": 0.1,
        "semeval": 0.1,
        "msrp": 0.1,
        "wikiqa": 0.1,
        "trecqa": 0.05,
        "beir": 0.15,
        "pairs": 0.1,
    }
    counts = {name: int(n * fraction) for name, fraction in fractions.items()}
    counts["triplets"] = n - sum(counts.values())
    return counts


def write_sources(folder: Path, rows: int, *, seed: int = 0) -> Path:
    """The raw files of ``rows`` unified rows and their recipe; returns the recipe's path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    counts = shares(rows)
    folder.mkdir(parents=True, exist_ok=True)  # as bench/sources.py: the bench's start-up inputs go in a sub-folder
    with open(folder / "stsb.tsv", "w") as out:
        for i in range(counts["stsb"]):
            extra = "\tsource-a\tsource-b" if i % 10 == 0 else ""
            score = rng.randint(0, 50) / 10
            out.write(
                f"{GENRES[i % 3]}\tMSRvid\t2012test\t{i:04d}\t{score:.3f}\t{sentence(rng)}\t{sentence(rng)}{extra}\n"
            )
    with open(folder / "sick.txt", "w") as out:
        out.write("pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n")
        for i in range(counts["sick"]):
            out.write(f"{i + 1}\t{sentence(rng)}\t{sentence(rng)}\t{rng.randint(10, 50) / 10}\tNEUTRAL\n")
    for part, name in enumerate(("answers-forums", "headlines")):
        with open(folder / f"semeval-{name}.tsv", "w") as out:
            for i in range(counts["semeval"] // 2 + part * (counts["semeval"] % 2)):
                if i % 5 == 0:
                    out.write(f"\t{sentence(rng)}\t{sentence(rng)}\n")  # unlabeled: skipped
                out.write(f"{rng.randint(0, 50) / 10:.2f}\t{sentence(rng)}\t{sentence(rng)}\n")
    with open(folder / "msrp.tsv", "w", encoding="utf-8-sig") as out:
        out.write("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
        for i in range(counts["msrp"]):
            out.write(f"{i % 2}\t{2 * i}\t{2 * i + 1}\t{sentence(rng)}\t{sentence(rng)}\n")
    with open(folder / "wikiqa.tsv", "w") as out:
        out.write("QuestionID\tQuestion\tSentenceID\tSentence\tLabel\n")
        sentence_id = 0
        for q in range(counts["wikiqa"] + counts["wikiqa"] // 2):
            question = f"how is item {q} described? " + sentence(rng, 6)
            correct = rng.randrange(4) if q % 3 != 2 else -1  # every third question unanswered
            for c in range(4):
                sentence_id += 1
                out.write(f"Q{q}\t{question}\tS{sentence_id}\t{sentence(rng)}\t{int(c == correct)}\n")
    with open(folder / "trecqa.csv", "w") as out:
        out.write("qtext,label,atext\n")
        for q in range(counts["trecqa"]):
            question = f'"Who wrote ""{sentence(rng, 4)}"" , number {q} ?"'
            for c in range(5):
                out.write(f'{question},{int(c == 0)},"{sentence(rng, 20).replace(" on ", " , on ")}"\n')
    beir = folder / "beir"
    (beir / "qrels").mkdir(parents=True)
    queries = counts["beir"]
    documents = 2 * queries
    with open(beir / "corpus.jsonl", "w") as corpus:
        for d in range(documents):
            corpus.write(json.dumps({"_id": f"d{d}", "title": "", "text": sentence(rng, 40)}) + "\n")
    with open(beir / "queries.jsonl", "w") as out:
        for q in range(queries):
            out.write(json.dumps({"_id": f"q{q}", "text": sentence(rng, 6)}) + "\n")
    with open(beir / "qrels" / "train.tsv", "w") as qrels, open(beir / "negatives.jsonl", "w") as negatives:
        qrels.write("query-id\tcorpus-id\tscore\n")
        for q in range(queries):
            qrels.write(f"q{q}\td{2 * q}\t3\nq{q}\td{2 * q + 1}\t{1 + q % 2}\n")
            mined = [f"d{(2 * q + 7919 * k) % documents}" for k in range(1, 5)]
            negatives.write(json.dumps({"query-id": f"q{q}", "corpus-ids": mined}) + "\n")
    with open(folder / "pairs.jsonl", "w") as out:
        for _ in range(counts["pairs"]):
            out.write(
                json.dumps({"anchor": sentence(rng, 8), "positive": sentence(rng), "score": rng.random()}) + "\n"
            )
    triplets = counts["triplets"]
    for start in range(0, triplets, 500_000):
        stop = min(triplets, start + 500_000)
        part = pa.table(
            {
                "anchor": [sentence(rng, 8) for _ in range(start, stop)],
                "positive": [sentence(rng) for _ in range(start, stop)],
                "negative": [sentence(rng) for _ in range(start, stop)],
            }
        )
        if start == 0:
            writer = pq.ParquetWriter(folder / "triplets.parquet", part.schema)
        writer.write_table(part)
    writer.close()
    sources = [
        {"name": "stsb", "format": "stsb", "data_files": "stsb.tsv", "task_type": "sts", "query_instruction": "Q: "},
        {"name": "sick", "format": "sick", "data_files": "sick.txt", "task_type": "sts"},
        {"name": "semeval", "format": "semeval-sts", "data_files": "semeval-*.tsv", "task_type": "sts"},
        {"name": "msrp", "format": "msrp", "data_files": "msrp.tsv", "task_type": "pair_classification"},
        {"name": "wikiqa", "format": "wikiqa", "data_files": "wikiqa.tsv", "task_type": "retrieval"},
        {"name": "trecqa", "format": "trecqa", "data_files": "trecqa.csv", "task_type": "retrieval"},
        {
            "name": "msmarco",
            "format": "beir",
            "data_files": "beir",
            "task_type": "retrieval",
            "options": {"negatives_file": "negatives.jsonl"},
        },
        {
            "name": "pairs",
            "format": "pairs",
            "data_files": "pairs.jsonl",
            "task_type": "retrieval",
            "options": {"score_column": "score"},
        },
        {"name": "triplets", "format": "triplets", "data_files": "triplets.parquet", "task_type": "retrieval"},
    ]
    recipe = folder / "recipe.yaml"
    recipe.write_text(json.dumps({"sources": sources}, indent=1))  # JSON is YAML
    return recipe


def raw_loads(folder: Path) -> list[tuple[str, dict[str, object]]]:
    """``datasets.load_dataset`` calls that read the same raw files (the baseline of ``bench/build.py``)."""
    tab = {"delimiter": "\t", "quoting": 3}
    return [
        ("csv", {"data_files": str(folder / "stsb.tsv"), **tab, "column_names": [f"c{i}" for i in range(9)]}),
        ("csv", {"data_files": str(folder / "sick.txt"), **tab}),
        ("csv", {"data_files": str(folder / "semeval-*.tsv"), **tab, "column_names": ["score", "s1", "s2"]}),
        ("csv", {"data_files": str(folder / "msrp.tsv"), **tab}),
        ("csv", {"data_files": str(folder / "wikiqa.tsv"), **tab}),
        ("csv", {"data_files": str(folder / "trecqa.csv")}),
        ("json", {"data_files": str(folder / "beir" / "corpus.jsonl")}),
        ("json", {"data_files": str(folder / "beir" / "queries.jsonl")}),
        ("csv", {"data_files": str(folder / "beir" / "qrels" / "train.tsv"), **tab}),
        ("json", {"data_files": str(folder / "beir" / "negatives.jsonl")}),
        ("json", {"data_files": str(folder / "pairs.jsonl")}),
        ("parquet", {"data_files": str(folder / "triplets.parquet")}),
    ]
