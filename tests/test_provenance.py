"""Source notes (name, format, files, license, source) travel with the rows into every card (issue 15)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from huggingface_hub import DatasetCard, ModelCard

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"
STSB_NOTES = {
    "name": "stsb",
    "format": "stsb",
    "files": ["stsb-train.tsv"],
    "license": "CC-BY-SA-4.0 (scores)",
    "source": "STS Benchmark train (Cer et al., 2017); score/5",
}


@pytest.fixture(scope="module")
def sample_tasks():
    from hf_unified_embed.data import build_unified

    return build_unified(SAMPLE_RECIPE)


def _card_notes(folder: Path) -> dict:
    return DatasetCard.load(folder / "README.md").data.to_dict()["source_notes"]


def test_build_unified_tasks_carry_their_notes(sample_tasks) -> None:
    from hf_unified_embed.data.provenance import notes_of

    assert notes_of(sample_tasks["stsb"]) == STSB_NOTES
    assert notes_of(sample_tasks["msmarco"])["files"] == ["msmarco-dl-sample"]  # a BEIR folder
    assert sample_tasks["sick"].info.license == "CC-BY-NC-SA-3.0"


def test_notes_survive_the_transforms_of_a_python_api_pipeline(sample_tasks) -> None:
    from hf_unified_embed.data.provenance import notes_of

    stsb = sample_tasks["stsb"]
    derived = (
        stsb.shuffle(seed=0)
        .select(range(20))
        .filter(lambda row: len(row["query"]) > 3)
        .map(lambda row: {"query": row["query"].lower()})
        .add_column("difficulty", [0.0] * 20)  # what the curriculum adds
    )
    assert notes_of(derived) == STSB_NOTES


def test_python_api_save_writes_the_notes_and_load_carries_them_back(sample_tasks, tmp_path: Path) -> None:
    from hf_unified_embed.data import load_unified, save_unified
    from hf_unified_embed.data.provenance import notes_of

    first = save_unified(sample_tasks, tmp_path / "data")
    notes = _card_notes(first)
    assert notes["stsb"] == STSB_NOTES
    assert {note["license"] for note in notes.values()} >= {"CC-BY-NC-SA-3.0", "Microsoft Research Data License"}
    text = (first / "README.md").read_text(encoding="utf-8")
    assert "unknown" not in text  # no task lost its source or license
    assert "files `stsb-train.tsv`" in text
    # Five different licenses: the card's license is "other" with the per-task list.
    assert DatasetCard.load(first / "README.md").data.license == "other"

    # A folder derived through the Python API (load → change → save) keeps them, as the CLI does.
    loaded = load_unified(first, tasks=["stsb", "sick"])
    assert notes_of(loaded["stsb"]) == STSB_NOTES
    second = save_unified({"stsb": loaded["stsb"].select(range(10)), "sick": loaded["sick"]}, tmp_path / "derived")
    assert _card_notes(second)["stsb"] == STSB_NOTES


def test_explicit_notes_win_and_plain_datasets_stay_unknown(tmp_path: Path) -> None:
    from datasets import Dataset

    from hf_unified_embed.data import save_unified
    from hf_unified_embed.data.provenance import with_source_notes

    row = {
        "task": "t",
        "task_type": "retrieval",
        "query_instruction": "",
        "document_instruction": "",
        "query": "q",
        "positives": ["p"],
        "negatives": [],
        "positive_scores": [],
        "negative_scores": [],
    }
    plain = Dataset.from_list([row])
    assert _card_notes(save_unified({"t": plain}, tmp_path / "plain"))["t"]["license"] == "unknown"
    noted = with_source_notes(plain, {"license": "mit", "source": "mine"})
    folder = save_unified({"t": noted}, tmp_path / "noted", notes={"t": {"source": "corrected"}})
    assert _card_notes(folder)["t"] == {"source": "corrected", "license": "mit", "format": "unified"}
    assert DatasetCard.load(folder / "README.md").data.license == "mit"


@pytest.mark.parametrize(
    ("licenses", "expected"),
    [
        (["CC-BY-SA-4.0", "cc-by-sa-4.0"], "cc-by-sa-4.0"),
        (["apache-2.0", "mit"], "other"),
        (["CC-BY-SA-4.0 (scores)"], "other"),  # free text is not a Hub license identifier
        (["mit", None], "other"),
        ([], "other"),
    ],
)
def test_card_license_follows_the_sources(licenses: list, expected: str) -> None:
    from hf_unified_embed.data.provenance import card_license

    assert card_license([{"license": value} for value in licenses]) == expected


def test_trained_model_card_shows_sources_licenses_and_rounded_metrics(
    sample_tasks, tiny_model_path: str, tmp_path: Path
) -> None:
    from hf_unified_embed.data import save_unified
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe

    data = save_unified({name: sample_tasks[name] for name in ("stsb", "sick")}, tmp_path / "data")
    suite = {
        "data_root": str(REPO / "examples" / "data"),
        "diagnostics": False,
        "max_rows": 32,
        "evaluations": [{"name": "stsb-dev", "kind": "sts", "source": "stsb", "data_files": "eval/stsb-dev.tsv"}],
    }
    recipe = recipe_from_dict(
        {
            "base_model": tiny_model_path,
            "data": {"path": str(data), "tasks": ["stsb", "sick"]},
            "losses": {"sts": "CoDiEmbSTSLoss"},
            "training_args": {"max_steps": 1, "per_device_train_batch_size": 4},
            "evaluation": suite,
            "output_dir": str(tmp_path / "model"),
        }
    )
    outcome = train_from_recipe(recipe)
    assert outcome.evaluation["stsb-dev"].num_examples == 32  # the suite's max_rows
    card = ModelCard.load(outcome.model_dir / "README.md")
    assert card.data.license == "other"  # two different licenses
    assert "| stsb | sts | 300 |" in card.text and "| CC-BY-SA-4.0 (scores) |" in card.text
    assert "| CC-BY-NC-SA-3.0 |" in card.text and "not one Hub license identifier" in card.text
    front = yaml.safe_load(card.content.split("---")[1])
    results = front["model-index"][0]["results"]
    assert [result["dataset"]["name"] for result in results] == ["stsb-dev"]  # one entry per set
    values = [metric["value"] for result in results for metric in result["metrics"]]
    assert values and all(value == round(value, 4) for value in values)
    # The JSON keeps full precision.
    assert outcome.evaluation["stsb-dev"].metrics["spearman_cosine"] != round(
        outcome.evaluation["stsb-dev"].metrics["spearman_cosine"], 4
    )
