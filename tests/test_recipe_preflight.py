"""Recipe preflight and ``train --check``: every recipe error is caught before data load; a trained model is never lost."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from huggingface_hub import ModelCard

from hf_unified_embed.errors import AfterTrainingError, InputNotFoundError, OutputExistsError, RecipeError, SuiteError
from hf_unified_embed.recipe import recipe_from_dict
from tests import _processes as processes

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"
STSB_DEV = REPO / "examples" / "data" / "eval" / "stsb-dev.tsv"

USER_LOSS_MODULE = '''
from torch import Tensor
from sentence_transformers.util import pairwise_cos_sim

from hf_unified_embed.losses import ColumnLayout, EmbeddingLoss


class ScaledCosineLoss(EmbeddingLoss):
    """Mean squared error between scale * cos(a, b) and the gold score (a user's own loss)."""

    def __init__(self, model, scale: float = 1.0) -> None:
        super().__init__(model)
        self.scale = scale

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        return ColumnLayout.scored_pair()

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor) -> Tensor:
        return ((self.scale * pairwise_cos_sim(embeddings[0], embeddings[1]) - labels) ** 2).mean()

    def get_config_dict(self) -> dict:
        return {"scale": self.scale}


class BuggyLoss(ScaledCosineLoss):
    def __init__(self, model) -> None:
        raise RuntimeError("a bug inside the loss")
