"""Builder, recipes, Hub layout round trip, dataset card and the build/validate CLI."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import datasets
import pytest
import yaml
from huggingface_hub import DatasetCard

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import (
    BuildRecipe,
    SourceFormatError,
    SourceSpec,
    UnifiedEmbedBuilder,
    build_unified,
    build_unified_with_report,
    load_unified,
    save_unified,
)
from hf_unified_embed.errors import RecipeError
from hf_unified_embed.schema import UNIFIED_FEATURES, UnifiedSchemaError

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("sample") / "data"
    result = build_unified_with_report(SAMPLE_RECIPE)
    save_unified(result.dataset, out, sources=result.sources, skipped=result.skipped)
    return result, out


def test_sample_recipe_builds_every_task(sample):
    result, _ = sample
    dataset = result.dataset
    assert list(dataset) == ["stsb", "sick", "wikiqa", "wikiqa-passages", "trecqa", "msrp", "msmarco"]
    assert len(dataset["stsb"]) == 300 and dataset["stsb"].features == UNIFIED_FEATURES
    assert dataset["msmarco"].split == "test" and dataset["stsb"].split == "train"
    stsb = dataset["stsb"][0]
    assert stsb["document_instruction"] == stsb["query_instruction"]  # symmetric task
    wikiqa = dataset["wikiqa"][0]
    assert wikiqa["document_instruction"] == "Represent the Wikipedia sentence for retrieval: "
    # the bundled WikiQA slice holds only answered questions; TrecQA's has a few unanswered ones
    assert len(dataset["wikiqa"]) == 250 and not result.skipped.get("wikiqa")
    # the same questions against their paragraphs: one positive passage holding the answer, no negatives
    passages = dataset["wikiqa-passages"]
    assert passages["query"] == dataset["wikiqa"]["query"] and not any(passages["negatives"])
    assert wikiqa["positives"][0] in passages[0]["positives"][0]
    assert result.skipped["trecqa"]["question without a correct candidate"] > 0


def test_round_trip_save_load_equal(sample):
    result, out = sample
    loaded = load_unified(out)
    assert list(loaded) == ["stsb", "sick", "wikiqa", "wikiqa-passages", "trecqa", "msrp"]
    for task, dataset in loaded.items():
        assert dataset.features == UNIFIED_FEATURES
        assert dataset.to_list() == result.dataset[task].to_list()
    test = load_unified(out, split="test")
    assert test["msmarco"].to_list() == result.dataset["msmarco"].to_list()
    assert sorted(p.name for p in (out / "data" / "stsb").iterdir()) == ["train-00000-of-00001.parquet"]


def test_load_dataset_by_task_and_all_config(sample):
    _, out = sample
    stsb = datasets.load_dataset(str(out), "stsb", split="train")
    assert len(stsb) == 300 and stsb[0]["task"] == "stsb"
    everything = datasets.load_dataset(str(out), "all", split="train")
    assert len(everything) == sum(len(d) for t, d in load_unified(out).items())


def test_card_yaml_parses_with_configs_counts_and_notes(sample):
    result, out = sample
    card = DatasetCard.load(out / "README.md")
    data = card.data.to_dict()
    configs = {c["config_name"]: c for c in data["configs"]}
    assert set(configs) == {"stsb", "sick", "wikiqa", "wikiqa-passages", "trecqa", "msrp", "msmarco", "all"}
    assert configs["stsb"]["data_files"] == [{"split": "train", "path": "data/stsb/train-*.parquet"}]
    assert configs["all"]["default"] is True
    counts = {info["config_name"]: info["splits"][0]["num_examples"] for info in data["dataset_info"]}
    assert counts == {task: len(d) for task, d in result.dataset.items()}
    assert data["source_notes"]["sick"]["license"] == "CC-BY-NC-SA-3.0"
    assert data["license"] == "other"
    assert "| `stsb` | train | sts | 300 |" in card.text
    assert "| `positive_scores` | list[float32] |" in card.text


def test_builder_is_a_generator_based_builder_with_one_config_per_source(tmp_path: Path, shared_data: Path):
    spec = SourceSpec(
        name="sts12",
        format="semeval-sts",
        data_files=str(shared_data / "sts/semeval/2012/MSRpar.train.tsv"),
        task_type="sts",
        max_rows=10,
    )
    builder = UnifiedEmbedBuilder(cache_dir=str(tmp_path), config_name=spec.name, source=spec)
    assert isinstance(builder, datasets.GeneratorBasedBuilder) and builder.config.name == "sts12"
    builder.download_and_prepare()
    dataset = builder.as_dataset(split="train")
    assert len(dataset) == 10 and dataset.features == UNIFIED_FEATURES


def test_recipe_as_dict_yaml_and_dataclass(tmp_path: Path, shared_data: Path):
    source = {
        "name": "sick",
        "format": "sick",
        "data_files": str(shared_data / "sts/sick2014/SICK_trial.txt"),
        "task_type": "sts",
        "max_rows": 7,
    }
    (tmp_path / "r.yaml").write_text(yaml.safe_dump({"sources": [source]}))
    for recipe in ({"sources": [source]}, tmp_path / "r.yaml", BuildRecipe([SourceSpec(**source)])):
        assert len(build_unified(recipe)["sick"]) == 7


def test_builds_never_reuse_stale_cache(tmp_path: Path):
    data = tmp_path / "pairs.jsonl"
    data.write_text('{"anchor": "a", "positive": "b"}\n')
    recipe = {"sources": [{"name": "p", "format": "pairs", "data_files": str(data), "task_type": "retrieval"}]}
    cache = tmp_path / "cache"
    assert len(build_unified(recipe, cache_dir=cache)["p"]) == 1
    data.write_text('{"anchor": "a", "positive": "b"}\n{"anchor": "c", "positive": ""}\n')
    with pytest.raises(SourceFormatError, match=r"pairs.jsonl:2, field 'positive'"):
        build_unified(recipe, cache_dir=cache)


def test_multi_task_source_splits_into_tasks(tmp_path: Path):
    (tmp_path / "u.jsonl").write_text(
        '{"task": "a", "query": "q1", "positives": ["p"]}\n{"task": "b", "query": "q2", "positives": ["p"]}\n{"task": "a", "query": "q3", "positives": ["p"]}\n'
    )
    built = build_unified(
        {
            "sources": [
                {
                    "name": "mixed",
                    "format": "unified",
                    "data_files": str(tmp_path / "u.jsonl"),
                    "task_type": "retrieval",
                }
            ]
        }
    )
    assert {task: len(d) for task, d in built.items()} == {"a": 2, "b": 1}


@pytest.mark.parametrize(
    ("source", "error", "match"),
    [
        ({"format": "zzz"}, RecipeError, "source 's', field 'format': unknown source format 'zzz'"),
        ({"task_type": "ranking"}, RecipeError, "field 'task_type'"),
        ({"data_files": "missing.tsv"}, SourceFormatError, "missing.tsv, field 'data_files': file not found"),
        ({"colour": 1}, RecipeError, r"unknown field\(s\) \['colour'\]"),
        ({"task_type": None}, UnifiedSchemaError, "no task_type"),
    ],
)
def test_recipe_errors(tmp_path: Path, source, error, match):
    (tmp_path / "s.tsv").write_text("g\tf\t2012\t1\t5\ta\tb\n")
    spec = {"name": "s", "format": "stsb", "data_files": str(tmp_path / "s.tsv"), "task_type": "sts", **source}
    if source.get("data_files") == "missing.tsv":
        spec["data_files"] = str(tmp_path / "missing.tsv")
    with pytest.raises(error, match=match):
        build_unified({"sources": [spec]})


def test_save_refuses_non_empty_output_unless_overwrite(sample, tmp_path: Path):
    result, _ = sample
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="overwrite"):
        save_unified(result.dataset, out)
    with pytest.raises(OSError, match="not written by hf-unified-embed"):  # overwrite replaces only the tool's
        save_unified(result.dataset, out, overwrite=True)
    assert (out / "keep.txt").exists()
    (out / "keep.txt").unlink()
    save_unified(result.dataset, out)  # an empty folder is no one's
    save_unified(result.dataset, out, overwrite=True)  # the tool's own output: replaced
    assert (out / "README.md").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no staging left behind


# --- CLI ---------------------------------------------------------------------------------------


def test_cli_build_prints_summary_and_validate_passes(tmp_path: Path, capsys):
    out = tmp_path / "demo"
    assert main(["build", str(SAMPLE_RECIPE), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "task" in printed and re.search(r"^stsb +train +sts ", printed, re.MULTILINE) and "wrote" in printed
    assert main(["build", str(SAMPLE_RECIPE), "-o", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["validate", str(out)]) == 0
    assert "7 task(s) valid" in capsys.readouterr().out


def test_cli_bad_input_exits_non_zero_without_partial_output(tmp_path: Path, capsys):
    examples = REPO / "examples" / "data"
    shutil.copy(examples / "stsb-train.tsv", tmp_path / "stsb.tsv")
    with open(tmp_path / "stsb.tsv", "a") as handle:
        handle.write("main-captions\tMSRvid\t2012test\t9999\t6.5\tA.\tB.\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        yaml.safe_dump({"sources": [{"name": "stsb", "format": "stsb", "data_files": "stsb.tsv", "task_type": "sts"}]})
    )
    out = tmp_path / "out"
    assert main(["build", str(recipe), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "stsb.tsv:301, field 'score': got '6.5' (expected a number in [0, 5]; for another range use" in err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml", "stsb.tsv"]


def test_cli_validate_reports_schema_violation(sample, tmp_path: Path, capsys):
    import pyarrow.parquet as pq

    _, out = sample
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    shard = broken / "data" / "stsb" / "train-00000-of-00001.parquet"
    table = pq.read_table(shard)
    scores = table.column("positive_scores").to_pylist()
    scores[3] = [2.0]
    table = table.set_column(table.schema.get_field_index("positive_scores"), "positive_scores", [scores])
    pq.write_table(table, shard)
    assert main(["validate", str(broken)]) == 2
    assert "task 'stsb', row 3, field 'positive_scores'" in capsys.readouterr().err
