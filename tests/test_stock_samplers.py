"""sentence-transformers' ``NoDuplicatesBatchSampler`` on unified rows: full batches, through the trainer.

Every row of a task has the same ``task``, ``task_type`` and instructions (and rows without hard
negatives the same empty ``negatives``), so the sampler, comparing every column, found every row a
duplicate of every other and made batches of one row. The collator's ``valid_label_columns`` keep those
columns out of the comparison; ``training_args.batch_sampler: no_duplicates`` works with the stock
samplers and is refused, with the fix, where it cannot apply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from sentence_transformers.base.data_collator import DEFAULT_LABEL_COLUMNS
from sentence_transformers.base.sampler import NoDuplicatesBatchSampler

from hf_unified_embed.errors import RecipeError
from hf_unified_embed.recipe import recipe_from_dict
from hf_unified_embed.training.collator import NOT_COMPARED_COLUMNS, UnifiedDataCollator

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hf_unified_embed.data import build_unified, save_unified

    out = tmp_path_factory.mktemp("unified") / "data"
    save_unified(build_unified(SAMPLE_RECIPE), out)
    return out


def _batches(dataset: Any, label_columns: list[str] | None, batch_size: int = 16, **options: Any) -> list[list[int]]:
    sampler = NoDuplicatesBatchSampler(
        dataset,
        batch_size=batch_size,
        drop_last=False,
        valid_label_columns=label_columns,
        generator=torch.Generator(),
        seed=0,
        **options,
    )
    return list(sampler)


def _texts(row: dict[str, Any]) -> set[str]:
    return {row["query"], str(row["positives"])}


@pytest.mark.parametrize("hashed", [False, True], ids=["no_duplicates", "no_duplicates_hashed"])
def test_no_duplicates_sampler_fills_batches_of_unified_rows(unified_dir: Path, hashed: bool) -> None:
    from hf_unified_embed.data import load_unified

    tasks = load_unified(unified_dir)
    columns = UnifiedDataCollator(preprocess_fn=lambda texts: {}).valid_label_columns
    assert columns == [*DEFAULT_LABEL_COLUMNS, *NOT_COMPARED_COLUMNS]
    options = {"precompute_hashes": True, "precompute_num_proc": 1} if hashed else {}
    for name, dataset in tasks.items():
        if len(dataset) < 32:
            continue
        # sentence-transformers' own label columns: one row per batch (the bug).
        assert {len(batch) for batch in _batches(dataset, list(DEFAULT_LABEL_COLUMNS), **options)} == {1}, name
        batches = _batches(dataset, columns, **options)
        sizes = [len(batch) for batch in batches]
        assert sorted(index for batch in batches for index in batch) == list(range(len(dataset))), name
        # Full batches; the last one or two hold the remainder and the rows that repeat a query.
        assert sizes.count(16) >= len(dataset) // 16 - 1 and len(sizes) <= -(-len(dataset) // 16) + 1, (name, sizes)
        for batch in batches:  # and no query or positives twice in a batch
            texts = [_texts(dataset[i]) for i in batch]
            assert sum(len(t) for t in texts) == len(set().union(*texts)), name


def _recipe(unified_dir: Path, base: str, output: Path, **extra: Any) -> Any:
    raw = {
        "base_model": base,
        "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa", "msrp"], "max_rows_per_task": 64},
        "losses": {
            "retrieval": "MultiPositiveInfoNCELoss",
            "sts": "CoDiEmbSTSLoss",
            "pair_classification": "CoDiEmbSTSLoss",
        },
        "negatives_per_query": 2,
        "sampler": {"kind": "proportional"},
        "training_args": {"max_steps": 2, "per_device_train_batch_size": 8, "batch_sampler": "no_duplicates"},
        "output_dir": str(output),
    }
    raw.update(extra)
    return recipe_from_dict(raw, origin="r.yaml")


def test_recipe_with_no_duplicates_gives_full_batches_through_the_trainer(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    """The recipe's trainer, as ``train`` builds it, deals full one-task batches without a repeated text."""
    from sentence_transformers import SentenceTransformerTrainer

    from hf_unified_embed.recipe.preflight import preflight
    from hf_unified_embed.recipe.run import prepare_run

    resolved = preflight(_recipe(unified_dir, tiny_model_path, tmp_path / "model"))
    assert getattr(resolved.training_args.batch_sampler, "value", None) == "no_duplicates"
    run = prepare_run(resolved, None)
    trainer = SentenceTransformerTrainer(
        model=run.model,
        args=resolved.training_args,
        train_dataset=run.tasks,
        loss=run.losses,
        data_collator=run.collator,
    )
    loader = trainer.get_train_dataloader()
    rows = torch.utils.data.ConcatDataset(list(run.tasks.values()))
    sizes: dict[str, list[int]] = {}
    for batch in loader.batch_sampler:
        tasks = {rows[i]["task"] for i in batch}
        assert len(tasks) == 1
        texts = [_texts(rows[i]) for i in batch]
        assert sum(len(t) for t in texts) == len(set().union(*texts))
        sizes.setdefault(tasks.pop(), []).append(len(batch))
    assert set(sizes) == {"stsb", "wikiqa", "msrp"}
    for task, task_sizes in sizes.items():  # 64 rows: 8 full batches (a repeated query may spill one row)
        assert task_sizes.count(8) >= 7 and sum(task_sizes) == 64, (task, task_sizes)


