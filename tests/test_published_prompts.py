"""A model trained with instructions carries them as its own named prompts, as a user without this package loads it.

Each trained folder is loaded in a fresh process where ``import hf_unified_embed`` fails, from a working
folder outside the repository, with plain ``SentenceTransformer(folder)``; its ``encode_query``,
``encode_document`` and ``encode(prompt_name=task)`` must give what the trained model gave in memory for
the same texts behind the instructions exactly as the training collator put them.
"""

from __future__ import annotations

import json
import os
import shutil
import string
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import DatasetDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.errors import InputError, RecipeError
from hf_unified_embed.training.published_prompts import (
    default_prompt_task,
    prompt_table,
    published_prompts,
)
from tests import _processes as processes
from tests._training_helpers import unified_dataset, unified_row

REPO = Path(__file__).resolve().parent.parent
TEXTS = ["who wrote the origin of species", "A man is playing a guitar.", "what is the capital of france"]

#: Run in the fresh process: plain sentence-transformers, hf_unified_embed unimportable.
_CONSUMER = """
import json, sys
sys.modules["hf_unified_embed"] = None
try:
    import hf_unified_embed
except ImportError:
    pass
else:
    raise SystemExit("hf_unified_embed must not be importable here")
import numpy as np
from sentence_transformers import SentenceTransformer

folder, out, texts, names = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
model = SentenceTransformer(folder, device="cpu")
got = {"encode_query": model.encode_query(texts), "encode_document": model.encode_document(texts)}
for name in names:
    got["name:" + name] = model.encode(texts, prompt_name=name)
got["bare"] = model.encode(texts)
np.savez(out, **got)
"""


def _consumer_embeddings(folder: Path, tmp_path: Path, names: list[str]) -> dict[str, np.ndarray]:
    """What a user without this package gets from ``folder``: one fresh process, cwd outside the repository."""
    outside = tmp_path / "elsewhere"
    outside.mkdir(exist_ok=True)
    out = outside / "got.npz"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    completed = processes.run(
        [sys.executable, "-c", _CONSUMER, str(folder), str(out), json.dumps(TEXTS), json.dumps(names)],
        expected=processes.Expected(),
        cwd=outside,
        env=env,
    )
    assert completed.returncode == 0, processes.failure(completed)
    with np.load(out) as loaded:
        return {key: loaded[key] for key in loaded.files}


def _training_time(model, prompt: str) -> np.ndarray:  # type: ignore[no-untyped-def]
    """``TEXTS`` as the training collator encodes them behind ``prompt`` (``model.preprocess(..., prompt=)``)."""
    model.eval()
    with torch.no_grad():
        features = model.preprocess(TEXTS, prompt=prompt or None)
        return model(features)["sentence_embedding"].cpu().numpy()


def _check_against_training(
    model,  # type: ignore[no-untyped-def]
    folder: Path,
    training: Mapping[str, Mapping[str, str]],
    default: str,
    tmp_path: Path,
) -> dict[str, str]:
    """The saved folder's prompts follow the rule and encode as the in-memory model did in training."""
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    saved = config["prompts"]
    assert config["default_prompt_name"] is None
    assert json.loads((folder / "1_Pooling" / "config.json").read_text())["include_prompt"] is False
    for task, columns in training.items():
        assert saved[task] == columns.get("query", "")
        assert saved[f"{task}_document"] == columns.get("positive", "")
    assert saved["query"] == training[default].get("query", "")
    assert saved["document"] == training[default].get("positive", "")

    tasks = list(training)
    got = _consumer_embeddings(folder, tmp_path, [*tasks, *(f"{task}_document" for task in tasks)])
    expected = {
        "encode_query": _training_time(model, training[default].get("query", "")),
        "encode_document": _training_time(model, training[default].get("positive", "")),
        **{f"name:{task}": _training_time(model, columns.get("query", "")) for task, columns in training.items()},
        **{
            f"name:{task}_document": _training_time(model, columns.get("positive", ""))
            for task, columns in training.items()
        },
    }
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, atol=1e-5, rtol=0, err_msg=key)
    # The instruction matters: without it the embedding is another one.
    assert np.abs(got["encode_query"] - got["bare"]).max() > 1e-3
    return dict(saved)


@pytest.fixture(scope="module")
def unified_dir(sample_unified_dir: Path) -> Path:
    return sample_unified_dir


