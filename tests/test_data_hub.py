"""The `hub` source format on local folders in the exact Hub layout of sentence-transformers datasets.

The folders are built here: parquet files under `<config>/` plus a README whose YAML `configs` maps
configs and splits to files, as `sentence-transformers/all-nli` (pair, pair-score, triplet,
pair-class) and `sentence-transformers/stsb` publish them. They are read through the same
`datasets.load_dataset(path, config, split=..., revision=...)` call a Hub id takes; a Hub id itself
is routed there by replacing `load_dataset` with a lookup of the local copy.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from huggingface_hub import DatasetCard

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import SourceFormatError, build_unified, build_unified_with_report, load_unified
from hf_unified_embed.errors import InputNotFoundError
from hf_unified_embed.utils.locations import looks_local

ALL_NLI = {
    "pair": {
        "anchor": ["A person on a horse jumps.", "Children smiling."],
        "positive": ["A person is outdoors.", "Kids are happy."],
    },
    "pair-score": {
        "sentence1": ["A person on a horse jumps.", "Children smiling.", "A dog runs."],
        "sentence2": ["A person is outdoors.", "Kids are sad.", "An animal moves."],
        "score": [1.0, 0.0, 0.5],
    },
    "triplet": {
        "anchor": ["A person on a horse jumps.", "Children smiling."],
        "positive": ["A person is outdoors.", "Kids are happy."],
        "negative": ["A person is at a diner.", "Kids are frowning."],
    },
    "pair-class": {"premise": ["A dog runs."], "hypothesis": ["An animal moves."], "label": [0]},
}
SPLITS = ("train", "dev", "test")


def write_hub_layout(root: Path, configs: dict[str, dict[str, list]], folder_of=lambda config: config) -> Path:
    """Parquet per config and split plus a README whose `configs` YAML maps them, as on the Hub."""
    entries = []
    for config, columns in configs.items():
        data_files = []
        for split in SPLITS:
            path = root / folder_of(config) / f"{split}-00000-of-00001.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table(columns), path)
            data_files.append({"split": split, "path": f"{folder_of(config)}/{split}-*"})
        entries.append({"config_name": config, "data_files": data_files})
    card = yaml.safe_dump({"language": ["en"], "configs": entries}, sort_keys=False)
    (root / "README.md").write_text(f"---\n{card}---\n\n# local copy\n")
    return root


@pytest.fixture(scope="module")
def all_nli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_hub_layout(tmp_path_factory.mktemp("hub") / "all-nli", ALL_NLI)


@pytest.fixture(scope="module")
def stsb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    columns = {
        "sentence1": ["A plane is taking off.", "A man plays a flute."],
        "sentence2": ["An air plane is taking off.", "A man plays a guitar."],
        "score": [1.0, 0.32],
    }
    return write_hub_layout(tmp_path_factory.mktemp("hub") / "stsb", {"default": columns}, folder_of=lambda _: "data")


def hub_source(name: str, data: str | Path, task_type: str = "retrieval", **options) -> dict:
    return {"name": name, "format": "hub", "data_files": str(data), "task_type": task_type, "options": options}


def test_all_nli_configs_map_onto_the_unified_schema(all_nli: Path):
    built = build_unified(
        {
            "sources": [
                hub_source("nli-pair", all_nli, config="pair"),
                hub_source("nli-triplet", all_nli, config="triplet", negative_columns="negative"),
                hub_source(
                    "nli-score",
                    all_nli,
                    "sts",
                    config="pair-score",
                    query_column="sentence1",
                    positive_columns="sentence2",
                    score_column="score",
                ),
            ]
        }
    )
    assert built["nli-pair"][0]["query"] == "A person on a horse jumps." and built["nli-pair"][1]["positives"] == [
        "Kids are happy."
    ]
    triplet = built["nli-triplet"][1]
    assert (triplet["positives"], triplet["negatives"]) == (["Kids are happy."], ["Kids are frowning."])
    assert built["nli-score"]["positive_scores"] == [[1.0], [0.0], [0.5]]


def test_stsb_layout_with_source_split_and_score_range(stsb: Path):
    source = hub_source(
        "stsb",
        stsb,
        "sts",
        query_column="sentence1",
        positive_columns="sentence2",
        score_column="score",
        source_split="dev",
    )
    rows = build_unified({"sources": [{**source, "split": "validation"}]})["stsb"]
    assert rows.split == "validation" and rows[1]["positive_scores"] == [pytest.approx(0.32)]
    with pytest.raises(
        SourceFormatError,
        match=r"stsb\[default/dev\]:1, field 'score': got 1.0 \(expected a number in \[2, 5\]; set options.score_range",
    ):
        build_unified({"sources": [{**source, "options": {**source["options"], "score_range": [2, 5]}}]})


def test_streaming_and_list_columns_and_saved_datasets(tmp_path: Path, all_nli: Path):
    streamed = build_unified(
        {"sources": [hub_source("t", all_nli, config="triplet", negative_columns="negative", streaming=True)]}
    )
    assert streamed["t"][0]["negatives"] == ["A person is at a diner."]
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict(
        {"q": ["a question"], "docs": [["one answer", "another answer"]], "hard": [["wrong"]]}
    ).save_to_disk(saved)
    rows = build_unified(
        {"sources": [hub_source("s", saved, query_column="q", positive_columns=["docs"], negative_columns=["hard"])]}
    )["s"]
    assert rows[0]["positives"] == ["one answer", "another answer"] and rows[0]["negatives"] == ["wrong"]


def test_a_hub_id_takes_the_same_load_dataset_call_and_lands_in_the_card(
    tmp_path: Path, all_nli: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    calls = []
    real = datasets.load_dataset

    def hub(path, name=None, **kwargs):
        calls.append((path, name, kwargs["split"], kwargs["revision"], kwargs["streaming"]))
        return real(str(all_nli), name, **kwargs)  # the local copy stands in for the repository

    monkeypatch.setattr(datasets, "load_dataset", hub)
    recipe = tmp_path / "recipe.yaml"
    source = hub_source(
        "nli", "sentence-transformers/all-nli", config="triplet", negative_columns="negative", revision="d482672c"
    )
    recipe.write_text(yaml.safe_dump({"sources": [{**source, "license": "CC-BY-SA-4.0"}]}))
    assert not looks_local("sentence-transformers/all-nli", tmp_path)
    out = tmp_path / "out"
    assert main(["build", str(recipe), "-o", str(out)]) == 0
    assert calls == [("sentence-transformers/all-nli", "triplet", "train", "d482672c", False)]
    notes = DatasetCard.load(out / "README.md").data.to_dict()["source_notes"]["nli"]
    assert notes == {
        "source": "hub",
        "license": "CC-BY-SA-4.0",
        "format": "hub",
        "name": "nli",
        "files": ["sentence-transformers/all-nli"],
        "dataset": "sentence-transformers/all-nli",
        "config": "triplet",
        "source_split": "train",
        "revision": "d482672c",
    }
    card = (out / "README.md").read_text()
    assert "dataset `sentence-transformers/all-nli`, config `triplet`, split `train`, revision `d482672c`" in card
    assert len(load_unified(out)["nli"]) == 2
    # The download cache of a build lives in its staging folder: nothing is left beside the output.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "recipe.yaml"]


def test_errors_name_the_dataset_config_split_row_and_field(all_nli: Path, tmp_path: Path):
    with pytest.raises(SourceFormatError, match=r"all-nli\[triplet/train\]:1, field 'negatives': column missing"):
        build_unified({"sources": [hub_source("t", all_nli, config="triplet", negative_columns="negatives")]})
    with pytest.raises(SourceFormatError, match=r"config 'quadruplet'"):
        build_unified({"sources": [hub_source("t", all_nli, config="quadruplet")]})
    with pytest.raises(
        InputNotFoundError, match=r"dataset 'nobody-here/no-such-dataset'.*no local folder of that name either"
    ):
        build_unified({"sources": [hub_source("t", "nobody-here/no-such-dataset")]})
    with pytest.raises(SourceFormatError, match="file not found"):  # looks local: never sent to the Hub
        build_unified({"sources": [hub_source("t", tmp_path / "missing")]})


def test_notes_are_reported_per_task(all_nli: Path):
    result = build_unified_with_report({"sources": [hub_source("p", all_nli, config="pair")]})
    assert result.notes["p"]["config"] == "pair" and result.notes["p"]["revision"] is None


def test_a_folder_that_is_no_dataset_names_the_folder_and_the_cause(tiny_model_path: str, tmp_path: Path, capsys):
    """A model folder given as a hub source: datasets' 'An error occurred while generating the dataset' hides
    the cause; the error names the folder, the cause and what the folder holds."""
    from hf_unified_embed.cli.main import main

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"sources": [hub_source("t", tiny_model_path)]}))
    assert main(["build", str(recipe), "-o", str(tmp_path / "out")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, errors
    assert errors[0].startswith(
        f"error: dataset '{tiny_model_path}', split 'train': datasets cannot read it as a dataset: "
    )
    assert "it looks like a model folder: 1_Pooling, README.md, config.json" in errors[0]
    assert "DatasetGenerationError" not in errors[0] and "An error occurred while generating" not in errors[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recipe.yaml"]
