"""Evaluation kinds come from a registry: the built-in five, and a user's own kind in its own module."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from scipy.stats import spearmanr

from hf_unified_embed.cli.main import main
from hf_unified_embed.evaluation import (
    EVALUATION_KINDS,
    SuiteError,
    build_evaluators,
    get_evaluation_kind,
    load_suite,
    run_suite,
)
from hf_unified_embed.evaluation.kinds import evaluation_kind as kinds_base
from tests._evaluation_helpers import STS_ROWS, all_kinds_suite, write_evaluation_files

# A kind written the way a user would: one class in the user's own module.
USER_KINDS = """
from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

from hf_unified_embed.evaluation import EvaluationKind, register_evaluation_kind
from hf_unified_embed.evaluation.inputs import sts_pairs


@register_evaluation_kind
class DotSTS(EvaluationKind):
    name = "sts_dot"
    task_type = "sts"
    evaluator_class = EmbeddingSimilarityEvaluator
    primary_metric = "spearman_dot"
    reported_metrics = (r"spearman_dot", r"pearson_dot")
    set_by_kind = ("name", "main_similarity", "similarity_fn_names")

    def build_evaluator(self, entry, rows, options, data_root):
        pairs = sts_pairs(rows, entry.name)
        return self.make(
            entry, options, sentences1=pairs.sentences1, sentences2=pairs.sentences2, scores=pairs.scores,
            main_similarity="dot", similarity_fn_names=["dot"],
        )


class NotAKind:
    pass
"""
MODULE = "hfue_user_kinds"


@pytest.fixture
def user_kinds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The user's module on ``sys.path``; the registry and ``sys.modules`` are restored afterwards."""
    folder = tmp_path / "user_code"
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(USER_KINDS), encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(kinds_base, "EVALUATION_KINDS", dict(kinds_base.EVALUATION_KINDS))
    yield MODULE
    sys.modules.pop(MODULE, None)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_evaluation_files(tmp_path_factory.mktemp("kind-data"))


@pytest.fixture(scope="module")
def tiny_model(tiny_model_path: str) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(tiny_model_path, device="cpu")


def dot_suite(data_root: Path, kind: str) -> dict[str, Any]:
    return {
        "name": "dot-suite",
        "data_root": str(data_root),
        "batch_size": 4,
        "diagnostics": {"max_texts": 8, "batch_size": 4},
        "evaluations": [{"name": "dot", "kind": kind, "source": "semeval-sts", "data_files": "sts/*.tsv"}],
    }


def test_builtin_kinds_describe_themselves() -> None:
    described = {
        name: (kind.task_type, kind.primary_metric, kind.evaluator_class.__name__)
        for name, kind in EVALUATION_KINDS.items()
    }
    assert described == {
        "sts": ("sts", "spearman_cosine", "STSEvaluator"),
        "retrieval": ("retrieval", "cosine_ndcg@10", "GradedInformationRetrievalEvaluator"),
        "reranking": ("retrieval", "map", "AnswerRerankingEvaluator"),
        "pair_classification": ("pair_classification", "cosine_ap", "PairClassificationEvaluator"),
        "forgetting": ("retrieval", "neighbour_overlap@10", "ForgettingEvaluator"),
    }


def test_retrieval_primary_metric_follows_ndcg_at_k(data_root: Path) -> None:
    suite = all_kinds_suite(data_root)
    suite["evaluations"] = [{**suite["evaluations"][1], "evaluator": {"ndcg_at_k": [5, 20]}}]
    assert build_evaluators(suite)["retrieval"].primary_metric == "cosine_ndcg@20"


def test_user_kind_by_import_path_runs_through_run_suite(user_kinds: str, data_root: Path, tiny_model: Any) -> None:
    results = run_suite(tiny_model, dot_suite(data_root, f"{user_kinds}:DotSTS"), show_progress_bar=False)
    entry = results["dot"]
    assert entry.kind == "sts_dot"
    assert entry.primary_metric == "spearman_dot"
    assert list(entry.reported_metrics) == ["spearman_dot", "pearson_dot"]
    assert entry.num_examples == 6  # the base class counts rows: one scored pair each
    labelled = [row for row in STS_ROWS if row[0]]
    first = tiny_model.encode([a for _, a, _ in labelled])
    second = tiny_model.encode([b for _, _, b in labelled])
    expected = spearmanr([float(s) for s, _, _ in labelled], (first * second).sum(axis=1)).statistic
    assert entry.primary_value == pytest.approx(expected, abs=1e-6)
    # The base class's texts (every distinct query and text of the rows) feed the diagnostics.
    assert entry.diagnostics is not None and entry.diagnostics.num_texts == 8
    # Importing the module registered the kind under its own name too.
    assert get_evaluation_kind("sts_dot").name == "sts_dot"
    assert load_suite(dot_suite(data_root, "sts_dot")).entries[0].evaluation_kind.primary_metric == "spearman_dot"


def test_user_kind_through_the_cli(
    user_kinds: str, data_root: Path, tiny_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(yaml.safe_dump(dot_suite(data_root, f"{user_kinds}:DotSTS")), encoding="utf-8")
    output = tmp_path / "results.json"
    assert main(["evaluate", tiny_model_path, str(suite_file), "-o", str(output), "--no-diagnostics"]) == 0
    assert "spearman_dot*" in capsys.readouterr().out
    result = json.loads(output.read_text(encoding="utf-8"))["results"]["dot"]
    assert result["kind"] == "sts_dot" and result["primary_metric"] == "spearman_dot"
    assert np.isfinite(result["metrics"]["spearman_dot"])


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("hfue_user_kinds:NotAKind", r"'kind': evaluation kind 'hfue_user_kinds:NotAKind': .* not an EvaluationKind"),
        ("hfue_user_kinds:Missing", r"'kind': evaluation kind .*has no attribute 'Missing'"),
        ("hfue_no_such_module:Kind", r"'kind': evaluation kind .*cannot import module 'hfue_no_such_module'"),
        (
            "sts_cosine",
            r"'kind': got 'sts_cosine'; expected one of \['forgetting', 'pair_classification', 'reranking'",
        ),
    ],
)
def test_bad_kinds_are_suite_errors(user_kinds: str, data_root: Path, kind: str, message: str) -> None:
    with pytest.raises(SuiteError, match=rf"evaluations\[0\]: entry 'dot', field {message}"):
        load_suite(dot_suite(data_root, kind))


def test_a_kind_cannot_take_a_registered_name(user_kinds: str) -> None:
    from hf_unified_embed.evaluation import EvaluationKind, register_evaluation_kind
    from hf_unified_embed.evaluation.kinds import STSKind

    class Impostor(STSKind):
        name = "sts"

    with pytest.raises(SuiteError, match=r"'sts' is already registered by .*STSKind"):
        register_evaluation_kind(Impostor)

    class Incomplete(EvaluationKind):
        name = "incomplete"
        task_type = "sts"

    with pytest.raises(SuiteError, match=r"Incomplete does not implement \['build_evaluator'\]"):
        register_evaluation_kind(Incomplete)
