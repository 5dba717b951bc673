"""The quality report's training data: the build recipes of its settings from the shared train files.

The main setting (``MAIN_SOURCES``: one source per task, train splits only; with ``instructions`` the
shipped build recipe's instructions, as the data ``make demo`` builds carries them) and the many-task
setting (the shared train files split into 21 tasks by source file, label or question word).
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from quality_recipe import GUR_TASK, build_instructions

#: A question-word bucket of WikiQA / TrecQA with fewer questions joins the ``other`` bucket.
MIN_BUCKET_QUESTIONS = 15

QUESTION_WORDS = ("what", "how", "who", "when", "where", "which", "why")

#: The train files the main setting can draw on: task → (format, task type, path under --data-root, options).
MAIN_SOURCES: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "stsb": ("stsb", "sts", "sts/stsbenchmark/sts-train.csv", {}),
    "sick": ("sick", "sts", "sts/sick2014/SICK_train.txt", {}),
    "wikiqa": ("wikiqa", "retrieval", "ir/wikiqa/train.tsv", {}),
    "trecqa": ("trecqa", "retrieval", "ir/trecqa/train.csv", {}),
    # Each WikiQA question against its whole paragraph (its candidates joined): passage retrieval, in-batch.
    "wikiqa-passages": ("wikiqa", "retrieval", "ir/wikiqa/train.tsv", {"as_passage": True}),
    "msrp": ("msrp", "pair_classification", "pair/msrp/msr-para-train.tsv", {}),
    # The paraphrase pairs only, as (anchor, positive) retrieval rows: in-batch negatives, none of the
    # near-duplicate "not a paraphrase" pairs pushed apart.
    "msrp-positives": ("msrp", "retrieval", "pair/msrp/msr-para-train.tsv", {"positives_only": True}),
    # SemEval 2012 STS train (MSRpar and SMTeuroparl; never the test files the suite scores).
    "semeval12": ("semeval-sts", "sts", "sts/semeval/2012/*.train.tsv", {}),
}

#: The passages of the suite's MS MARCO subset: the ``+gur`` lever mines their text (no query, no judgement).
MSMARCO_PASSAGES = "ir/msmarco-dl-subset/corpus.jsonl"

#: A source of the report's data without one in the build recipe takes the instructions of one that has.
INSTRUCTIONS_LIKE = {"semeval12": "stsb", "msrp-positives": "msrp"}

#: The main setting's tasks unless ``--main-tasks`` says otherwise (the H100 table's four).
MAIN_TASKS = ("stsb", "sick", "wikiqa", "trecqa")

#: The tasks the shipped recipe, ``make demo`` and the README quick start train (docs/quality.md, "WikiQA as
#: passages"): the four and WikiQA's questions against their whole paragraphs.
RECIPE_TASKS = ("stsb", "sick", "wikiqa", "wikiqa-passages", "trecqa")


def gur_documents(data_root: Path, target: Path) -> list[Path]:
    """The raw documents :data:`GUR_TASK` is mined from: WikiQA's distinct paragraphs, written under ``target``
    as JSON lines, and the MS MARCO passages file of ``data_root`` as it is (``title`` and ``text`` fields)."""
    header, rows = _read(data_root / MAIN_SOURCES["wikiqa"][2], delimiter="\t", quoting=csv.QUOTE_NONE)
    question, sentence = header.index("Question"), header.index("Sentence")
    sentences: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        if len(row) > max(question, sentence):
            sentences[row[question]].append(row[sentence])
    # One candidate a line: the miner splits at line ends, and WikiQA's sentences often end without a full stop.
    paragraphs = dict.fromkeys("\n".join(parts) for parts in sentences.values())  # a page asked about twice: once
    target.mkdir(parents=True, exist_ok=True)
    path = target / "wikiqa-paragraphs.jsonl"
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in paragraphs), encoding="utf-8")
    return [path, data_root / MSMARCO_PASSAGES]


def training_sources(
    data_root: Path,
    max_rows: int | None,
    tasks: Iterable[str] = MAIN_TASKS,
    instructions: bool = False,
    documents: Sequence[Path] = (),
) -> dict[str, Any]:
    """The unified build recipe of the main setting's ``tasks`` (train splits only); with ``instructions``,
    each source carries the instructions the shipped build recipe gives it (``examples/recipes/sample.yaml``).
    :data:`GUR_TASK` mines ``documents`` (:func:`gur_documents`) and has no instructions: its pairs are two
    sentences of one document, neither a query nor a passage."""
    given = build_instructions() if instructions else {}
    sources: list[dict[str, Any]] = []
    for name in tasks:
        if name == GUR_TASK:
            if not documents:
                raise ValueError(f"{GUR_TASK}: needs the documents to mine (gur_documents)")
            files = [str(path) for path in documents]
            sources.append(
                {
                    "name": name,
                    "format": "raw-text",
                    "task_type": "retrieval",
                    "data_files": files,
                    "max_rows": max_rows,
                }
            )
            continue
        fmt, task_type, path, fmt_options = MAIN_SOURCES[name]
        sources.append(
            {
                "name": name,
                "format": fmt,
                "task_type": task_type,
                "data_files": str(data_root / path),
                "options": fmt_options,
                "max_rows": max_rows,
                **given.get(name, given.get(INSTRUCTIONS_LIKE.get(name, ""), {})),
            }
        )
    return {"sources": sources}


def question_word(question: str) -> str:
    words = question.strip().lower().split()
    return words[0] if words and words[0] in QUESTION_WORDS else "other"


def _write_buckets(
    target: Path,
    name: str,
    header: list[str] | None,
    rows: Iterable[list[str]],
    key: Callable[[list[str]], str],
    delimiter: str = "\t",
) -> dict[str, Path]:
    """Split delimited ``rows`` into one file per ``key`` value (``header`` repeated); returns ``{bucket: file}``.

    Tab-separated files are unquoted (their fields hold bare quote characters), so their rows are
    written back field by field; comma-separated ones (TrecQA) go through ``csv`` quoting.
    """
    groups: dict[str, list[list[str]]] = defaultdict(list)
    for row in rows:
        groups[key(row)].append(row)
    files = {}
    for bucket, bucket_rows in sorted(groups.items()):
        path = target / f"{name}-{bucket}{'.csv' if delimiter == ',' else '.tsv'}"
        lines = ([header] if header is not None else []) + bucket_rows
        with open(path, "w", encoding="utf-8", newline="") as handle:
            if delimiter == ",":
                csv.writer(handle, lineterminator="\n").writerows(lines)
            else:
                handle.writelines(delimiter.join(line) + "\n" for line in lines)
        files[bucket] = path
    return files


def _question_buckets(rows: list[list[str]], column: int) -> Callable[[list[str]], str]:
    """Rows → their question word; a word with fewer than ``MIN_BUCKET_QUESTIONS`` questions becomes ``other``."""
    questions: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        if len(row) > column:
            questions[question_word(row[column])].add(row[column])
    kept = {word for word, asked in questions.items() if len(asked) >= MIN_BUCKET_QUESTIONS and word != "other"}
    return lambda row: (
        question_word(row[column]) if len(row) > column and question_word(row[column]) in kept else "other"
    )


def _read(path: Path, **csv_options: Any) -> tuple[list[str], list[list[str]]]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle, **csv_options))
    return rows[0], rows[1:]


def many_task_sources(data_root: Path, target: Path, max_rows: int | None) -> dict[str, Any]:
    """The many-task build recipe: the shared train files split into ≥ 20 tasks (bucket files under ``target``)."""
    target.mkdir(parents=True, exist_ok=True)
    sources: list[dict[str, Any]] = []

    def add(name: str, fmt: str, task_type: str, path: Path, source: str) -> None:
        sources.append(
            {
                "name": name.lower().replace("_", "-"),
                "format": fmt,
                "task_type": task_type,
                "data_files": str(path),
                "max_rows": max_rows,
                "source": source,
            }
        )

    # STS-B train by source file (column 2: MSRvid, images, headlines, MSRpar, deft-forum, deft-news).
    with open(data_root / "sts/stsbenchmark/sts-train.csv", encoding="utf-8") as handle:
        stsb = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    for bucket, path in _write_buckets(target, "stsb", None, stsb, lambda row: row[1]).items():
        add(f"stsb-{bucket}", "stsb", "sts", path, f"STS Benchmark train, {bucket} pairs")
    # SICK train by entailment label.
    header, sick = _read(data_root / "sts/sick2014/SICK_train.txt", delimiter="\t", quoting=csv.QUOTE_NONE)
    label = header.index("entailment_judgment")
    for bucket, path in _write_buckets(target, "sick", header, sick, lambda row: row[label].lower()).items():
        add(f"sick-{bucket}", "sick", "sts", path, f"SICK train, {bucket} pairs")
    # SemEval 2012 train files (the test files are the suite's STS12–15).
    for path in sorted((data_root / "sts/semeval/2012").glob("*.train.tsv")):
        add(f"semeval12-{path.name.split('.')[0]}", "semeval-sts", "sts", path, f"SemEval 2012 STS train, {path.name}")
    add("msrp", "msrp", "pair_classification", data_root / "pair/msrp/msr-para-train.tsv", "MSRP train")
    # WikiQA and TrecQA train by question word.
    header, wikiqa = _read(data_root / "ir/wikiqa/train.tsv", delimiter="\t", quoting=csv.QUOTE_NONE)
    key = _question_buckets(wikiqa, header.index("Question"))
    for bucket, path in _write_buckets(target, "wikiqa", header, wikiqa, key).items():
        add(f"wikiqa-{bucket}", "wikiqa", "retrieval", path, f"WikiQA train, '{bucket}' questions")
    header, trecqa = _read(data_root / "ir/trecqa/train.csv")
    key = _question_buckets(trecqa, header.index("qtext"))
    for bucket, path in _write_buckets(target, "trecqa", header, trecqa, key, delimiter=",").items():
        add(f"trecqa-{bucket}", "trecqa", "retrieval", path, f"TrecQA train, '{bucket}' questions")
    return {"sources": sources}


def epoch_steps(tasks: Mapping[str, Any], batch_size: int) -> int:
    """Optimizer steps of one pass over ``tasks`` with one task per step (a task's last step may be partial)."""
    return sum(-(-len(dataset) // batch_size) for dataset in tasks.values())
