"""Streaming multi-task training (issue 32): ``MultiTaskStream`` in the stock trainer, in two real processes,
killed and resumed, from a recipe with ``data.streaming: true``, and at 10M rows with flat memory.

The unit rules of the stream (coverage, windows, weights, state round trips) are in test_streaming_units.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.errors import RecipeError
from hf_unified_embed.recipe import recipe_from_dict
from tests import _processes as processes

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"
SCRIPT = Path(__file__).parent / "_dist" / "stream_steps.py"


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hf_unified_embed.data import build_unified, save_unified

    out = tmp_path_factory.mktemp("unified") / "data"
    save_unified(build_unified(SAMPLE_RECIPE), out)
    return out


def _recipe(unified_dir: Path, base: str, output: Path, **extra: Any) -> dict[str, Any]:
    recipe: dict[str, Any] = {
        "base_model": base,
        "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa"], "streaming": True, "shuffle_window": 16},
        "losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss"}, "sts": "CoDiEmbSTSLoss"},
        "negatives_per_query": 2,
        "training_args": {"max_steps": 4, "per_device_train_batch_size": 4},
        "output_dir": str(output),
    }
    recipe.update(extra)
    return recipe


# -- two processes, killed and resumed ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rank_batches(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[list]]:
    """``{mode: [rank0 batches, rank1 batches]}`` for the full run, the killed run and its resumption."""
    out = tmp_path_factory.mktemp("stream-dist")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    for mode, returncode in (("full", 0), ("kill", 1), ("resume", 0)):
        # 8 (or 4) steps of a tiny BERT in each of two processes: about 15 s per launch measured.
        result = processes.run(
            [*command, str(SCRIPT), tiny_model_path, str(out), mode],
            expected=processes.Expected(processes=2, steps=16),
            env=env,
        )
        assert result.returncode == returncode, processes.failure(result)
    return {
        mode: [json.loads((out / f"{mode}.rank{rank}.json").read_text()) for rank in (0, 1)]
        for mode in ("full", "kill", "resume")
    }


@pytest.mark.multiprocess
def test_every_optimizer_step_is_one_task_on_both_processes(rank_batches: dict[str, list[list]]) -> None:
    rank0, rank1 = rank_batches["full"]
    accumulation = 2
    # 8 steps of 2 batches, and the batch accelerate reads ahead to see whether the data ended
    assert len(rank0) == len(rank1) == 8 * accumulation + 1
    for start in range(0, 8 * accumulation, accumulation):
        step = rank0[start : start + accumulation] + rank1[start : start + accumulation]
        tasks = {task for task, _ in step}
        assert len(tasks) == 1, f"optimizer step {start // accumulation} mixes tasks {tasks}"
        rows = [row for _, batch in step for row in batch]
        assert len(rows) == len(set(rows)), f"the processes read the same rows in step {start // accumulation}"
    assert {task for task, _ in rank0} == {"pairs", "triplets"}


@pytest.mark.multiprocess
def test_each_process_reads_its_own_part_of_every_task(rank_batches: dict[str, list[list]]) -> None:
    rank0, rank1 = rank_batches["full"]
    # triplets (1 shard < 2 processes): every process keeps every other row of it (split_dataset_by_node)
    for rank, batches in enumerate((rank0, rank1)):
        first_pass = [row for task, rows in batches if task == "triplets" for row in rows][:15]
        assert all(row % 2 == rank for row in first_pass), first_pass
    # pairs (4 shards): each process reads two whole shards of 10 rows
    seen = [{row // 10 for task, rows in batches if task == "pairs" for row in rows} for batches in (rank0, rank1)]
    assert seen[0].isdisjoint(seen[1]) and all(len(shards) <= 2 for shards in seen), seen


@pytest.mark.multiprocess
def test_a_run_killed_after_a_checkpoint_resumes_with_the_batches_of_the_uninterrupted_run(
    rank_batches: dict[str, list[list]],
) -> None:
    accumulation, killed_at = 2, 4
    for rank in (0, 1):
        full, killed, resumed = (rank_batches[mode][rank] for mode in ("full", "kill", "resume"))
        assert killed == full[: len(killed)]
        assert resumed == full[killed_at * accumulation :]


# -- the trainer in one process ------------------------------------------------------------------------------------


def test_attach_refuses_trainer_settings_a_stream_cannot_resume_or_split_with(
    tiny_model_path: str, tmp_path: Path
) -> None:
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from hf_unified_embed.sampling import MultiTaskStream
    from tests._sampling_helpers import two_task_dataset

    data = two_task_dataset()
    stream = MultiTaskStream({name: ds.to_iterable_dataset() for name, ds in data.items()}, weights="equal")
    model = SentenceTransformer(tiny_model_path, device="cpu")
    loss = MultipleNegativesRankingLoss(model)

    def trainer(**settings: Any) -> Any:
        args = SentenceTransformerTrainingArguments(
            output_dir=str(tmp_path), max_steps=2, report_to="none", use_cpu=True, **settings
        )
        return SentenceTransformerTrainer(model=model, args=args, loss={"pairs": loss, "triplets": loss})

    with pytest.raises(ValueError, match="ignore_data_skip=True"):
        stream.attach(trainer())
    with pytest.raises(ValueError, match="dataloader_num_workers=0"):
        stream.attach(trainer(ignore_data_skip=True, dataloader_num_workers=1))
    with pytest.raises(ValueError, match="dispatch_batches"):
        stream.attach(trainer(ignore_data_skip=True))
    with pytest.raises(ValueError, match="no loss for task"):
        stream.attach(
            SentenceTransformerTrainer(
                model=model,
                args=SentenceTransformerTrainingArguments(
                    output_dir=str(tmp_path),
                    max_steps=2,
                    report_to="none",
                    use_cpu=True,
                    ignore_data_skip=True,
                    accelerator_config={"dispatch_batches": False},
                ),
                loss={"pairs": loss},
            )
        )
    with pytest.raises(ValueError, match="batch_size is 3 but the trainer's is 8"):
        MultiTaskStream(stream.tasks, weights="equal", batch_size=3).attach(
            trainer(ignore_data_skip=True, accelerator_config={"dispatch_batches": False})
        )


def _rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads the resident set size from /proc")
def test_a_ten_million_row_stream_trains_fifty_steps_with_flat_memory(tiny_model_path: str, tmp_path: Path) -> None:
    from datasets import Features, IterableDataset, Value
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers import TrainerCallback

    from hf_unified_embed.sampling import MultiTaskStream

    rows_per_shard, shards = 100_000, 50  # 5M rows per task, never held anywhere

    def rows(task: str, shard_ids: list[int]) -> Any:
        for shard in shard_ids:
            for row in range(rows_per_shard):
                number = shard * rows_per_shard + row
                yield {"anchor": f"{task} question {number}", "positive": f"answer {number} of {task}"}

    features = Features({"anchor": Value("string"), "positive": Value("string")})
    tasks = {
        task: IterableDataset.from_generator(
            rows, gen_kwargs={"task": task, "shard_ids": list(range(shards))}, features=features
        )
        for task in ("faq", "search")
    }
    total = {task: rows_per_shard * shards for task in tasks}
    stream = MultiTaskStream(tasks, rows_per_task=total, weights="none", shuffle_window=1000)

    class Memory(TrainerCallback):
        def __init__(self) -> None:
            self.mb: dict[int, float] = {}

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.mb[state.global_step] = _rss_mb()

    model = SentenceTransformer(tiny_model_path, device="cpu")
    loss = MultipleNegativesRankingLoss(model)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path),
        max_steps=50,
        per_device_train_batch_size=16,
        ignore_data_skip=True,
        accelerator_config={"dispatch_batches": False},
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    memory = Memory()
    trainer = SentenceTransformerTrainer(
        model=model, args=args, loss={"faq": loss, "search": loss}, callbacks=[memory]
    )
    stream.attach(trainer)
    trainer.train()
    assert sum(total.values()) == 10_000_000 and len(memory.mb) == 50
    # After the first steps have built the model's and the optimizer's buffers, memory stays where it is:
    # the stream holds one window per task, whatever the size of the data.
    growth = max(memory.mb.values()) - memory.mb[10]
    assert growth < 40, f"RSS grew {growth:.0f} MB from step 10 to step 50: {memory.mb}"


# -- the recipe -----------------------------------------------------------------------------------------------------


def test_streaming_recipe_trains_checks_resumes_and_describes_the_stream_in_the_card(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    from huggingface_hub import ModelCard

    from hf_unified_embed.recipe.run import check_recipe, train_from_recipe

    out = tmp_path / "model"
    raw = _recipe(unified_dir, tiny_model_path, out, sampler={"balance": "sqrt"})
    raw["training_args"]["save_steps"] = 2
    plan = check_recipe(recipe_from_dict(raw))
    assert "class=MultiTaskStream, weights=sqrt" in plan and "~steps" in plan and "streamed: max_steps=4" in plan
    assert train_from_recipe(recipe_from_dict(raw)).train_loss is not None
    checkpoint = tmp_path / "model-checkpoints" / "checkpoint-2"
    saved = json.loads((checkpoint / "trainer_state.json").read_text())["stateful_callbacks"]["StreamResumeCallback"]
    assert saved["attributes"]["step"] == 2 and len(saved["attributes"]["processes"]) == 1
    card = ModelCard.load(out / "README.md")
    assert "| class | `MultiTaskStream` |" in card.text and "| weights | `sqrt` |" in card.text
    # the row counts the data declares, not those of the first rows the run set itself up from
    assert "| stsb | sts | 300 |" in card.text and "| wikiqa | retrieval | 250 |" in card.text
    raw["training_args"].update(resume_from_checkpoint=str(checkpoint))
    assert train_from_recipe(recipe_from_dict(raw), overwrite=True).train_loss is not None


def test_a_resumed_streaming_run_ends_with_the_uninterrupted_run_s_weights(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    """The tiny BERT has dropout, so the resumed steps' masks must come from the RNG state the checkpoint saved:
    before, starting the dataloader's iterator after the restore drew from it and the weights ended 5e-5 apart."""
    import numpy as np
    from safetensors.numpy import load_file

    from hf_unified_embed.recipe.run import train_from_recipe

    def trained(name: str, **training: Any) -> dict[str, np.ndarray]:
        raw = _recipe(unified_dir, tiny_model_path, tmp_path / name)
        raw["training_args"].update(save_steps=2, seed=3, **training)
        train_from_recipe(recipe_from_dict(raw))
        return load_file(tmp_path / name / "model.safetensors")

    full = trained("full")
    resumed = trained("resumed", resume_from_checkpoint=str(tmp_path / "full-checkpoints" / "checkpoint-2"))
    assert resumed.keys() == full.keys()
    for key, weights in full.items():
        np.testing.assert_allclose(resumed[key], weights, atol=1e-7, err_msg=key)


