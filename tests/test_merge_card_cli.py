"""Merged-model card (parsed back with huggingface_hub), the CLI, and the delta analysis."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from _merge_helpers import edited_copy, noisy_copy
from huggingface_hub import ModelCard

from hf_unified_embed.cli.main import main
from hf_unified_embed.merge import analyze_deltas, merge_models


@pytest.fixture(scope="module")
def runs(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("runs")
    return [noisy_copy(tiny_model_path, root / f"run{seed}", seed) for seed in range(3)]


def test_card_metadata_body_and_model_index(runs: list[Path], tmp_path: Path) -> None:
    results = [
        {
            "task_type": "sentence-similarity",
            "dataset_type": "mteb/sts13-sts",
            "dataset_name": "STS13",
            "metric_type": "cosine_spearman",
            "metric_value": 0.812345678,
        },
    ]
    out = merge_models(
        [*runs[:2]],
        "soup",
        tmp_path / "merged",
        weights=[0.25, 0.75],
        model_name="my-org/minilm-soup",
        model_ids=["my-org/run-0", "my-org/run-1"],
        evaluation_results=results,
        show_progress=False,
    )
    card = ModelCard.load(out / "README.md")
    data = card.data.to_dict()
    assert data["base_model"] == ["my-org/run-0", "my-org/run-1"]
    assert data["base_model_relation"] == "merge"
    assert data["library_name"] == "sentence-transformers"
    assert {"merge", "hf-unified-embed", "soup"} <= set(data["tags"])
    assert card.data.eval_results[0].metric_value == 0.8123  # rounded to 4 digits
    assert "| 0.8123 |" in card.text and "0.81234" not in card.text
    assert card.data.model_name == "my-org/minilm-soup"
    assert "### Direct Usage (Sentence Transformers)" in card.text
    assert 'SentenceTransformer("my-org/minilm-soup")' in card.text
    assert "| `encoder.layer.1` |" in card.text and "0.7500" in card.text
    written = yaml.safe_load((out / "merge_config.yaml").read_text())
    assert written["parameters"]["weights"] == [0.25, 0.75]
    assert written["models"] == [{"path": "run0", "id": "my-org/run-0"}, {"path": "run1", "id": "my-org/run-1"}]


def test_card_of_hierarchical_merge_names_roles_and_heatmap(
    runs: list[Path], tiny_model_path: str, tmp_path: Path
) -> None:
    ir = edited_copy(tiny_model_path, tmp_path / "ir", lambda n, t: t * 1.1 if "layer.0" in n else t)
    sts = edited_copy(tiny_model_path, tmp_path / "sts", lambda n, t: t * 1.1 if "layer.1" in n else t)
    out = merge_models(
        runs,
        "hierarchical",
        tmp_path / "h",
        ir_models=[0, 2],
        sts_models=[1, 2],
        base=tiny_model_path,
        ir_specialist=ir,
        sts_specialist=sts,
        show_progress=False,
    )
    card = ModelCard.load(out / "README.md")
    assert card.data.base_model is None  # random local models with no Hub id: no local path instead
    assert "hierarchical" in card.data.tags
    assert "![Layer-wise parameter deviation](delta_heatmap.png)" in card.text
    assert "| Layer | Tensors | Parameters | δ_IR | δ_STS | w_IR | w_STS |" in card.text
    assert "(IR soup, STS soup)" in card.text  # run2 is in both soups
    assert "ir_specialist" in card.text


def test_analyze_deltas_norms_and_heatmap(tiny_model_path: str, tmp_path: Path) -> None:
    ir = edited_copy(
        tiny_model_path, tmp_path / "ir", lambda n, t: t + 1.0 if n == "encoder.layer.0.output.dense.bias" else t
    )
    report = analyze_deltas(
        tiny_model_path, {"IR": ir, "STS": tiny_model_path}, plot_path=tmp_path / "d.png", show_progress=False
    )
    assert list(report.groups) == ["embeddings", "encoder.layer.0", "encoder.layer.1", "pooler"]
    assert report.norms["IR"]["encoder.layer.0"] == pytest.approx(32**0.5)
    assert report.norms["IR"]["encoder.layer.1"] == 0.0 and report.norms["STS"]["encoder.layer.0"] == 0.0
    assert (tmp_path / "d.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.save_json(tmp_path / "d.json").exists()


def test_cli_config_file_and_flags(runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "merge.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "method": "soup",
                "models": [{"path": str(runs[0]), "id": "org/run-0"}, str(runs[1])],
                "output_dir": str(tmp_path / "from-yaml"),
                "parameters": {"weights": [0.5, 0.5]},
                "max_shard_size": "100KB",
            }
        )
    )
    assert main(["merge", str(config), "--no-progress"]) == 0
    assert (tmp_path / "from-yaml" / "model.safetensors.index.json").exists()
    assert ModelCard.load(tmp_path / "from-yaml" / "README.md").data.base_model == ["org/run-0"]

    args = [
        "merge",
        "--method",
        "slerp",
        "--models",
        str(runs[0]),
        str(runs[1]),
        "--t",
        "0.3",
        "-o",
        str(tmp_path / "s"),
        "--no-progress",
    ]
    assert main(args) == 0
    assert capsys.readouterr().out.strip().endswith("s")
    assert main(args) == 2  # not empty, no --overwrite
    assert "not empty" in capsys.readouterr().err
    assert (
        main(
            [
                "merge",
                "--method",
                "soup",
                "--models",
                str(runs[0]),
                str(runs[1]),
                "--weights",
                "0.9",
                "0.9",
                "-o",
                str(tmp_path / "w"),
                "--no-progress",
            ]
        )
        == 2
    )
    assert "sum to 1.8" in capsys.readouterr().err


def test_training_run_files_of_the_reference_are_not_copied(runs: list[Path], tmp_path: Path) -> None:
    """The reference's recipe, trainer arguments, evaluation and plots describe its run, not the merge."""
    import shutil

    reference = shutil.copytree(runs[0], tmp_path / "reference")
    for name in ("hf_unified_embed_recipe.yaml", "trainer_args.json", "evaluation.json", "task_similarity.png"):
        (reference / name).write_text("from the training run")
    out = merge_models([reference, runs[1]], "soup", tmp_path / "merged", show_progress=False, write_card=False)
    copied = {path.name for path in out.iterdir()}
    assert "config.json" in copied and "tokenizer.json" in copied
    assert not copied & {"hf_unified_embed_recipe.yaml", "trainer_args.json", "evaluation.json", "task_similarity.png"}
