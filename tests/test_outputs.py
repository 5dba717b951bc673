"""StagedOutput: outputs appear whole or not at all, stale staging folders of dead processes are removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hf_unified_embed.errors import OutputError, OutputExistsError, SecretLeakError
from hf_unified_embed.utils.outputs import (
    MARKER,
    StagedOutput,
    check_output,
    mark_output,
    remove_stale_staging,
    written_by_tool,
)
from hf_unified_embed.utils.redaction import REDACTED, remember_secret


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _staging_name(target: Path, pid: int) -> str:
    from hf_unified_embed.utils.outputs import _host

    return f".{target.name}.staging-{_host()}-{pid}-0123abcd"


def test_folder_appears_only_on_success(tmp_path: Path) -> None:
    target = tmp_path / "out"
    with pytest.raises(RuntimeError), StagedOutput(target) as stage:
        (stage.path / "a.txt").write_text("partial")
        (stage.scratch / "cache").write_text("x")
        raise RuntimeError("crash")
    assert not target.exists() and list(tmp_path.iterdir()) == []

    with StagedOutput(target) as stage:
        (stage.path / "a.txt").write_text("done")
    assert (target / "a.txt").read_text() == "done"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "no staging or scratch left"


def test_overwrite_rules_and_replacement(tmp_path: Path) -> None:
    target = tmp_path / "out"
    with StagedOutput(target) as stage:
        (stage.path / "old.txt").write_text("old")
    assert sorted(p.name for p in target.iterdir()) == [MARKER, "old.txt"], "every output folder is marked"
    with pytest.raises(OutputExistsError, match="not empty; pass --overwrite"):
        StagedOutput(target)
    with StagedOutput(target, overwrite=True) as stage:
        (stage.path / "new.txt").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == [MARKER, "new.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="not a folder"):
        StagedOutput(tmp_path / "file")
    empty = tmp_path / "empty"
    empty.mkdir()
    with StagedOutput(empty) as stage:  # an empty folder needs no overwrite
        (stage.path / "x").write_text("x")
    assert (empty / "x").exists()


def test_overwrite_replaces_only_what_the_tool_wrote(tmp_path: Path) -> None:
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("the user's")
    with pytest.raises(OutputExistsError, match="not written by hf-unified-embed"):
        StagedOutput(foreign)
    with pytest.raises(OutputError, match=r"notes exists and was not written by hf-unified-embed \(no "):
        StagedOutput(foreign, overwrite=True)
    assert (foreign / "mine.txt").read_text() == "the user's"

    results = tmp_path / "results.json"
    results.write_text('{"metrics": 1}')  # JSON, but not the tool's
    with pytest.raises(OutputError, match="not a result file of this tool"):
        StagedOutput(results, kind="file", overwrite=True)
    results.write_text(json.dumps({"written_by": "hf-unified-embed", "results": {}}))
    with StagedOutput(results, kind="file", overwrite=True) as stage:
        stage.path.write_text("{}")
    legacy = tmp_path / "legacy.json"  # evaluation results written before the key existed
    legacy.write_text(json.dumps(dict.fromkeys(["model", "suite", "results", "table", "model-index"])))
    plan = tmp_path / "plan.json"  # a curriculum plan, known by its keys
    plan.write_text(json.dumps(dict.fromkeys(["version", "tasks", "order", "similarity", "score", "method"])))
    assert (
        written_by_tool(legacy) and written_by_tool(plan) and not written_by_tool(tmp_path / "file-that-is-not-there")
    )
    (tmp_path / "file").write_text("x")
    assert not written_by_tool(tmp_path / "file") and not written_by_tool(foreign)

    model = tmp_path / "model"  # a file directly inside a folder the tool wrote is the tool's
    with StagedOutput(model) as stage:
        (stage.path / "README.md").write_text("card")
    with StagedOutput(model / "README.md", kind="file", overwrite=True) as stage:
        stage.path.write_text("new card")
    assert (model / "README.md").read_text() == "new card"


@pytest.mark.parametrize("name", ["", ".", "cwd", "..", "parent", "home", "/"])
def test_the_current_folder_its_ancestors_home_and_root_are_never_outputs(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "project" / "work"
    work.mkdir(parents=True)
    (work / "keep.txt").write_text("x")
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    target = {"cwd": str(work), "parent": str(tmp_path), "home": str(tmp_path / "home")}.get(name, name)
    why = {"": "is empty", "/": "is the root folder", "home": "is the home folder", ".": "is the current folder"}
    for overwrite in (False, True):
        for kind in ("folder", "file"):
            with pytest.raises(OutputError, match=why.get(name, "current folder")):
                check_output(target, overwrite=overwrite, kind=kind)  # type: ignore[arg-type]
    assert (work / "keep.txt").read_text() == "x"


def test_check_output_names_the_path_and_returns_it_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert check_output("fresh", overwrite=False) == tmp_path / "fresh"
    with pytest.raises(OutputError, match=r"output path '' is empty"):
        check_output("", overwrite=True)


def test_single_file_output(tmp_path: Path) -> None:
    target = tmp_path / "results.json"
    written = '{"written_by": "hf-unified-embed"}'
    with StagedOutput(target, kind="file") as stage:
        stage.path.write_text(written)
    assert target.read_text() == written
    with pytest.raises(OutputExistsError):
        StagedOutput(target, kind="file")
    with StagedOutput(target, kind="file", overwrite=True) as stage:
        stage.path.write_text('{"a": 1}')
    assert target.read_text() == '{"a": 1}' and sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_inputs_are_never_overwritten(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    mark_output(data)  # even an input the tool wrote itself
    for target in (data, data / "sub" / "out", tmp_path):
        with pytest.raises(OutputError, match="overlaps the input"):
            StagedOutput(target, inputs=[data], overwrite=True)


def test_ctrl_c_removes_the_staging_folder(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), StagedOutput(tmp_path / "out") as stage:
        (stage.path / "partial").write_text("x")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_read_only_parent_fails_before_any_work(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root ignores file permissions")
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        with pytest.raises(OutputError, match="cannot write the output"), StagedOutput(parent / "out"):
            pytest.fail("the body must not run")
    finally:
        parent.chmod(0o755)


def test_read_only_parent_as_root_is_simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # root may write anywhere; make mkdir fail the way a read-only folder does for everyone else.
    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(OutputError, match="Permission denied"), StagedOutput(tmp_path / "out"):
        pytest.fail("the body must not run")


def test_stale_staging_of_dead_process_is_removed_live_one_kept(tmp_path: Path) -> None:
    target = tmp_path / "out"
    dead = tmp_path / _staging_name(target, _dead_pid())
    (dead / "out").mkdir(parents=True)
    (dead / "out" / "partial.parquet").write_bytes(b"x" * 100)
    live = tmp_path / _staging_name(target, os.getppid())
    live.mkdir()
    other_target = tmp_path / _staging_name(tmp_path / "other", _dead_pid())
    other_target.mkdir()
    other_host = tmp_path / f".out.staging-elsewhere-{_dead_pid()}-0123abcd"
    other_host.mkdir()

    with StagedOutput(target) as stage:
        (stage.path / "x").write_text("x")
    assert not dead.exists(), "a dead process's staging folder for this target is removed"
    assert live.exists() and other_target.exists() and other_host.exists()


def test_crash_between_moving_aside_and_rename_restores_the_old_output(tmp_path: Path) -> None:
    target = tmp_path / "out"
    stale = tmp_path / _staging_name(target, _dead_pid())
    (stale / "replaced").mkdir(parents=True)
    (stale / "replaced" / "model.safetensors").write_text("old model")
    assert remove_stale_staging(target) == [stale]
    assert (target / "model.safetensors").read_text() == "old model"


def test_commit_scrubs_text_and_refuses_binary_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "hf_" + "A" * 34
    monkeypatch.setenv("HF_TOKEN", token)
    with StagedOutput(tmp_path / "out") as stage:
        (stage.path / "card.md").write_text(f"token: {token}\nother hf_{'b' * 36} here")
        (stage.path / "config.json").write_text(f'{{"hub_token": "{token}"}}')
    assert token not in (tmp_path / "out" / "card.md").read_text()
    assert (tmp_path / "out" / "card.md").read_text().count(REDACTED) == 2
    assert token not in (tmp_path / "out" / "config.json").read_text()

    with pytest.raises(SecretLeakError, match=r"weights\.bin"), StagedOutput(tmp_path / "bad") as stage:
        (stage.path / "weights.bin").write_bytes(b"\x00\x01" + token.encode() + b"\x02")
    assert not (tmp_path / "bad").exists()


def test_remembered_secret_is_scrubbed(tmp_path: Path) -> None:
    remember_secret("my-org-password-123")
    with StagedOutput(tmp_path / "out") as stage:
        (stage.path / "notes.yaml").write_text("password: my-org-password-123\n")
    assert "my-org-password-123" not in (tmp_path / "out" / "notes.yaml").read_text()