STREAMING_REFUSALS = [
    ({"sampler": {"kind": "proportional"}}, "sampler.kind 'proportional' does not apply with data.streaming"),
    ({"sampler": {"interleave": "round_robin"}}, "sampler.interleave 'round_robin' does not apply"),
    ({"sampler": {"instance_order": "easy_to_hard"}}, "sampler.instance_order 'easy_to_hard' does not apply"),
    ({"sampler": {"batch_sizes": {"stsb": 8}}}, "sampler.batch_sizes does not apply"),
    ({"curriculum": {"plan": "plan.json"}}, "curriculum does not apply"),
    ({"data": {"max_rows_per_task": 10}}, "data.max_rows_per_task does not apply"),
    ({"training_args": {"dataloader_num_workers": 2}}, "dataloader_num_workers 2 does not apply"),
    ({"training_args": {"ignore_data_skip": False}}, "ignore_data_skip false does not apply"),
    ({"training_args": {"accelerator_config": {"dispatch_batches": True}}}, "accelerator_config does not apply"),
    ({"training_args": {"max_steps": None}}, "needs training_args.max_steps"),
    ({"training_args": {"num_train_epochs": 2, "max_steps": -1}}, "needs training_args.max_steps"),
    ({"sampler": {"weights": {"stsb": 1, "wikiqa": 1}, "balance": "sqrt"}}, "either weights or balance"),
    ({"sampler": {"weights": {"stsb": 1}}}, "gives no weight to task(s) ['wikiqa']"),
    ({"sampler": {"weights": {"stsb": 1, "wikiqa": 1, "sick": 1}}}, "names task(s) ['sick'] that the run does not"),
    ({"sampler": {"weights": {"stsb": 0, "wikiqa": 0}}}, "are all 0"),
    ({"sampler": {"weights": {"stsb": -1, "wikiqa": 1}}}, "weights.stsb must be a number >= 0"),
    ({"data": {"streaming": False}, "sampler": {"weights": {"stsb": 1, "wikiqa": 2}}}, "apply to streaming runs"),
]


