"""Hub uploads, tested by capturing the huggingface_hub calls (no network)."""

from __future__ import annotations

from pathlib import Path

import huggingface_hub
import pytest

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import build_unified
from hf_unified_embed.hub.publishing import PushPlan, push_folder, push_unified

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def hub_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict]]:
    calls: list[tuple[str, dict]] = []

    def recorder(name: str):
        def record(*args, **kwargs):
            if name == "upload_folder":  # what huggingface_hub would send: every file not ignored
                from huggingface_hub.utils import filter_repo_objects

                files = (str(p.relative_to(kwargs["folder_path"])) for p in Path(kwargs["folder_path"]).rglob("*"))
                kwargs["uploaded"] = sorted(
                    filter_repo_objects(
                        (f for f in files if (Path(kwargs["folder_path"]) / f).is_file()),
                        ignore_patterns=kwargs.get("ignore_patterns"),
                    )
                )
            calls.append((name, {"args": args, **kwargs}))
            return type("CommitInfo", (), {"commit_url": "https://huggingface.co/fake/commit/1", "pr_url": None})()

        return record

    for name in ("create_repo", "create_branch", "upload_folder"):
        monkeypatch.setattr(huggingface_hub, name, recorder(name))
    return calls


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "README.md").write_text("---\nlibrary_name: sentence-transformers\n---\n# model\n")
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "1_Pooling" / "config.json").write_text("{}")
    return folder


def test_push_folder_creates_repo_branch_and_uploads(hub_calls, model_dir: Path):
    push_folder(model_dir, "me/model", private=True, revision="v1", token="hf_x")
    assert [name for name, _ in hub_calls] == ["create_repo", "create_branch", "upload_folder"]
    create, branch, upload = (kwargs for _, kwargs in hub_calls)
    assert (
        create["args"] == ("me/model",)
        and create["private"] is True
        and create["repo_type"] == "model"
        and create["exist_ok"]
    )
    assert branch["branch"] == "v1" and branch["token"] == "hf_x"
    assert upload["repo_id"] == "me/model" and upload["revision"] == "v1" and upload["create_pr"] is False
    assert upload["uploaded"] == ["1_Pooling/config.json", "README.md", "model.safetensors"]


def test_push_folder_pr_skips_branch_creation(hub_calls, model_dir: Path):
    push_folder(model_dir, "me/model", create_pr=True, revision="main")
    assert [name for name, _ in hub_calls] == ["create_repo", "upload_folder"]
    assert hub_calls[1][1]["create_pr"] is True


def test_dry_run_lists_files_and_card_without_calls(hub_calls, model_dir: Path):
    plan = push_folder(model_dir, "me/model", dry_run=True)
    assert isinstance(plan, PushPlan) and not hub_calls
    assert plan.files == ["1_Pooling/config.json", "README.md", "model.safetensors"]
    assert plan.card is not None and "library_name: sentence-transformers" in plan.card
    assert "would upload 3 file(s) to model repo me/model (public)" in plan.describe()


def test_push_unified_from_datasetdict_and_folder(hub_calls, tmp_path: Path):
    data = tmp_path / "p.jsonl"
    data.write_text('{"anchor": "a", "positive": "b"}\n')
    built = build_unified(
        {"sources": [{"name": "pairs", "format": "pairs", "data_files": str(data), "task_type": "retrieval"}]}
    )
    push_unified(built, "me/data", private=True)
    upload = hub_calls[-1][1]
    assert upload["repo_type"] == "dataset" and upload["uploaded"] == [
        "README.md",
        "data/pairs/train-00000-of-00001.parquet",
    ]
    with pytest.raises(FileNotFoundError, match=r"README\.md"):
        push_unified(tmp_path, "me/data")


def test_cli_push_commands(hub_calls, model_dir: Path, tmp_path: Path, capsys):
    assert main(["push", str(model_dir), "me/model", "--dry-run"]) == 0
    assert "would upload 3 file(s)" in capsys.readouterr().out and not hub_calls
    assert main(["push", str(model_dir), "me/model", "--private", "--create-pr", "--token", "t"]) == 0
    assert (
        hub_calls[-1][1]["create_pr"] is True
        and "uploaded: https://huggingface.co/fake/commit/1" in capsys.readouterr().out
    )
    out = tmp_path / "data"
    assert main(["build", str(REPO / "examples/recipes/sample.yaml"), "-o", str(out)]) == 0
    assert main(["push-dataset", str(out), "me/data", "--dry-run", "--revision", "dev"]) == 0
    printed = capsys.readouterr().out
    assert (
        "dataset repo me/data @ dev" in printed
        and "data/stsb/train-00000-of-00001.parquet" in printed
        and "configs:" in printed
    )
    assert main(["push", str(tmp_path / "nope"), "me/model"]) == 2