def test_recipe_run_saves_every_tasks_instructions_as_prompts(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    from hf_unified_embed.data import load_unified
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe
    from hf_unified_embed.training import prompts_from_unified

    recipe = recipe_from_dict(
        {
            "base_model": tiny_model_path,
            "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa", "trecqa"], "max_rows_per_task": 16},
            "losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss"}, "sts": "CoDiEmbSTSLoss"},
            "training_args": {"max_steps": 2, "per_device_train_batch_size": 4},
            "output_dir": str(tmp_path / "model"),
        }
    )
    outcome = train_from_recipe(recipe)
    model = outcome.model
    tasks = load_unified(unified_dir, tasks=["stsb", "wikiqa", "trecqa"])
    training = prompts_from_unified(tasks, model.tokenizer, model.max_seq_length)
    # No default_prompt_task: the first retrieval task with an instruction.
    saved = _check_against_training(model, outcome.model_dir, training, "wikiqa", tmp_path)
    assert saved["query"].startswith("Represent the Wikipedia question")
    assert saved["stsb"].startswith("Represent the sentence for retrieving semantically similar")

    rows = prompt_table(outcome.model_dir)
    assert [row["name"] for row in rows][:2] == ["query", "document"]
    assert rows[0]["task"] == "wikiqa" and rows[0]["call"] == "model.encode_query(texts)"
    by_name = {row["name"]: row for row in rows}
    assert by_name["trecqa_document"]["side"] == "document" and by_name["trecqa_document"]["task"] == "trecqa"
    assert by_name["stsb"]["call"] == 'model.encode(texts, prompt_name="stsb")'


def test_recipe_default_prompt_task_picks_the_defaults(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.preflight import preflight
    from hf_unified_embed.recipe.run import check_recipe, prepare_run

    raw = {
        "base_model": tiny_model_path,
        "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa", "trecqa"], "max_rows_per_task": 8},
        "losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss"}, "sts": "CoDiEmbSTSLoss"},
        "default_prompt_task": "trecqa",
        "output_dir": str(tmp_path / "model"),
    }
    run = prepare_run(preflight(recipe_from_dict(raw)), None, compute_curriculum=False)
    assert run.model.prompts["query"] == run.collator.prompts["trecqa"]["query"]
    assert run.model.prompts["document"] == run.collator.prompts["trecqa"]["positive"]

    run = prepare_run(
        preflight(recipe_from_dict({**raw, "default_prompt_task": False})), None, compute_curriculum=False
    )
    assert run.model.prompts["query"] == run.model.prompts["document"] == ""
    assert run.model.prompts["trecqa"] == run.collator.prompts["trecqa"]["query"]
    assert [row["purpose"] for row in prompt_table(run.model)][:2] == [
        "queries without an instruction, as the base model encoded them (the default of encode_query)",
        "documents without an instruction, as the base model encoded them (the default of encode_document)",
    ]
    with pytest.raises(
        RecipeError, match=r"'default_prompt_task': input should be a string or False or null, got True"
    ):
        recipe_from_dict({**raw, "default_prompt_task": True}, origin="r.yaml")

    with pytest.raises(RecipeError, match=r"r\.yaml: default_prompt_task 'msrp' is not one of data\.tasks"):
        check_recipe(recipe_from_dict({**raw, "default_prompt_task": "msrp"}, origin="r.yaml"))
    with pytest.raises(RecipeError, match=r"default_prompt_task needs instructions: true"):
        recipe_from_dict({**raw, "instructions": False}, origin="r.yaml")


def _tiny_tasks(instruction_end: str = " ") -> DatasetDict:
    """An STS task first, a retrieval task second (the default by the rule), both with instructions."""
    sts = [
        unified_row(
            "pairs", f"sentence {i} about cats", [f"a sentence {i} on cats"], task_type="sts",
            positive_scores=[0.2 * (i % 5)], query_instruction="Represent the sentence:" + instruction_end,
        )
        for i in range(8)
    ]  # fmt: skip
    qa = [
        unified_row(
            "qa", f"what is item {i}", [f"item {i} is a thing"], [f"item {i + 1} is other"],
            query_instruction="Represent the question for retrieving answers:" + instruction_end,
            document_instruction="Represent the answer:" + instruction_end,
        )
        for i in range(8)
    ]  # fmt: skip
    return DatasetDict(pairs=unified_dataset(sts), qa=unified_dataset(qa))


