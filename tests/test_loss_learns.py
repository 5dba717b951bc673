"""A loss the check accepts for a task learns from its rows: loss or gradient is not zero in a one-batch probe.

The loss × task check (``train --check``, ``losses_for_tasks``) asks each loss's ``column_layout`` what it
reads and its ``learns_from`` whether it has a gradient on the rows. hypothesis draws a loss (every loss a
recipe can name that the collator feeds), a data shape built from real rows (STS Benchmark's graded
scores, MSRP's 0/1 labels, WikiQA's questions with their answers and wrong answers, with a teacher's
scores or a curriculum difficulty) and ``negatives_per_query``; when the check accepts the pair, the
trainer's collator lays the task's rows out as one batch and a tiny BERT computes the loss and its
gradient: one of them must not be zero. The defects this came from — ``DistillKLLoss`` on scored pairs (a
KL divergence over one candidate) and ``OnlineContrastiveLoss`` on graded STS scores (it selects no pair)
trained with loss 0.0 — are tests of their own, and so is the streaming check, which read the first 256
rows only.
"""

from __future__ import annotations

import csv
import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from _training_helpers import unified_dataset
from datasets import DatasetDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.errors import LossFitError
from hf_unified_embed.losses.columns import TaskColumns
from hf_unified_embed.losses.overview import DATA_SHAPES, fitting
from hf_unified_embed.losses.task_fit import check_loss_fits, stand_in
from hf_unified_embed.recipe.preflight_losses import check_losses_fit_tasks, resolve_loss_class
from hf_unified_embed.recipe.train_recipe import recipe_from_dict

#: The offline copies of the real datasets (the ``shared_data`` fixture's folder), read once per module.
DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data not found at {DATA}")

#: Every loss a recipe can name whose columns the collator knows.
LOSS_NAMES = [
    *("AnglEJointLoss", "CoDiEmbSTSLoss", "CurriculumInfoNCELoss", "DistillKLLoss", "DistillMarginMSELoss"),
    *("GURLoss", "InstructorLoss", "MidLayerInfoNCELoss", "MultiPositiveInfoNCELoss", "PROLoss", "PearsonLoss"),
    *("RankKLLoss", "MultipleNegativesRankingLoss", "CachedMultipleNegativesRankingLoss", "CoSENTLoss"),
    *("CosineSimilarityLoss", "ContrastiveLoss", "OnlineContrastiveLoss", "AnglELoss", "TripletLoss"),
    *("MultipleNegativesSymmetricRankingLoss", "MegaBatchMarginLoss"),
]

ROWS = 16