def _failing(error: BaseException):
    def call(*args, **kwargs):
        raise error

    return call


def test_an_unreachable_hub_is_a_located_error_not_a_traceback(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    """Offline mode (the real huggingface_hub check: tests run with HF_HUB_OFFLINE=1), a refused connection
    and an HTTP error status each give exit 2 and one line naming the repository and the cause."""
    from huggingface_hub.errors import HfHubHTTPError

    from hf_unified_embed.errors import HubError
    from hf_unified_embed.hub.publishing import HUB_FAILURES

    assert huggingface_hub.constants.HF_HUB_OFFLINE
    with pytest.raises(HubError, match=r"cannot push to the model repo me/model: OfflineModeIsEnabled: Cannot reach"):
        push_folder(model_dir, "me/model")
    assert main(["push", str(model_dir), "me/model"]) == 2
    assert capsys.readouterr().err.startswith("error: cannot push to the model repo me/model: OfflineModeIsEnabled")

    httpx2 = pytest.importorskip("httpx2")  # huggingface_hub 2's HTTP library: a failed connection raises its error
    assert issubclass(httpx2.ConnectError, HUB_FAILURES)
    for error, shown in [
        (httpx2.ConnectError("[Errno 111] Connection refused"), "ConnectError: [Errno 111] Connection refused"),
        (
            HfHubHTTPError(
                "403 Forbidden: you cannot write to me/model",
                response=httpx2.Response(
                    403, request=httpx2.Request("POST", "https://huggingface.co/api/repos/create")
                ),
            ),
            "HfHubHTTPError: 403 Forbidden",
        ),
    ]:
        monkeypatch.setattr(huggingface_hub, "create_repo", _failing(error))
        assert main(["push", str(model_dir), "me/model"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: cannot push to the model repo me/model: {shown}") and "Traceback" not in err


@pytest.mark.parametrize("command", ["push", "push-dataset"])
@pytest.mark.parametrize("repo_id", ["not a/valid repo", "me//model", "me/-model"])
def test_dry_run_refuses_an_invalid_repo_id(hub_calls, model_dir: Path, tmp_path: Path, capsys, command, repo_id):
    folder = model_dir if command == "push" else _unified_folder(tmp_path)
    capsys.readouterr()  # the build's progress bars
    assert main([command, str(folder), repo_id, "--dry-run"]) == 2
    err = capsys.readouterr().err
    kind = "model" if command == "push" else "dataset"
    assert err.startswith(f"error: {repo_id!r} is not a valid Hub {kind} repository id (expected 'user/name')")
    assert err.count("\n") == 1 and not hub_calls


def _unified_folder(tmp_path: Path) -> Path:
    data = tmp_path / "p.jsonl"
    data.write_text('{"anchor": "a", "positive": "b"}\n')
    built = build_unified(
        {"sources": [{"name": "pairs", "format": "pairs", "data_files": str(data), "task_type": "retrieval"}]}
    )
    from hf_unified_embed.data import save_unified

    return save_unified(built, tmp_path / "unified")


def test_dry_run_refuses_a_folder_of_the_other_kind(hub_calls, model_dir: Path, tmp_path: Path, capsys):
    unified = _unified_folder(tmp_path)
    capsys.readouterr()  # the build's progress bars
    assert main(["push", str(unified), "me/model", "--dry-run"]) == 2
    assert capsys.readouterr().err == (
        f"error: {unified} is a unified dataset folder, not a model: upload it with `hf-unified-embed push-dataset` "
        "(push_unified)\n"
    )
    assert main(["push-dataset", str(model_dir), "me/data", "--dry-run"]) == 2
    assert capsys.readouterr().err == (
        f"error: {model_dir} is a model folder (it has model.safetensors), not a dataset: upload it with "
        "`hf-unified-embed push` (repo_type='model')\n"
    )
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("not a model")
    assert main(["push", str(notes), "me/model", "--dry-run"]) == 2
    assert "is not a model folder: it has none of modules.json, config.json" in capsys.readouterr().err
    with pytest.raises(ValueError, match="is a model folder"):
        push_folder(model_dir, "me/data", repo_type="dataset", dry_run=True)
    assert not hub_calls
    # What each push does take still passes.
    assert main(["push-dataset", str(unified), "me/data", "--dry-run"]) == 0
    assert main(["push", str(model_dir), "me/model", "--dry-run"]) == 0