'''


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hf_unified_embed.data import build_unified, save_unified

    out = tmp_path_factory.mktemp("unified") / "data"
    save_unified(build_unified(SAMPLE_RECIPE, split="train"), out)
    return out


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "userpkg"
    folder.mkdir()
    (folder / "userlosses.py").write_text(USER_LOSS_MODULE)
    monkeypatch.syspath_prepend(str(folder))
    # This test's module, not one of the same name an earlier test imported.
    monkeypatch.delitem(sys.modules, "userlosses", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    return folder


def _raw(unified_dir: Path, base: str, output: Path, **changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "base_model": base,
        "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa"], "max_rows_per_task": 16},
        "losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss"}, "sts": "CoDiEmbSTSLoss"},
        "negatives_per_query": 2,
        "training_args": {"max_steps": 2, "per_device_train_batch_size": 4},
        "output_dir": str(output),
    }
    raw.update(changes)
    return raw


@pytest.fixture
def no_data_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading data fails loudly: a preflight error must come before it."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("data were loaded before the recipe was checked")

    monkeypatch.setattr("hf_unified_embed.recipe.run.load_tasks", refuse)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"losses": {"sts": "CoDiEmbSTS"}}, RecipeError, r"unknown loss 'CoDiEmbSTS'.*did you mean 'CoDiEmbSTSLoss'"),
        (
            {"losses": {"sts": {"name": "CoDiEmbSTSLoss", "temprature": 0.05}}},
            RecipeError,
            r"losses\.sts: CoDiEmbSTSLoss: got an unexpected keyword argument 'temprature'; its parameters: \[.*'temperature'",
        ),
        ({"losses": {"sts": "no_such_pkg.mod:Loss"}}, RecipeError, r"cannot import module 'no_such_pkg.mod'"),
        (
            {"sampler": {"balance": "sqr"}},
            RecipeError,
            r"'sampler': balance must be one of \['none', 'equal', 'sqrt'\], got 'sqr'",
        ),
        ({"sampler": {"interleave": "zigzag"}}, RecipeError, r"interleave must be one of .*'zigzag'"),
        ({"sampler": {"batch_sizes": {"stsb": 0}}}, RecipeError, r"batch_sizes.stsb must be a positive integer"),
        ({"curriculum": {"teacher": "t", "method": "nope"}}, RecipeError, r"'curriculum': method must be one of"),
        (
            {"training_args": {"learning_rat": 1e-4}},
            RecipeError,
            r"training_args\.learning_rat is not a SentenceTransformerTrainingArguments field; did you mean 'learning_rate'",
        ),
        ({"training_args": {"lr_scheduler_type": "zigzag"}}, RecipeError, r"training_args: .*zigzag"),
        ({"training_args": {"multi_dataset_batch_sampler": "proportional"}}, RecipeError, r"recipe's 'sampler' key"),
        ({"peft": {"rank": 8}}, RecipeError, r"peft: .*rank"),
        ({"evaluation": "no/such/suite.yaml"}, SuiteError, r"suite\.yaml: file does not exist"),
        ({"data": {"path": "./no/such/folder"}}, InputNotFoundError, r"data\.path: \./no/such/folder does not exist"),
        ({"base_model": "/no/such/model"}, InputNotFoundError, r"base_model: /no/such/model does not exist"),
        ({"curriculum": {"plan": "./missing-plan.json"}}, InputNotFoundError, r"curriculum\.plan"),
        ({"data": {"path": "x", "tasks": ["../escape"]}}, RecipeError, r"invalid task name '\.\./escape'"),
        # Values the trainer would only refuse after the data and the model loaded (issue 22).
        (
            {"training_args": {"learning_rate": "fast"}},
            RecipeError,
            r"r\.yaml: training_args\.learning_rate: input should be a valid number, got 'fast'$",
        ),
        (
            {"training_args": {"learning_rate": "1e-4"}},
            RecipeError,
            r"training_args\.learning_rate: .*got '1e-4'; YAML reads a number like 1e-4 without a dot as text",
        ),
        (
            {"training_args": {"per_device_train_batch_size": 0}},
            RecipeError,
            r"training_args\.per_device_train_batch_size: input should be greater than or equal to 1, got 0",
        ),
        (
            {"training_args": {"gradient_accumulation_steps": 0}},
            RecipeError,
            r"training_args\.gradient_accumulation_steps: input should be greater than or equal to 1",
        ),
        (
            {"training_args": {"adam_beta1": 1.0}},
            RecipeError,
            r"training_args\.adam_beta1: input should be less than 1",
        ),
        (
            {"training_args": {"seed": -1}},
            RecipeError,
            r"training_args\.seed: input should be greater than or equal to 0",
        ),
        (
            {"training_args": {"bf16": "yes"}},
            RecipeError,
            r"training_args\.bf16: input should be a valid boolean, got 'yes'",
        ),
        (
            {"training_args": {"fsdp": "full_shard"}},
            RecipeError,
            r"training_args\.fsdp: FSDP (shards the model across GPUs and this machine has none|needs several processes)",
        ),
        (
            {"training_args": {"eval_strategy": "steps"}},
            RecipeError,
            r"eval_strategy 'steps': the run has no eval_dataset",
        ),
        ({"training_args": {"report_to": "nosuch"}}, RecipeError, r"training_args\.report_to \['nosuch'\]: "),
        (
            {"training_args": {"push_to_hub": True}},
            RecipeError,
            r"training_args\.push_to_hub: true, but the Hub is offline \(HF_HUB_OFFLINE=1\)",
        ),
        (
            {"training_args": {"resume_from_checkpoint": "./no/checkpoint-9"}},
            InputNotFoundError,
            r"resume_from_checkpoint: \./no/checkpoint-9 does not exist",
        ),
        (
            {"training_args": {"resume_from_checkpoint": True}},
            InputNotFoundError,
            r"resume_from_checkpoint: true, but .*out-checkpoints holds no checkpoint-\* folder",
        ),
        ({"seed": -5}, RecipeError, r"'seed' must be in \[0, 2\*\*32\), got -5"),
        ({"hub": {"repo_id": "me/bad name!"}}, RecipeError, r"hub\.repo_id: Repo id must use alphanumeric chars"),
        (
            {"losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss", "temperature": "hot"}}},
            RecipeError,
            r"losses\.retrieval\.temperature \(of MultiPositiveInfoNCELoss\): input should be a valid number, got 'hot'",
        ),
        (
            {"losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss", "temperature": 0}}},
            RecipeError,
            r"losses\.retrieval\.temperature \(of MultiPositiveInfoNCELoss\): input should be greater than 0, got 0",
        ),
        (
            {"losses": {"sts": {"name": "CoDiEmbSTSLoss", "pro_weight": -0.5}}},
            RecipeError,
            r"losses\.sts\.pro_weight \(of CoDiEmbSTSLoss\): input should be greater than or equal to 0, got -0\.5",
        ),
        (
            {"losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss", "mini_batch_num_tokens": "lots"}}},
            RecipeError,
            r"losses\.retrieval\.mini_batch_num_tokens \(of MultiPositiveInfoNCELoss\): input should be "
            r"an integer >= 1 or 'auto' or null, got 'lots'",
        ),
        (
            {"losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss", "mini_batch_size": 0}}},
            RecipeError,
            r"r\.yaml: losses\.retrieval\.mini_batch_size \(of MultiPositiveInfoNCELoss\): input should be an integer >= 1 or 'auto' or null, got 0",
        ),
        (
            {"losses": {"sts": {"name": "CoDiEmbSTSLoss", "rank_kl_reduction": "mean"}}},
            RecipeError,
            r"losses\.sts\.rank_kl_reduction \(of CoDiEmbSTSLoss\): input should be 'batchmean' or 'sum', got 'mean'",
        ),
        (
            {"peft": {"r": 4, "target_modules": ["nonexistent_proj"]}},
            RecipeError,
            r"peft: Target modules \{'nonexistent_proj'\} not found in the base model.*BertModel of .* has linear "
            r"layers named \['dense', 'key', 'query', 'value'\]",
        ),
        ({"peft": {"r": "big"}}, RecipeError, r"peft\.r: input should be a valid integer, got 'big'"),
        ({"peft": {"r": 0, "target_modules": ["query"]}}, RecipeError, r"peft: `r` should be a positive integer"),
    ],
)
def test_preflight_rejects_before_data_loads(
    change: dict[str, Any], error: type[Exception], message: str, unified_dir: Path, tiny_model_path: str,
    tmp_path: Path, no_data_load: None,
) -> None:  # fmt: skip
    from hf_unified_embed.recipe.run import train_from_recipe

    with pytest.raises(error, match=message):
        train_from_recipe(recipe_from_dict(_raw(unified_dir, tiny_model_path, tmp_path / "out", **change), "r.yaml"))
    assert not (tmp_path / "out").exists()


def test_attention_implementation_is_resolved_without_weights(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, no_data_load: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers decides on the model built from its configuration on the meta device; no weight is read."""
    from transformers.utils import is_flash_attn_2_available

    from hf_unified_embed.recipe.run import train_from_recipe

    def no_weights(*args: object, **kwargs: object) -> None:
        raise AssertionError("weights were loaded before the recipe was checked")

    monkeypatch.setattr("transformers.PreTrainedModel.from_pretrained", no_weights)
    raw = _raw(unified_dir, tiny_model_path, tmp_path / "out", model={"attn_implementation": "flash_attention_2"})
    if is_flash_attn_2_available():
        pytest.skip("flash-attn is installed here")
    with pytest.raises(
        RecipeError,
        match=r"r\.yaml: model\.attn_implementation 'flash_attention_2': FlashAttention2 has been toggled on, but it cannot be used.*installed",
    ):
        train_from_recipe(recipe_from_dict(raw, "r.yaml"))
    assert not (tmp_path / "out").exists()


def test_deepspeed_without_package_or_gpu(unified_dir: Path, tiny_model_path: str, tmp_path: Path, no_data_load: None):
    import torch

    from hf_unified_embed.errors import IncompatibleStackError
    from hf_unified_embed.recipe.run import train_from_recipe

    raw = _raw(unified_dir, tiny_model_path, tmp_path / "out", training_args={"deepspeed": {"train_batch_size": 4}})
    with pytest.raises((IncompatibleStackError, RecipeError)) as raised:
        train_from_recipe(recipe_from_dict(raw, "r.yaml"))
    if not torch.cuda.is_available():
        assert "training_args.deepspeed" in str(raised.value)


def test_preflight_output_rules(unified_dir: Path, tiny_model_path: str, tmp_path: Path, no_data_load: None) -> None:
    from hf_unified_embed.errors import OutputError
    from hf_unified_embed.recipe.run import train_from_recipe

    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(OutputExistsError, match="not empty"):
        train_from_recipe(recipe_from_dict(_raw(unified_dir, tiny_model_path, out)))
    with pytest.raises(OutputError, match="overlaps the input"):
        train_from_recipe(recipe_from_dict(_raw(unified_dir, tiny_model_path, unified_dir / "model")), overwrite=True)


def test_stock_sampler_refused_with_several_processes(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_data_load: None
) -> None:
    from hf_unified_embed.recipe.preflight import check_sampler_processes

    monkeypatch.setenv("WORLD_SIZE", "2")
    raw = _raw(unified_dir, tiny_model_path, tmp_path / "out", sampler={"kind": "proportional"})
    with pytest.raises(RecipeError, match=r"kind 'proportional' with 2 processes.*CurriculumBatchSampler"):
        check_sampler_processes(recipe_from_dict(raw), 2)
    allowed = recipe_from_dict({**raw, "sampler": {"kind": "proportional", "allow_multi_device": True}})
    check_sampler_processes(allowed, 2)
    with pytest.raises(RecipeError, match="allow_multi_device only applies to the stock samplers"):
        recipe_from_dict({**raw, "sampler": {"allow_multi_device": True}})


@pytest.mark.real_model
def test_check_prints_the_resolved_plan_and_writes_nothing(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hf_unified_embed.cli.main import main

    recipe = tmp_path / "r.yaml"
    raw = _raw(
        unified_dir, tiny_model_path, tmp_path / "out",
        sampler={"batch_sizes": {"wikiqa": 8}},
        evaluation={"evaluations": [{"name": "stsb-dev", "kind": "sts", "source": "stsb", "data_files": str(STSB_DEV)}]},
    )  # fmt: skip
    recipe.write_text(yaml.safe_dump(raw))
    assert main(["train", str(recipe), "--check"]) == 0
    printed = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in printed.splitlines() if line.split()}
    # stsb: 16 rows at batch 4 -> 4 steps; wikiqa: 16 rows at batch 8 -> 2 steps
    assert "CoDiEmbSTSLoss" in lines["stsb"] and lines["stsb"][-2:] == ["4", "4"]
    assert "query, positive_1, negative_1..2" in printed and lines["wikiqa"][-2:] == ["8", "2"]
    assert "positive_1 + label: score" in printed
    assert "optimizer steps per epoch: 6 (max_steps=2)" in printed and "evaluation: " in printed
    assert "CurriculumBatchSampler" in printed
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


@pytest.mark.real_model
def test_user_defined_loss_through_recipe_cli_and_card(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, user_module: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hf_unified_embed.cli.main import main

    recipe = tmp_path / "r.yaml"
    out = tmp_path / "out"
    losses = {"retrieval": "MultiPositiveInfoNCELoss", "sts": {"name": "userlosses:ScaledCosineLoss", "scale": 2.0}}
    recipe.write_text(yaml.safe_dump(_raw(unified_dir, tiny_model_path, out, losses=losses)))
    assert main(["train", str(recipe), "--check"]) == 0
    assert "ScaledCosineLoss" in capsys.readouterr().out
    assert main(["train", str(recipe)]) == 0
    text = ModelCard.load(out / "README.md").text
    assert "`ScaledCosineLoss`" in text and '"scale": 2.0' in text


@pytest.mark.real_model
def test_model_is_saved_before_evaluation_and_kept_when_it_fails(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.recipe.run import train_from_recipe

    suite = {"evaluations": [{"name": "stsb-dev", "kind": "sts", "source": "stsb", "data_files": str(STSB_DEV)}]}

    def failing_suite(*args: object, **kwargs: object) -> None:
        raise SuiteError("stsb-dev: the evaluation data vanished")

    monkeypatch.setattr("hf_unified_embed.evaluation.run_suite", failing_suite)
    out = tmp_path / "out"
    with pytest.raises(
        AfterTrainingError, match=r"the trained model is saved in .*out, but evaluation failed: stsb-dev"
    ):
        train_from_recipe(recipe_from_dict(_raw(unified_dir, tiny_model_path, out, evaluation=suite)))
    assert SentenceTransformer(str(out)).encode(["kept"]).shape == (1, 32)
    assert (out / "hf_unified_embed_recipe.yaml").is_file() and (out / "README.md").is_file()

    def crashing_suite(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in evaluation")

    monkeypatch.setattr("hf_unified_embed.evaluation.run_suite", crashing_suite)
    with pytest.raises(RuntimeError, match="a bug in evaluation"):
        train_from_recipe(recipe_from_dict(_raw(unified_dir, tiny_model_path, out, evaluation=suite)), overwrite=True)
    assert SentenceTransformer(str(out)).encode(["kept"]).shape == (1, 32)


@pytest.mark.real_model
def test_a_push_that_cannot_reach_the_hub_keeps_the_model_and_exits_2(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``hub:`` offline (tests run with HF_HUB_OFFLINE=1, so huggingface_hub itself refuses): exit 2, one line
    saying the model is saved, why the push failed and how to push later; no traceback."""
    import huggingface_hub
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.cli.main import main

    assert huggingface_hub.constants.HF_HUB_OFFLINE
    out = tmp_path / "out"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(_raw(unified_dir, tiny_model_path, out, hub={"repo_id": "me/model"})))
    assert main(["train", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert line.startswith(
        f"error: the trained model is saved in {out}, but the push to the Hub failed: cannot push to the model "
        "repo me/model: OfflineModeIsEnabled: Cannot reach https://huggingface.co/api/repos/create: offline mode"
    ), line
    assert line.endswith(f"; push it later with `hf-unified-embed push {out} me/model`")
    assert SentenceTransformer(str(out)).encode(["kept"]).shape == (1, 32)


CONSOLE_SCRIPT = str(Path(sys.executable).parent / "hf-unified-embed")
LAUNCH_FORMS = {
    "console script": [CONSOLE_SCRIPT],
    "python -m hf_unified_embed.cli.main": [sys.executable, "-m", "hf_unified_embed.cli.main"],
    "python -m hf_unified_embed": [sys.executable, "-m", "hf_unified_embed"],
}


@pytest.mark.real_model
@pytest.mark.parametrize("form", list(LAUNCH_FORMS))
def test_input_error_is_one_line_and_exit_2_in_every_launch_form(
    form: str, unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        yaml.safe_dump(_raw(unified_dir, tiny_model_path, tmp_path / "out", training_args={"learning_rat": 1}))
    )
    completed = processes.run([*LAUNCH_FORMS[form], "train", str(recipe)], expected=processes.Expected())
    assert completed.returncode == 2, processes.failure(completed)
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {recipe}: training_args.learning_rat"), completed.stderr
    assert "did you mean 'learning_rate'" in lines[0]


@pytest.mark.real_model
def test_a_bug_keeps_its_traceback_and_exit_1(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, user_module: Path
) -> None:
    recipe = tmp_path / "r.yaml"
    raw = _raw(
        unified_dir,
        tiny_model_path,
        tmp_path / "out",
        losses={"retrieval": "MultiPositiveInfoNCELoss", "sts": "userlosses:BuggyLoss"},  # a loss that fits the data
    )
    recipe.write_text(yaml.safe_dump(raw))
    completed = processes.run([CONSOLE_SCRIPT, "train", str(recipe)], expected=processes.Expected(steps=1))
    assert completed.returncode == 1, processes.failure(completed)
    assert (
        "Traceback (most recent call last)" in completed.stderr
        and "RuntimeError: a bug inside the loss" in completed.stderr
    )
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*")), "no output, no staging left"


@pytest.mark.multiprocess
def test_under_torchrun_rank_0_prints_once_and_exits_2(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        yaml.safe_dump(_raw(unified_dir, tiny_model_path, tmp_path / "out", sampler={"kind": "proportional"}))
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={processes.free_port()}",
        "-m", "hf_unified_embed.cli.main", "train", str(recipe),
    ]  # fmt: skip
    completed = processes.run(command, expected=processes.Expected(processes=2), env=env)
    assert completed.returncode != 0
    errors = [line for line in completed.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "kind 'proportional' with 2 processes" in errors[0], processes.failure(completed)
    root_cause = completed.stderr.split("Root Cause")[1]
    assert "rank      : 0" in root_cause and "exitcode  : 2" in root_cause, "rank 0 reports and exits 2 first"
    assert "/hf_unified_embed/" not in completed.stderr, "no worker printed a traceback"


@pytest.mark.real_model
def test_kill_9_during_training_then_rerun_leaves_no_staging(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    recipe = tmp_path / "r.yaml"
    raw = _raw(
        unified_dir, tiny_model_path, out, training_args={"max_steps": 100_000, "per_device_train_batch_size": 4}
    )
    recipe.write_text(yaml.safe_dump(raw))
    process = subprocess.Popen([CONSOLE_SCRIPT, "train", str(recipe)], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + processes.time_limit(processes.Expected())
    while not list(tmp_path.glob(".out.staging-*")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # well inside training: data, model and trainer are up
    assert process.poll() is None, process.stderr.read() if process.stderr else ""
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert list(tmp_path.glob(".out.staging-*")) and not out.exists()

    raw["training_args"]["max_steps"] = 1
    recipe.write_text(yaml.safe_dump(raw))
    completed = processes.run([CONSOLE_SCRIPT, "train", str(recipe)], expected=processes.Expected(steps=1))
    assert completed.returncode == 0, processes.failure(completed)
    assert (out / "model.safetensors").is_file()
    assert not list(tmp_path.glob(".out.staging-*")), "the rerun removed the killed run's staging folder"


# -- issue 31: recipe errors before the training stack, base_model a model folder, save_steps --------------------

#: The training stack: importing it takes 5-20 s, a recipe error must come before it.
_STACK = ("torch", "transformers", "sentence_transformers")

_BEFORE_THE_STACK = f"""
import json, sys, time
from hf_unified_embed.cli.main import main
results = []
for recipe in sys.argv[1:]:
    start = time.perf_counter()
    code = main(["train", recipe])
    results.append([recipe, code, time.perf_counter() - start])
print(json.dumps({{"results": results, "imported": [m for m in {_STACK!r} if m in sys.modules]}}))
"""


def test_recipe_errors_are_reported_before_the_training_stack_is_imported(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    """An unknown key, a loss kwarg or name typo, a training_args typo, a dataset folder as base_model: each is one
    line and exit 2 from a process that never imported torch, transformers or sentence-transformers."""
    import json

    cases = {
        "unknown-key": ({"trainig_args": {"max_steps": 1}}, r"unknown key\(s\) \['trainig_args'\]"),
        "loss-kwarg": (
            {
                "losses": {
                    "retrieval": {"name": "MultiPositiveInfoNCELoss", "temprature": 0.05},
                    "sts": "CoDiEmbSTSLoss",
                }
            },
            r"losses\.retrieval: MultiPositiveInfoNCELoss: got an unexpected keyword argument 'temprature'; "
            r"its parameters: \['positives_per_query', 'temperature',",
        ),
        "st-loss-kwarg": (
            {"losses": {"retrieval": {"name": "CoSENTLoss", "scael": 20.0}, "sts": "CoDiEmbSTSLoss"}},
            r"losses\.retrieval: CoSENTLoss: got an unexpected keyword argument 'scael'; its parameters: \['scale'",
        ),
        "loss-name": (
            {"losses": {"retrieval": "MultiPositiveInfoNCELos", "sts": "CoDiEmbSTSLoss"}},
            r"unknown loss 'MultiPositiveInfoNCELos'.*did you mean 'MultiPositiveInfoNCELoss'\?",
        ),
        "training-arg": (
            {"training_args": {"learning_rat": 1e-4}},
            r"training_args\.learning_rat is not a SentenceTransformerTrainingArguments field; did you mean 'learning_rate'",
        ),
        "base-model": (
            {"base_model": str(unified_dir)},
            rf"base_model: {unified_dir} is not a model folder: it has no modules\.json .*unified dataset folder",
        ),
    }
    paths = []
    for name, (change, _) in cases.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(_raw(unified_dir, tiny_model_path, tmp_path / "out", **change)))
        paths.append(str(path))
    completed = subprocess.run(
        [sys.executable, "-c", _BEFORE_THE_STACK, *paths], capture_output=True, text=True, timeout=300, check=False
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["imported"] == [], f"imported before the error: {report['imported']}"
    errors = [line for line in completed.stderr.splitlines() if line.startswith("error:")]
    assert [code for _, code, _ in report["results"]] == [2] * len(cases) and len(errors) == len(cases), (
        completed.stderr
    )
    for (name, (_, message)), line in zip(cases.items(), errors):
        assert re.search(message, line), (name, line)
    assert not (tmp_path / "out").exists()


def test_quick_checks_agree_with_the_imported_classes() -> None:
    """What the source says (no import) is what the imported classes say: every loss's parameters, the
    training-argument fields, the names a bare loss name may take."""
    import dataclasses
    import inspect

    from sentence_transformers import SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer import losses as st_losses

    from hf_unified_embed import losses as unified_losses
    from hf_unified_embed.recipe import source_signatures as source

    kinds = {
        "positional_only": inspect.Parameter.POSITIONAL_ONLY,
        "positional_or_keyword": inspect.Parameter.POSITIONAL_OR_KEYWORD,
        "keyword_only": inspect.Parameter.KEYWORD_ONLY,
    }
    compared = 0
    for module, name in ((unified_losses, "hf_unified_embed.losses"), (st_losses, "sentence_transformers.sentence_transformer.losses")):  # fmt: skip
        assert {n for n in source.bound_names(name) or () if n.endswith("Loss")} == {
            n for n in dir(module) if n.endswith("Loss")
        }
        for attribute in dir(module):
            cls = getattr(module, attribute)
            found = source.find_class(name, attribute)
            if not isinstance(cls, type):
                continue
            assert found is None or (isinstance(found, source.SourceClass) and found.name == cls.__name__), attribute
            parameters = source.init_parameters(found) if isinstance(found, source.SourceClass) else None
            if parameters is None:
                continue
            expected = [
                (p.name, p.kind, p.default is not inspect.Parameter.empty)
                for p in inspect.signature(cls).parameters.values()
            ]
            assert [(p.name, kinds[p.kind], p.has_default) for p in parameters] == expected, attribute
            compared += 1
    assert compared >= 30
    arguments = source.find_class("sentence_transformers", "SentenceTransformerTrainingArguments")
    assert isinstance(arguments, source.SourceClass)
    assert source.dataclass_field_names(arguments) == {
        field.name for field in dataclasses.fields(SentenceTransformerTrainingArguments)
    }


def test_a_base_model_that_is_not_a_model_is_one_line_and_exit_2(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dataset folder or a file is refused before any data loads; a config.json transformers cannot read is
    refused as the model loads — each one line naming base_model and the folder, exit 2."""
    from hf_unified_embed.cli.main import main

    def train(base: Path) -> list[str]:
        recipe = tmp_path / "r.yaml"
        recipe.write_text(yaml.safe_dump(_raw(unified_dir, str(base), tmp_path / "out")))
        assert main(["train", str(recipe)]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        return [line for line in err.splitlines() if line.strip()]

    assert train(unified_dir) == [
        f"error: {tmp_path / 'r.yaml'}: base_model: {unified_dir} is not a model folder: it has no modules.json "
        "(sentence-transformers), config.json (transformers) or adapter_config.json (PEFT adapter); it looks like "
        "a unified dataset folder, which goes under data.path"
    ]
    a_file = tmp_path / "weights.bin"
    a_file.write_bytes(b"0")
    assert train(a_file) == [f"error: {tmp_path / 'r.yaml'}: base_model: {a_file} is a file, not a model folder"]
    unknown = tmp_path / "unknown-model"
    unknown.mkdir()
    (unknown / "config.json").write_text('{"hidden_size": 8}')
    [line] = train(unknown)
    assert line.startswith(
        f"error: {tmp_path / 'r.yaml'}: base_model: {unknown} is not a model folder transformers can load: "
        f"Unrecognized model in {unknown}"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("settings", "strategy", "steps"),
    [
        ({}, "no", 500),
        ({"save_steps": 7}, "steps", 7),
        ({"save_total_limit": 2}, "steps", 500),
        ({"save_only_model": True}, "steps", 500),
        ({"save_only_model": False}, "no", 500),
        ({"save_strategy": "epoch", "save_steps": 7}, "epoch", 7),
        ({"save_strategy": "no", "save_steps": 7}, "no", 7),
        ({"save_strategy": "steps"}, "steps", 500),
    ],
)
def test_save_steps_alone_saves_checkpoints_as_in_transformers(
    settings: dict[str, Any], strategy: str, steps: int, unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    from hf_unified_embed.recipe.preflight import preflight

    raw = _raw(unified_dir, tiny_model_path, tmp_path / "out")
    raw["training_args"].update(settings)
    args = preflight(recipe_from_dict(raw)).training_args
    assert (args.save_strategy.value, args.save_steps) == (strategy, steps)


def test_the_checks_split_by_concern_stay_importable_from_preflight() -> None:
    """preflight.py was split into preflight_losses / _sampler / _training_args; the names the run, the
    tests and users import from ``hf_unified_embed.recipe.preflight`` are the same objects."""
    import importlib

    preflight = importlib.import_module("hf_unified_embed.recipe.preflight")  # the package exports the function
    for name in preflight.__all__:
        found = getattr(preflight, name)
        home = importlib.import_module(found.__module__) if callable(found) else preflight
        assert getattr(home, name, found) is found, name