def test_recipe_with_no_duplicates_trains_and_the_card_says_so(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    from huggingface_hub import ModelCard

    from hf_unified_embed.recipe.run import train_from_recipe

    out = tmp_path / "model"
    outcome = train_from_recipe(_recipe(unified_dir, tiny_model_path, out, sampler={"kind": "round_robin"}))
    assert outcome.train_loss is not None
    text = ModelCard.load(out / "README.md").text
    assert "MultiDatasetBatchSamplers.ROUND_ROBIN" in text and "no_duplicates" in text


@pytest.mark.parametrize(
    ("sampler", "batch_sampler", "message"),
    [
        ({}, "no_duplicates", r"the curriculum sampler .* would ignore it; set sampler\.kind: proportional"),
        ({}, "no_duplicates_hashed", r"training_args\.batch_sampler 'no_duplicates_hashed': the curriculum"),
        ({"kind": "proportional"}, "group_by_label", r"unified rows have none"),
        ({"kind": "proportional"}, "nodups", r"nodups is not a valid BatchSamplers"),
    ],
)
def test_preflight_refuses_a_batch_sampler_that_cannot_apply(
    tmp_path: Path, sampler: dict[str, Any], batch_sampler: str, message: str
) -> None:
    from hf_unified_embed.recipe.preflight import preflight

    (tmp_path / "data").mkdir()
    recipe = recipe_from_dict(
        {
            "data": str(tmp_path / "data"),
            "losses": {"sts": "CoDiEmbSTSLoss"},
            "sampler": sampler,
            "training_args": {"batch_sampler": batch_sampler},
            "output_dir": str(tmp_path / "model"),
        },
        origin="r.yaml",
    )
    with pytest.raises(RecipeError, match=message):
        preflight(recipe)


def test_the_default_batch_sampler_is_accepted_with_every_sampler(tmp_path: Path) -> None:
    from hf_unified_embed.recipe.preflight import check_batch_sampler

    for kind in ("curriculum", "proportional", "round_robin"):
        recipe = recipe_from_dict(
            {
                "data": "d",
                "losses": {"sts": "CoDiEmbSTSLoss"},
                "sampler": {"kind": kind},
                "training_args": {"batch_sampler": "batch_sampler"},
                "output_dir": str(tmp_path / "model"),
            }
        )
        check_batch_sampler(recipe, "r.yaml")