def _train_python_path(model, tasks: DatasetDict, output: Path):  # type: ignore[no-untyped-def]
    """Two steps through ``unified_training`` inside a stock trainer, saved with ``trainer.save_model``."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    from hf_unified_embed import CoDiEmbSTSLoss, MultiPositiveInfoNCELoss, unified_training

    args = SentenceTransformerTrainingArguments(
        output_dir=str(output.parent / "checkpoints"), max_steps=2, per_device_train_batch_size=4,
        learning_rate=1e-3, save_strategy="no", report_to="none", use_cpu=True, seed=3,
    )  # fmt: skip
    kwargs = unified_training(model, tasks, {"retrieval": MultiPositiveInfoNCELoss, "sts": CoDiEmbSTSLoss}, args)
    trainer = SentenceTransformerTrainer(**kwargs)
    trainer.train()
    trainer.save_model(str(output))
    return kwargs["data_collator"].prompts


def test_python_path_saves_the_prompts_with_trainer_save_model(tiny_model_path: str, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(tiny_model_path, device="cpu")
    training = _train_python_path(model, _tiny_tasks(), tmp_path / "model")
    _check_against_training(model, tmp_path / "model", training, "qa", tmp_path)


def test_bpe_prompts_are_saved_with_the_newline_they_trained_with(tiny_qwen2_path: str, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(tiny_qwen2_path, device="cpu")
    training = _train_python_path(model, _tiny_tasks(), tmp_path / "model")
    # Byte-level BPE joins a trailing space to the next word: the collator ended the prompts in a newline.
    assert training["qa"]["query"] == "Represent the question for retrieving answers:\n"
    saved = _check_against_training(model, tmp_path / "model", training, "qa", tmp_path)
    assert saved["query"].endswith("\n") and saved["qa_document"] == "Represent the answer:\n"


def _trained_folder(tiny_model_path: str, root: Path, name: str, tasks: DatasetDict) -> Path:
    from sentence_transformers import SentenceTransformer

    _train_python_path(SentenceTransformer(tiny_model_path, device="cpu"), tasks, root / name)
    return root / name


def test_merge_keeps_the_inputs_prompts_and_refuses_disagreeing_ones(
    tiny_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hf_unified_embed.cli.main import main

    first = _trained_folder(tiny_model_path, tmp_path, "a", _tiny_tasks())
    second = tmp_path / "b"
    shutil.copytree(first, second)  # the same prompts, as two seeds of one recipe have
    args = ["merge", "--method", "soup", "--no-progress", "--no-card"]
    assert main([*args, "--models", str(first), str(second), "-o", str(tmp_path / "soup")]) == 0
    saved = json.loads((first / "config_sentence_transformers.json").read_text())["prompts"]
    merged = json.loads((tmp_path / "soup" / "config_sentence_transformers.json").read_text())["prompts"]
    assert merged == saved and merged["query"]
    got = _consumer_embeddings(tmp_path / "soup", tmp_path, ["qa"])
    np.testing.assert_allclose(got["encode_query"], got["name:qa"], atol=1e-6)

    # Another recipe's instructions: the merged model could carry only one set.
    other = _trained_folder(tiny_model_path, tmp_path, "c", _tiny_tasks(instruction_end=" (other) "))
    capsys.readouterr()
    refused = tmp_path / "refused"
    assert main([*args, "--models", str(first), str(other), "-o", str(refused)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: ") and "\n" not in error
    assert "different prompts" in error and "--prompts-from" in error
    assert not refused.exists() and not list(tmp_path.glob(".refused*"))

    kept = tmp_path / "kept"
    assert main([*args, "--models", str(first), str(other), "-o", str(kept), "--prompts-from", "1"]) == 0
    other_prompts = json.loads((other / "config_sentence_transformers.json").read_text())["prompts"]
    assert json.loads((kept / "config_sentence_transformers.json").read_text())["prompts"] == other_prompts
    import yaml

    assert yaml.safe_load((kept / "merge_config.yaml").read_text())["prompts_from"] == 1
    # A model trained without instructions disagrees with one trained with them.
    bare = tmp_path / "bare"
    shutil.copytree(first, bare)
    config = json.loads((bare / "config_sentence_transformers.json").read_text())
    config["prompts"] = {"query": "", "document": ""}
    (bare / "config_sentence_transformers.json").write_text(json.dumps(config))
    assert main([*args, "--models", str(bare), str(first), "-o", str(tmp_path / "mixed")]) == 2
    assert main([*args, "--models", str(bare), str(first), "-o", str(tmp_path / "mixed"), "--prompts-from",
                 str(bare)]) == 0  # fmt: skip
    mixed = json.loads((tmp_path / "mixed" / "config_sentence_transformers.json").read_text())["prompts"]
    assert mixed == {"query": "", "document": ""}


# Names a user can give a task (the task naming rule), and instruction texts of every kind, empty included.
_names = st.text(string.ascii_letters + string.digits + "_-.", min_size=1, max_size=12).filter(
    lambda name: name[0].isalnum() and ".." not in name and not name.endswith(".")
)
_texts = st.one_of(st.just(""), st.text(min_size=1, max_size=20))
_task = st.tuples(st.sampled_from(["retrieval", "sts", "pair_classification"]), _texts, _texts)


@settings(max_examples=50, deadline=None)
@given(
    tasks=st.dictionaries(_names, _task, min_size=1, max_size=5),
    chosen=st.none() | st.just(False) | st.integers(0, 4),
)
def test_the_saved_prompt_rule(tasks: dict[str, tuple[str, str, str]], chosen: int | bool | None) -> None:
    types = {task: kind for task, (kind, _, _) in tasks.items()}
    training = {
        task: {
            **({"query": query} if query else {}),
            **({"positive": document, "negative": document} if document else {}),
        }
        for task, (_, query, document) in tasks.items()
    }
    training = {task: columns for task, columns in training.items() if columns}
    default_task: str | bool | None = (
        False if chosen is False else list(tasks)[chosen] if chosen is not None and chosen < len(tasks) else None
    )
    claims: dict[str, set[str]] = {}
    default = default_prompt_task(training, types, default_task)  # type: ignore[arg-type]
    if (default is not None or default_task is False) and training:
        # default_prompt_task: false — encode_query / encode_document encode bare texts.
        claims.setdefault("query", set()).add(tasks[default][1] if default else "")
        claims.setdefault("document", set()).add(tasks[default][2] if default else "")
        for task, (_, query, document) in tasks.items():
            claims.setdefault(task, set()).add(query)
            claims.setdefault(f"{task}_document", set()).add(document)
    if any(len(texts) > 1 for texts in claims.values()):
        with pytest.raises(InputError, match="would both be saved under it"):
            published_prompts(training, types, default_task)
        return
    saved = published_prompts(training, types, default_task)
    if not training:
        assert saved == {} and default == (None if default_task is False else default_task)
        return
    instructed = [task for task in tasks if task in training]
    retrieval = [task for task in instructed if types[task] == "retrieval"]
    if default_task is False:
        assert default is None and saved["query"] == saved["document"] == ""
    else:
        assert default == (default_task or (retrieval or instructed)[0])
        assert saved["query"] == tasks[default][1] and saved["document"] == tasks[default][2]
    assert saved == {name: next(iter(texts)) for name, texts in claims.items()}
    for task, (_, query, document) in tasks.items():
        assert saved[task] == query and saved[f"{task}_document"] == document

    class _Model:
        prompts = saved

    rows = prompt_table(_Model())
    assert {row["name"]: row["prompt"] for row in rows} == (saved if any(saved.values()) else {})


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    instruction=st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1, max_size=30).filter(
        str.strip
    ),
    task=_names.filter(lambda name: name not in ("query", "document")),
)
def test_published_prompt_is_the_collators_text_for_any_instruction(
    tiny_model_path: str, instruction: str, task: str
) -> None:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed import MultiPositiveInfoNCELoss
    from hf_unified_embed.training import UnifiedDataCollator, exclude_instructions_from_pooling, publish_prompts

    model = exclude_instructions_from_pooling(SentenceTransformer(tiny_model_path, device="cpu"))
    rows = [unified_row(task, f"q{i}", [f"p{i}"], query_instruction=instruction) for i in range(2)]
    tasks = DatasetDict({task: unified_dataset(rows)})
    try:
        collator = UnifiedDataCollator.for_losses(model, tasks, {task: MultiPositiveInfoNCELoss(model)})
    except InputError:
        return  # an instruction the tokenizer cannot end on a boundary (refused before training)
    publish_prompts(model, tasks, collator.prompts)
    assert model.prompts[task] == model.prompts["query"] == collator.prompts[task]["query"]
    got = model.encode(TEXTS[:1], prompt_name=task)
    np.testing.assert_allclose(got, _training_time(model, collator.prompts[task]["query"])[:1], atol=1e-5)


def test_suite_encodes_a_prompt_text_by_the_models_name(
    tiny_model_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.evaluation import run_suite
    from hf_unified_embed.training.instruction_fit import with_prompt_names

    model = SentenceTransformer(tiny_model_path, device="cpu")
    model.prompts = {"query": "Represent the web query: ", "document": "", "msmarco": "Represent the web query: "}
    assert with_prompt_names({"query_prompt": "Represent the web query: "}, model, "entry 'x'") == {
        "query_prompt_name": "query"
    }
    assert with_prompt_names({"corpus_prompt": ""}, model, "entry 'x'") == {"corpus_prompt_name": "document"}

    def entry(name: str, **options: str) -> dict:
        return {"name": name, "kind": "retrieval", "source": "beir", "data_files": "msmarco-dl-sample",
                "evaluator": options, "max_rows": 5}  # fmt: skip

    suite = {
        "data_root": str(REPO / "examples" / "data"),
        "diagnostics": False,
        "evaluations": [
            entry("user"),  # encode_query / encode_document: the model's own prompts
            entry("same", query_prompt="Represent the web query: "),
            entry("other", query_prompt="Something else: "),
        ],
    }
    with caplog.at_level("WARNING"):
        results = run_suite(model, suite, show_progress_bar=False)
    assert results["same"].metrics == results["user"].metrics
    assert results["other"].metrics != results["user"].metrics
    assert "entry other: evaluator.query_prompt is not one of the model's prompts" in caplog.text
