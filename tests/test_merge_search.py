"""``merge search``: candidates scored on a dev suite; the best is written with the search in its card."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from _merge_helpers import noisy_copy, read_weights
from huggingface_hub import ModelCard

from hf_unified_embed.cli.main import main
from hf_unified_embed.merge import MergeConfig, MergeError, merge_models
from hf_unified_embed.merge.search import search_merge

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SUITE = {
    "name": "tiny-dev",
    "data_root": str(EXAMPLES / "data"),
    "batch_size": 64,
    "evaluations": [
        {"name": "stsb", "kind": "sts", "source": "stsb", "data_files": "stsb-train.tsv", "split": "train"},
        {
            "name": "trecqa",
            "kind": "reranking",
            "source": "trecqa",
            "data_files": "trecqa-train.csv",
            "split": "train",
        },
    ],
}
OBJECTIVE = {"stsb": 1.0, "trecqa/map": 0.5}


@pytest.fixture(scope="module")
def base_and_run(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("search")
    return noisy_copy(tiny_model_path, root / "base", 0, scale=0.0), noisy_copy(
        tiny_model_path, root / "run", 1, scale=0.05
    )


def _suite_metrics(model_path: Path) -> dict[str, float]:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.evaluation import run_suite

    results = run_suite(
        SentenceTransformer(str(model_path), device="cpu"), SUITE, diagnostics=False, show_progress_bar=False
    )
    return {"stsb": results["stsb"].primary_value, "trecqa/map": results["trecqa"].metrics["map"]}


def test_search_scores_candidates_and_writes_the_best(base_and_run: tuple[Path, Path], tmp_path: Path) -> None:
    base, run = base_and_run
    result = search_merge(
        [run],
        "task_arithmetic",
        tmp_path / "best",
        base=base,
        suite=SUITE,
        search={"weights": {"min": 0.0, "max": 1.0, "steps": 3}},
        objective=OBJECTIVE,
        model_ids=["org/run"],
        device="cpu",
        show_progress=False,
    )
    assert [candidate.parameters for candidate in result.candidates] == [{"weights": w} for w in (0.0, 0.5, 1.0)]
    # λ = 0 is the base and λ = 1 the run: their scores are those of the models evaluated directly.
    for candidate, model in ((result.candidates[0], base), (result.candidates[2], run)):
        assert candidate.metrics == pytest.approx(_suite_metrics(model), abs=1e-6)
    scores = [candidate.score for candidate in result.candidates]
    assert result.best_index == scores.index(max(scores))
    assert result.best.score == pytest.approx(sum(w * result.best.metrics[k] for k, w in OBJECTIVE.items()))

    out = tmp_path / "best"
    expected = read_weights(
        merge_models(
            [run],
            "task_arithmetic",
            tmp_path / "direct",
            base=base,
            weights=result.best.parameters["weights"],
            show_progress=False,
        )
    )
    for name, tensor in read_weights(out).items():
        assert torch.equal(tensor, expected[name]), name
    card = ModelCard.load(out / "README.md")
    assert "## Merge search" in card.text and "![Merge search](merge_search.png)" in card.text
    assert f"| {result.best_index} | **" in card.text  # the chosen row is bold
    assert card.data.eval_results and all(round(r.metric_value, 4) == r.metric_value for r in card.data.eval_results)
    assert (out / "merge_search.png").read_bytes()[:4] == b"\x89PNG"
    saved = json.loads((out / "merge_search.json").read_text())
    assert saved["best"] == result.best_index and len(saved["candidates"]) == 3


def test_candidates_via_disk_score_like_in_memory(base_and_run: tuple[Path, Path], tmp_path: Path) -> None:
    base, run = base_and_run
    kwargs = {
        "base": base,
        "suite": SUITE,
        "search": {"weights": [0.25]},
        "objective": OBJECTIVE,
        "device": "cpu",
        "show_progress": False,
    }
    memory = search_merge([run], "task_arithmetic", tmp_path / "m", in_memory=True, **kwargs)
    disk = search_merge([run], "task_arithmetic", tmp_path / "d", in_memory=False, **kwargs)
    assert memory.best.metrics == pytest.approx(disk.best.metrics, abs=1e-7)


def test_search_from_the_cli_and_its_errors(
    base_and_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, run = base_and_run
    config = tmp_path / "search.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "method": "slerp",
                "models": [str(base), str(run)],
                "output_dir": str(tmp_path / "out"),
                "search": {
                    "suite": SUITE,
                    "parameters": {"t": [0.2, 0.8]},
                    "objective": {"stsb": 1.0},
                    "device": "cpu",
                },
            }
        )
    )
    assert main(["merge", str(config), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "{'t': 0.2}" in printed and "{'t': 0.8}" in printed and printed.strip().endswith("out")
    assert (tmp_path / "out" / "merge_search.json").is_file()

    flags = [
        "merge",
        "--method",
        "slerp",
        "--models",
        str(base),
        str(run),
        "-o",
        str(tmp_path / "o2"),
        "--no-progress",
    ]
    bad = [*flags, "--suite", str(config), "--grid", "t=[0.5]", "--objective", "nope=1"]
    assert main(bad) == 2
    assert "error: " in capsys.readouterr().err
    with pytest.raises(MergeError, match=r"search.parameters.t: a range is \{min, max, steps\}"):
        MergeConfig.from_dict(
            {
                "method": "slerp",
                "models": ["a", "b"],
                "output_dir": "x",
                "search": {"suite": SUITE, "parameters": {"t": {"min": 0}}, "objective": {"stsb": 1}},
            }
        )


def test_search_result_reads_back_from_its_json(base_and_run: tuple[Path, Path], tmp_path: Path) -> None:
    from hf_unified_embed.merge.search import SEARCH_FILE, SearchResult

    base, run = base_and_run
    result = search_merge(
        [run],
        "task_arithmetic",
        tmp_path / "o",
        base=base,
        suite=SUITE,
        search={"weights": [0.0, 1.0]},
        objective=OBJECTIVE,
        device="cpu",
        show_progress=False,
    )
    again = SearchResult.from_dict(json.loads((tmp_path / "o" / SEARCH_FILE).read_text()), tmp_path / "o")
    assert again.to_dict() == result.to_dict() and again.best.parameters == result.best.parameters


def test_constraint_keeps_the_base_and_forgetting_joins_the_search(
    base_and_run: tuple[Path, Path], tmp_path: Path
) -> None:
    from hf_unified_embed.merge.search import Candidate, choose_best

    base, run = base_and_run
    suite = {
        **SUITE,
        "evaluations": [
            *SUITE["evaluations"],
            # No reference named: the search compares with the merge's base.
            {
                "name": "forgetting",
                "kind": "forgetting",
                "source": "beir",
                "data_files": "msmarco-dl-sample",
                "evaluator": {"k": 5, "max_texts": 120},
            },
        ],
    }
    result = search_merge(
        [run],
        "task_arithmetic",
        tmp_path / "kept",
        base=base,
        suite=suite,
        search={"weights": [0.0, 0.5, 1.0]},
        objective=OBJECTIVE,
        constraint={"epsilon": {"default": 0.0, "forgetting": 0.0}},
        device="cpu",
        show_progress=False,
    )
    constraint = result.constraint
    assert constraint is not None
    # The base scores itself perfectly on forgetting, and λ = 0 (the base) is admissible with ε = 0.
    assert constraint["base"]["forgetting"] == pytest.approx(1.0)
    assert set(constraint["epsilon"]) == {"stsb", "trecqa/map", "forgetting"}
    assert result.candidates[0].metrics["forgetting"] == pytest.approx(1.0)
    assert result.candidates[0].admissible
    assert result.candidates[2].metrics["forgetting"] < 1.0 and not result.candidates[2].admissible
    for candidate in result.candidates:
        expected = max(
            constraint["base"][m] - constraint["epsilon"][m] - candidate.metrics[m] for m in constraint["base"]
        )
        assert candidate.violation == pytest.approx(expected)
    assert result.best.admissible
    assert result.best.score == max(c.score for c in result.candidates if c.admissible)
    card = (tmp_path / "kept" / "README.md").read_text()
    assert "Constraint (keep the base)" in card and "| — | base |" in card
    saved = json.loads((tmp_path / "kept" / "merge_search.json").read_text())
    assert saved["constraint"]["base"]["forgetting"] == pytest.approx(1.0)
    assert [c["admissible"] for c in saved["candidates"]] == [c.admissible for c in result.candidates]

    # Selection: the best admissible score; with none admissible, the least violating candidate.
    def candidate(score: float, violation: float) -> Candidate:
        return Candidate({}, {}, score, violation=violation)

    assert choose_best([candidate(0.9, 0.01), candidate(0.5, -0.1), candidate(0.6, 0.0)]) == 2
    assert choose_best([candidate(0.9, 0.02), candidate(0.5, 0.01)]) == 1
    with pytest.raises(MergeError, match="epsilon"):
        search_merge(
            [run],
            "task_arithmetic",
            tmp_path / "x",
            base=base,
            suite=SUITE,
            search={"weights": [1.0]},
            objective=OBJECTIVE,
            constraint={"epsilon": -1},
            device="cpu",
            show_progress=False,
        )
    with pytest.raises(MergeError, match="no base"):
        search_merge(
            [run, base],
            "soup",
            tmp_path / "y",
            suite=SUITE,
            search={"weights": [[0.5, 0.5]]},
            objective=OBJECTIVE,
            constraint={"epsilon": 0.01},
            device="cpu",
            show_progress=False,
        )
