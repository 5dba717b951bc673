"""The trainer's checkpoint folder of a recipe run: checkpoints hold no secret, and no empty folder is left behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hf_unified_embed.utils.redaction import REDACTED

REPO = Path(__file__).resolve().parent.parent
#: A token-like value (``hf_`` + 34 characters) inside the model name: the card renders it.
TOKEN = "hf_" + "M" * 34


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hf_unified_embed.data import build_unified, save_unified

    recipe = REPO / "examples" / "recipes" / "sample.yaml"
    return save_unified(build_unified(recipe, split="train"), tmp_path_factory.mktemp("unified") / "data")


def _recipe(unified_dir: Path, base: str, out: Path, **training_args: Any) -> Any:
    from hf_unified_embed.recipe import recipe_from_dict

    return recipe_from_dict(
        {
            "base_model": base,
            "model_name": f"org/model {TOKEN}",
            "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa"], "max_rows_per_task": 16},
            "losses": {"retrieval": "MultiPositiveInfoNCELoss", "sts": "CoDiEmbSTSLoss"},
            "training_args": {"max_steps": 2, "per_device_train_batch_size": 4, **training_args},
            "output_dir": str(out),
        }
    )


def test_checkpoints_are_redacted_like_the_model(unified_dir: Path, tiny_model_path: str, tmp_path: Path) -> None:
    from hf_unified_embed.recipe.run import train_from_recipe

    out = tmp_path / "model"
    train_from_recipe(_recipe(unified_dir, tiny_model_path, out, save_strategy="steps", save_steps=1))
    checkpoints = Path(f"{out}-checkpoints")
    assert sorted(path.name for path in checkpoints.iterdir()) == ["checkpoint-1", "checkpoint-2"]
    for folder in (out, checkpoints / "checkpoint-1", checkpoints / "checkpoint-2"):
        assert f"# org/model {REDACTED}" in (folder / "README.md").read_text(encoding="utf-8")
    written = [path for root in (out, checkpoints) for path in root.rglob("*") if path.is_file()]
    leaks = [path for path in written if TOKEN.encode() in path.read_bytes()]
    assert not leaks, f"the token is in {leaks}"


def test_a_run_that_saves_no_checkpoint_leaves_no_checkpoint_folder(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    from hf_unified_embed.recipe.run import train_from_recipe

    out = tmp_path / "model"
    train_from_recipe(_recipe(unified_dir, tiny_model_path, out))  # save_strategy: no (the recipe default)
    assert (out / "model.safetensors").is_file()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model"]

    # A checkpoint folder the user already had is theirs: it stays, even empty.
    mine = tmp_path / "mine"
    mine.mkdir()
    train_from_recipe(_recipe(unified_dir, tiny_model_path, tmp_path / "again", output_dir=str(mine)))
    assert mine.is_dir()


@pytest.mark.parametrize("stop", [RuntimeError("the loss diverged"), KeyboardInterrupt()])
def test_a_failed_or_interrupted_run_leaves_no_checkpoint_folder(
    stop: BaseException, unified_dir: Path, tiny_model_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sentence_transformers import SentenceTransformerTrainer

    from hf_unified_embed.recipe.run import train_from_recipe

    def train(trainer: Any, *args: Any, **kwargs: Any) -> Any:
        assert Path(trainer.args.output_dir).is_dir(), "the trainer created its folder"
        raise stop

    monkeypatch.setattr(SentenceTransformerTrainer, "train", train)
    out = tmp_path / "model"
    with pytest.raises(type(stop)):
        train_from_recipe(_recipe(unified_dir, tiny_model_path, out, save_strategy="steps", save_steps=1))
    assert list(tmp_path.iterdir()) == [], "neither the model, its staging folder nor the checkpoint folder"