PROPERTY = settings(
    derandomize=os.environ.get("INPUT_PROPERTY_RANDOM") != "1",
    deadline=None,
    database=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _row(task_type: str, query: str, positives: list[str], **fields: Any) -> dict[str, Any]:
    return {
        "task": "t",
        "task_type": task_type,
        "query_instruction": "",
        "document_instruction": "",
        "query": query,
        "positives": positives,
        "negatives": fields.pop("negatives", []),
        "positive_scores": fields.pop("positive_scores", []),
        "negative_scores": fields.pop("negative_scores", []),
        **fields,
    }


def _overlap(query: str, document: str) -> float:
    """A word-overlap teacher: the Jaccard similarity of the two texts' words, in [0, 1]."""
    a, b = set(query.lower().split()), set(document.lower().split())
    return round(len(a & b) / max(len(a | b), 1), 4)


@functools.cache
def _stsb(graded_only: bool = False) -> list[tuple[float, str, str]]:
    with open(DATA / "sts" / "stsbenchmark" / "sts-train.csv", encoding="utf-8") as handle:
        rows = [line.rstrip("\n").split("\t") for line in handle]
    pairs = [(float(r[4]) / 5, r[5], r[6]) for r in rows if len(r) >= 7]
    if graded_only:  # the defect's rows: continuous scores, none exactly 0 or 1
        pairs = [p for p in pairs if 0 < p[0] < 1]
    return pairs[:: len(pairs) // ROWS][:ROWS]


@functools.cache
def _msrp() -> list[tuple[float, str, str]]:
    with open(DATA / "pair" / "msrp" / "msr-para-train.tsv", encoding="utf-8-sig") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [(float(r[0]), r[3], r[4]) for r in rows[:ROWS]]


@functools.cache
def _wikiqa() -> list[tuple[str, list[str], list[str]]]:
    questions: dict[str, tuple[str, list[str], list[str]]] = {}
    with open(DATA / "ir" / "wikiqa" / "train.tsv", encoding="utf-8") as handle:
        for record in csv.DictReader(handle, delimiter="\t"):
            _, positives, negatives = questions.setdefault(record["Question"], (record["Question"], [], []))
            (positives if record["Label"] == "1" else negatives).append(record["Sentence"])
    answered = [q for q in questions.values() if q[1] and q[2]]
    return answered[:ROWS]


def shape_rows(shape: str) -> DatasetDict:
    """``ROWS`` real unified rows of ``shape`` as the one task ``t``."""
    if shape in ("graded", "graded_only"):
        rows = [_row("sts", a, [b], positive_scores=[s]) for s, a, b in _stsb(shape == "graded_only")]
    elif shape == "binary":
        rows = [_row("pair_classification", a, [b], positive_scores=[s]) for s, a, b in _msrp()]
    else:
        rows = []
        for index, (query, positives, negatives) in enumerate(_wikiqa()):
            fields: dict[str, Any] = {}
            if shape != "pairs":
                fields["negatives"] = negatives[:3]
            if shape == "teacher":
                fields["positive_scores"] = [max(0.5, _overlap(query, p)) for p in positives]
                fields["negative_scores"] = [min(0.49, _overlap(query, n)) for n in negatives[:3]]
            if shape == "difficulty":
                fields["difficulty"] = index / ROWS
            rows.append(_row("retrieval", query, positives, **fields))
    return DatasetDict({"t": unified_dataset(rows)})


SHAPES = ["graded", "binary", "pairs", "negatives", "teacher", "difficulty"]


def check(loss: str, data: DatasetDict, negatives_per_query: int) -> LossFitError | None:
    """``train --check``'s loss check of ``loss`` on the task of ``data``: the error, or ``None``."""
    task_type = data["t"][0]["task_type"]
    cls = resolve_loss_class(loss)
    if negatives_per_query == 0:  # a recipe asks for 1 or more; the Python path (losses_for_tasks) takes 0
        loss_stand_in = stand_in(cls, {})
        assert loss_stand_in is not None
        try:
            check_loss_fits(loss_stand_in, TaskColumns.of(data["t"], "t"), 0, f"losses.{task_type}")
        except LossFitError as error:
            return error.within("r.yaml")  # type: ignore[return-value]
        return None
    recipe = recipe_from_dict(
        {
            "data": {"path": "d"},
            "losses": {task_type: loss},
            "negatives_per_query": negatives_per_query,
            "output_dir": "o",
        },
        "r.yaml",
    )
    try:
        check_losses_fit_tasks(recipe, {task_type: (cls, {})}, data)
    except LossFitError as error:
        return error
    return None


def probe(loss_name: str, data: DatasetDict, negatives_per_query: int, model_path: str) -> tuple[float, float]:
    """Loss and gradient norm of ``loss_name`` on all rows of ``data``'s task as one batch, as the trainer
    computes them: the bridge's collator, the trainer's own split of the batch into columns, one backward."""
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

    from hf_unified_embed.training import UnifiedDataCollator

    torch.manual_seed(0)
    model = SentenceTransformer(model_path, device="cpu")
    loss = resolve_loss_class(loss_name)(model)
    collator = UnifiedDataCollator.for_losses(
        model, data, {"t": loss}, negatives_per_query=negatives_per_query, seed=0
    )
    batch = collator([dict(row) for row in data["t"]])
    # the trainer's split of the batch into one feature dict per column (it reads nothing of the trainer)
    features, labels = SentenceTransformerTrainer.collect_features(None, batch)  # type: ignore[arg-type]
    value = loss(features, labels)
    total = sum(value.values()) if isinstance(value, Mapping) else value
    total.backward()
    gradient = sum(float(p.grad.norm()) for p in model.parameters() if p.grad is not None)
    return float(total.detach()), gradient


@settings(PROPERTY)
@given(
    loss=st.sampled_from(LOSS_NAMES),
    shape=st.sampled_from(SHAPES),
    negatives_per_query=st.sampled_from([0, 1, 2]),
)
def test_every_pair_the_check_accepts_learns_from_real_rows(
    loss: str, shape: str, negatives_per_query: int, tiny_model_path: str
) -> None:
    data = shape_rows(shape)
    error = check(loss, data, negatives_per_query)
    if error is not None:
        assert re.match(rf"^r\.yaml: losses\.\w+: task 't' \(\w+\) cannot train with {loss}: .+", str(error)), error
        return
    value, gradient = probe(loss, data, negatives_per_query, tiny_model_path)
    assert value != 0.0 or gradient != 0.0, (
        f"{loss} accepted on {shape} rows (K-={negatives_per_query}) learns nothing"
    )


@pytest.mark.parametrize(
    ("loss", "shape", "negatives_per_query", "why"),
    [
        ("DistillKLLoss", "graded", 2, "it compares each row's own documents (at least 2; over 1 "),
        ("DistillKLLoss", "teacher", 0, "these rows give it 1: set negatives_per_query to 1 or more"),
        ("OnlineContrastiveLoss", "graded_only", 1, "it learns only from pairs labelled exactly 0 or 1, and these scores are graded"),
    ],
)  # fmt: skip
def test_the_losses_that_trained_nothing_are_refused_naming_loss_task_and_why(
    loss: str, shape: str, negatives_per_query: int, why: str, tiny_model_path: str
) -> None:
    data = shape_rows(shape)
    # the defect: with the rows laid out as the trainer lays them, loss and gradient are exactly 0
    assert probe(loss, data, negatives_per_query, tiny_model_path) == (0.0, 0.0)
    message = str(check(loss, data, negatives_per_query))
    task_type = data["t"][0]["task_type"]
    assert message.startswith(
        f"r.yaml: losses.{task_type}: task 't' ({task_type}) cannot train with {loss}: it would learn nothing: "
    ), message
    assert why in message.partition("; losses that fit")[0], message
    assert "\n" not in message and f"{loss}," not in message.partition("losses that fit this task")[2]


def test_the_python_path_refuses_them_too(tiny_model_path: str) -> None:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed import DistillKLLoss
    from hf_unified_embed.training import losses_for_tasks

    model = SentenceTransformer(tiny_model_path, device="cpu")
    with pytest.raises(LossFitError, match=r"^losses\['sts'\]: task 't' \(sts\) cannot train with DistillKLLoss: it would learn nothing"):  # fmt: skip
        losses_for_tasks(model, shape_rows("graded"), {"sts": DistillKLLoss})


def test_the_table_lists_no_loss_that_learns_nothing_and_recommends_losses_that_read_all_the_rows_carry() -> None:
    by_description = {shape.description: shape for shape in DATA_SHAPES}
    graded = next(s for d, s in by_description.items() if "graded score" in d)
    binary = next(s for d, s in by_description.items() if "labelled 0 or 1" in d)
    graded_fits = {fit.name: fit for fit in fitting(graded, "sts")}
    assert "DistillKLLoss" not in graded_fits and "OnlineContrastiveLoss" not in graded_fits
    assert "OnlineContrastiveLoss" in {fit.name for fit in fitting(binary, "pair_classification") if fit.recommended}
    assert {"CoSENTLoss", "CoDiEmbSTSLoss", "AnglEJointLoss"} <= {n for n, f in graded_fits.items() if f.recommended}
    # an in-batch loss reads the pairs and not their scores: listed, not recommended, and says so
    assert not graded_fits["MultipleNegativesRankingLoss"].recommended
    assert "ignores the scores" in graded_fits["MultipleNegativesRankingLoss"].cell()
    for shape in DATA_SHAPES:
        for task_type in shape.task_types:
            fits = fitting(shape, task_type)
            assert any(fit.recommended for fit in fits), (shape.description, task_type)
            assert all(fit.recommended or fit.ignores or True for fit in fits)
            # recommended first, and never one that leaves a column of the rows unread
            flags = [fit.recommended for fit in fits]
            assert flags == sorted(flags, reverse=True)
            assert not any(fit.recommended and fit.ignores for fit in fits)


def test_a_loss_that_selects_scores_above_a_threshold_is_refused_when_none_reaches_it() -> None:
    low = DatasetDict(
        {"t": unified_dataset([_row("sts", a, [b], positive_scores=[min(s, 0.7)]) for s, a, b in _stsb()])}
    )
    message = str(check("MidLayerInfoNCELoss", low, 1))
    assert "it learns only from pairs scored 0.8 or more, and the highest score of these rows is 0.7" in message
    assert check("MidLayerInfoNCELoss", shape_rows("graded"), 1) is None
    assert TaskColumns.of(low["t"], "t").score_values[-1] == pytest.approx(0.7)


def test_the_streaming_check_reads_rows_of_every_shard(tmp_path: Path) -> None:
    """The defect: a stream whose first 256 rows have hard negatives and whose later files have none passed
    the check with TripletLoss, which needs a negative of the row's own, and crashed at step 33."""
    from hf_unified_embed.data import save_unified
    from hf_unified_embed.recipe.run_data import STREAM_SAMPLE_ROWS, load_streams

    rows = [
        _row(
            "retrieval", f"question {i}", [f"the answer to question {i}"], negatives=[f"not it {i}"] if i < 400 else []
        )
        for i in range(600)
    ]
    folder = save_unified(DatasetDict({"t": unified_dataset(rows)}), tmp_path / "data", max_shard_bytes=8_000)
    assert len(list((folder / "data" / "t").glob("*.parquet"))) >= 3
    raw = {"data": {"path": str(folder), "streaming": True}, "losses": {"retrieval": "TripletLoss"}, "output_dir": "o"}
    recipe = recipe_from_dict(raw, "r.yaml")
    _, samples = load_streams(recipe)
    assert any(not row["negatives"] for row in samples["t"])  # the last files' rows are in the sample
    assert all(row["negatives"] for row in samples["t"].select(range(STREAM_SAMPLE_ROWS // 2)))
    with pytest.raises(
        LossFitError, match=r"cannot train with TripletLoss: it needs negatives \(empty in \d+ of \d+ rows\)"
    ):
        check_losses_fit_tasks(recipe, {"retrieval": (resolve_loss_class("TripletLoss"), {})}, samples)