def _merged(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in change.items():
        merged[key] = {**base[key], **value} if isinstance(base.get(key), dict) and isinstance(value, dict) else value
    return merged


@pytest.mark.parametrize(("change", "message"), STREAMING_REFUSALS)
def test_streaming_recipes_that_cannot_work_are_refused_before_data_loads(
    change: dict[str, Any], message: str, unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    from hf_unified_embed.recipe.preflight import preflight

    raw = _merged(_recipe(unified_dir, tiny_model_path, tmp_path / "model"), change)
    with pytest.raises(RecipeError) as caught:
        preflight(recipe_from_dict(raw))
    assert message in str(caught.value)
    assert not (tmp_path / "model").exists()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change=st.sampled_from(STREAMING_REFUSALS))
def test_the_train_command_exits_2_with_one_line_and_writes_nothing(
    change: tuple[dict[str, Any], str],
    unified_dir: Path,
    tiny_model_path: str,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hf_unified_embed.cli.main import main

    folder = tmp_path_factory.mktemp("refused")
    raw = _merged(_recipe(unified_dir, tiny_model_path, folder / "model"), change[0])
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    before = sorted(p.name for p in folder.iterdir())
    capsys.readouterr()
    assert main(["train", str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and change[1] in error, error
    assert sorted(p.name for p in folder.iterdir()) == before


def test_example_streaming_recipe_checks_on_a_unified_folder(unified_dir: Path, tmp_path: Path) -> None:
    from hf_unified_embed.recipe import load_train_recipe
    from hf_unified_embed.recipe.run import check_recipe

    recipe = load_train_recipe(REPO / "examples" / "recipes" / "train_streaming.yaml")
    assert recipe.data.streaming and recipe.sampler.balance == "sqrt"
    recipe.data.path, recipe.data.tasks = str(unified_dir), ["stsb", "wikiqa"]
    recipe.output_dir, recipe.evaluation = str(tmp_path / "model"), None
    plan = check_recipe(recipe)
    assert "class=MultiTaskStream" in plan and "streamed: max_steps=300" in plan


@pytest.mark.multiprocess
def test_streaming_recipe_under_torchrun_two_processes(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    recipe_path = tmp_path / "recipe.yaml"
    out = tmp_path / "model"
    raw = _recipe(unified_dir, tiny_model_path, out)
    raw["training_args"]["save_steps"] = 2
    recipe_path.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        "-m", "hf_unified_embed.cli.main", "train", str(recipe_path),
    ]  # fmt: skip
    completed = processes.run(command, expected=processes.Expected(processes=2, steps=4), env=env)
    assert completed.returncode == 0, processes.failure(completed)
    assert (out / "model.safetensors").is_file()
    assert (
        "| world_size | `2` |" in (out / "README.md").read_text()
        and "MultiTaskStream" in (out / "README.md").read_text()
    )
    state = json.loads((tmp_path / "model-checkpoints" / "checkpoint-4" / "trainer_state.json").read_text())
    processes_state = state["stateful_callbacks"]["StreamResumeCallback"]["attributes"]["processes"]
    # both processes' places in their streams: 4 steps of 4 rows each read (one window, no pass ended yet)
    assert [process["step"] for process in processes_state] == [4, 4]
    for process in processes_state:
        assert sum(task["offset"] for task in process["tasks"].values()) == 16


def test_a_hub_dataset_streams_with_the_same_load_dataset_call_and_its_rows_are_checked(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Hub here: the repository's card and files are the local folder's, reached through the calls a Hub
    id takes (``read_card`` and ``datasets.load_dataset(repo_id, task, streaming=True)``), which are recorded."""
    from datasets import load_dataset
    from huggingface_hub import ModelCard

    from hf_unified_embed.data import hub_layout
    from hf_unified_embed.data.layout_check import read_card
    from hf_unified_embed.recipe.run import train_from_recipe

    calls: list[tuple[str, str, dict[str, Any]]] = []

    def hub_load(path: str, name: str, **kwargs: Any) -> Any:
        calls.append((path, name, kwargs))
        return load_dataset(str(unified_dir), name, **kwargs)

    monkeypatch.setattr(hub_layout, "load_dataset", hub_load)
    monkeypatch.setattr(hub_layout, "read_card", lambda repo, token=None: read_card(unified_dir))
    out = tmp_path / "model"
    raw = _recipe(unified_dir, tiny_model_path, out)
    raw["data"]["path"] = "my-org/unified-data"
    train_from_recipe(recipe_from_dict(raw))
    assert [(path, name, kwargs["streaming"]) for path, name, kwargs in calls] == [
        ("my-org/unified-data", "stsb", True),
        ("my-org/unified-data", "wikiqa", True),
    ]
    assert "Unified dataset: `my-org/unified-data`" in ModelCard.load(out / "README.md").text
