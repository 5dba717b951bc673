"""Secrets are never written: token-like keys and token values are redacted; push refuses a leaking folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hf_unified_embed.errors import SecretLeakError
from hf_unified_embed.utils.redaction import REDACTED, find_secrets, redact, scrub_text

ENV_TOKEN = "hf_" + "E" * 34
RECIPE_TOKEN = "hf_" + "R" * 34


def test_redact_keys_and_values() -> None:
    data = {
        "hub_token": "anything",
        "push_to_hub_token": None,
        "db": {"password": "pw", "api_key": "k", "client_secret": "s", "keep": "value"},
        "texts": ["a", f"uses {RECIPE_TOKEN} inline"],
        "learning_rate": 2e-5,
    }
    redacted = redact(data, secrets=[])
    assert redacted["hub_token"] == REDACTED and redacted["push_to_hub_token"] is None
    assert redacted["db"] == {"password": REDACTED, "api_key": REDACTED, "client_secret": REDACTED, "keep": "value"}
    assert redacted["texts"] == ["a", f"uses {REDACTED} inline"] and redacted["learning_rate"] == 2e-5
    assert data["hub_token"] == "anything", "the input is not modified"


def test_scrub_text_active_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "short-but-secret-value")
    assert scrub_text("x short-but-secret-value y") == f"x {REDACTED} y"
    assert scrub_text("api_org_" + "z" * 34) == REDACTED


def _all_files(*roots: Path) -> list[Path]:
    return [path for root in roots if root.exists() for path in root.rglob("*") if path.is_file()]


@pytest.mark.real_model
def test_token_in_env_and_recipe_is_written_nowhere_and_never_uploaded(
    tmp_path: Path, tiny_model_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token in the environment and in the recipe: no written byte holds either, the upload list neither."""
    import huggingface_hub

    from hf_unified_embed.data import build_unified, save_unified
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe

    repo = Path(__file__).resolve().parent.parent
    monkeypatch.setenv("HF_TOKEN", ENV_TOKEN)
    data = save_unified(build_unified(repo / "examples/recipes/sample.yaml", split="train"), tmp_path / "data")
    uploads: list[dict[str, Any]] = []

    def capture_upload(**kwargs: Any) -> str:
        folder = Path(kwargs["folder_path"])
        uploads.append({**kwargs, "bytes": b"".join(path.read_bytes() for path in _all_files(folder))})
        return "https://huggingface.co/me/model/commit/1"

    monkeypatch.setattr(huggingface_hub, "create_repo", lambda *args, **kwargs: None)
    monkeypatch.setattr(huggingface_hub, "upload_folder", capture_upload)
    out = tmp_path / "model"
    recipe = recipe_from_dict(
        {
            "base_model": tiny_model_path,
            "data": {"path": str(data), "tasks": ["stsb", "wikiqa"], "max_rows_per_task": 16},
            "losses": {"retrieval": "MultiPositiveInfoNCELoss", "sts": "CoDiEmbSTSLoss"},
            "training_args": {"max_steps": 1, "per_device_train_batch_size": 4, "hub_token": RECIPE_TOKEN},
            "evaluation": {
                "evaluations": [
                    {
                        "name": "stsb",
                        "kind": "sts",
                        "source": "stsb",
                        "data_files": str(repo / "examples/data/eval/stsb-dev.tsv"),
                    }
                ]
            },
            "output_dir": str(out),
            "hub": {"repo_id": "me/model"},
        },
        origin="recipe.yaml",
    )
    train_from_recipe(recipe)

    written = _all_files(out, Path(f"{out}-checkpoints"))
    assert written, "the run wrote files"
    for path in written:
        content = path.read_bytes()
        assert ENV_TOKEN.encode() not in content and RECIPE_TOKEN.encode() not in content, path
    copy = yaml.safe_load((out / "hf_unified_embed_recipe.yaml").read_text())
    assert copy["training_args"]["hub_token"] == REDACTED
    assert len(uploads) == 1 and uploads[0]["token"] == RECIPE_TOKEN, "the recipe's token is used for the push"
    assert ENV_TOKEN.encode() not in uploads[0]["bytes"] and RECIPE_TOKEN.encode() not in uploads[0]["bytes"]


def test_push_refuses_a_folder_holding_the_active_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    from hf_unified_embed.hub.publishing import push_folder

    monkeypatch.setenv("HF_TOKEN", ENV_TOKEN)
    calls: list[str] = []
    monkeypatch.setattr(huggingface_hub, "create_repo", lambda *args, **kwargs: calls.append("create_repo"))
    monkeypatch.setattr(huggingface_hub, "upload_folder", lambda **kwargs: calls.append("upload_folder"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "README.md").write_text("# model\n")
    (folder / "notes.txt").write_text(f"token={ENV_TOKEN}\n")
    assert find_secrets(folder) == [folder / "notes.txt"]
    with pytest.raises(SecretLeakError, match=r"notes\.txt"):
        push_folder(folder, "me/model")
    other = "hf_" + "O" * 34
    (folder / "notes.txt").write_text(f"token={other}\n")
    with pytest.raises(SecretLeakError, match=r"notes\.txt"):
        push_folder(folder, "me/model", token=other)  # the token given to the push is active too
    assert calls == [], "nothing is sent"
