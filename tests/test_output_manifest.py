"""``--overwrite`` replaces only what the tool wrote, one writer per output, nothing finished thrown away.

Issue 37, items 1-3: the marker of every output folder lists what the tool wrote (path and size); a
folder holding anything else, a changed file, or an older marker without the list is refused before any
work, naming the files. A symbolic link is never an output. A command holds a lock on its output for its
whole run: a second command stops at once naming the holder; the lock of a dead process is taken over.
When the final move fails, the finished result stays in its staging folder, which the error names.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.errors import OutputError
from hf_unified_embed.utils.output_lock import OutputLock, lock_path
from hf_unified_embed.utils.outputs import MARKER, StagedOutput, written_by_tool

ROWS = [
    {"query": "A man plays a guitar.", "positives": ["A man is playing guitar."], "positive_scores": [0.9]},
    {"query": "A dog runs.", "positives": ["A cat sleeps."], "positive_scores": [0.1]},
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    sources = [{"name": "sts", "format": "unified", "data_files": "rows.jsonl", "task_type": "sts"}]
    (tmp_path / "build.yaml").write_text(yaml.safe_dump({"sources": sources}))
    return tmp_path


def run(project: Path, argv: list[str]) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.chdir(project), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue().splitlines()


def digest(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"
        for path in sorted(root.rglob("*"))
        if not path.is_symlink()
    }


def test_build_overwrite_refuses_a_tool_folder_holding_the_users_files_and_names_them(project: Path) -> None:
    assert run(project, ["build", "build.yaml", "-o", "out"])[0] == 0
    (project / "out" / "thesis.txt").write_text("three years of work")
    (project / "out" / "photos").mkdir()
    (project / "out" / "photos" / "cat.jpg").write_bytes(b"\xff\xd8cat")
    before = digest(project)
    code, lines = run(project, ["build", "build.yaml", "-o", "out", "--overwrite"])
    assert code == 2 and len(lines) == 1, lines
    assert "holds files this tool did not write: photos/cat.jpg, thesis.txt; move them" in lines[0]
    assert digest(project) == before
    # Once they are moved away, the folder is the tool's again.
    (project / "out" / "thesis.txt").unlink()
    (project / "out" / "photos" / "cat.jpg").unlink()
    (project / "out" / "photos").rmdir()
    assert run(project, ["build", "build.yaml", "-o", "out", "--overwrite"])[0] == 0


def test_a_changed_file_and_an_old_marker_are_refused(project: Path) -> None:
    assert run(project, ["build", "build.yaml", "-o", "out"])[0] == 0
    card = project / "out" / "README.md"
    card.write_text(card.read_text() + "\nMy notes on this dataset.\n")
    code, lines = run(project, ["build", "build.yaml", "-o", "out", "--overwrite"])
    assert code == 2 and "README.md (changed since the tool wrote it)" in lines[0], lines

    legacy = project / "legacy"
    legacy.mkdir()
    (legacy / MARKER).write_text("This folder was written by hf-unified-embed; `--overwrite` may replace it.\n")
    (legacy / "data.parquet").write_bytes(b"x")
    code, lines = run(project, ["build", "build.yaml", "-o", "legacy", "--overwrite"])
    assert code == 2 and len(lines) == 1 and "from an older version" in lines[0], lines
    assert (legacy / "data.parquet").read_bytes() == b"x"


def test_a_file_inside_a_tool_folder_is_replaced_only_when_the_tool_wrote_it(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    with StagedOutput(folder) as stage:
        (stage.path / "config.json").write_text("{}")
    with StagedOutput(folder / "results.json", kind="file") as stage:  # the tool adds a file to its folder...
        stage.path.write_text('{"a": 1}')
    assert written_by_tool(folder / "results.json") and written_by_tool(folder), "...which stays the tool's"
    with StagedOutput(folder / "results.json", kind="file", overwrite=True) as stage:
        stage.path.write_text('{"a": 2, "b": 3}')
    assert written_by_tool(folder)
    (folder / "mine.json").write_text('{"the": "user"}')
    with pytest.raises(OutputError, match="not a file this tool wrote in its folder"):
        StagedOutput(folder / "mine.json", kind="file", overwrite=True)
    with pytest.raises(OutputError, match=r"holds files this tool did not write: mine\.json"):
        StagedOutput(folder, overwrite=True)
    assert (folder / "mine.json").read_text() == '{"the": "user"}'


@pytest.mark.parametrize("link", ["dangling", "to-input", "to-tool-folder", "to-cwd"])
def test_a_link_as_output_is_refused_before_any_work(project: Path, link: str) -> None:
    target = {"dangling": "nowhere", "to-input": "rows.jsonl", "to-tool-folder": "made", "to-cwd": "."}[link]
    if link == "to-tool-folder":
        assert run(project, ["build", "build.yaml", "-o", "made"])[0] == 0
    (project / "out").symlink_to(target)
    before = digest(project)
    code, lines = run(project, ["build", "build.yaml", "-o", "out", "--overwrite"])
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: output "), lines
    # Where a rule on what the link points at applies first (the current folder), that one is named.
    assert ("is the current folder" if link == "to-cwd" else "is a symbolic link") in lines[0], lines
    assert digest(project) == before and (project / "out").is_symlink()


def test_a_second_command_on_a_locked_output_stops_at_once_naming_the_holder(project: Path) -> None:
    with OutputLock((project / "out").absolute()):
        start = time.monotonic()
        code, lines = run(project, ["build", "build.yaml", "-o", "out"])
        assert time.monotonic() - start < 10
    assert code == 2 and len(lines) == 1, lines
    assert f"is being written by another command (pid {os.getpid()} on" in lines[0]
    assert not (project / "out").exists() and not lock_path((project / "out").absolute()).exists()


def test_a_lock_held_by_another_process_and_the_lock_of_a_dead_one(project: Path) -> None:
    """A real second process holds the output for its whole run; when it is killed, its lock is taken over."""
    holder = textwrap.dedent(
        f"""
        import sys, time
        from hf_unified_embed.utils.outputs import StagedOutput
        with StagedOutput({str(project / "out")!r}) as stage:
            print("holding", flush=True)
            time.sleep(120)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "holding"
        code, lines = run(project, ["build", "build.yaml", "-o", "out"])
        assert code == 2 and f"(pid {process.pid} on" in lines[0] and "started" in lines[0], lines
    finally:
        process.kill()
        process.wait()
    assert lock_path((project / "out").absolute()).exists(), "kill -9 leaves the lock file behind"
    assert run(project, ["build", "build.yaml", "-o", "out"])[0] == 0, "the dead process's lock is taken over"
    assert sorted(path.name for path in project.iterdir()) == ["build.yaml", "out", "rows.jsonl"]


def test_a_finished_result_that_cannot_be_moved_into_place_is_kept_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "model"
    real_rename = Path.rename

    def failing_rename(self: Path, destination: Path) -> Path:
        if Path(destination) == target:
            raise OSError(28, "No space left on device")
        return real_rename(self, destination)

    monkeypatch.setattr(Path, "rename", failing_rename)
    with (
        pytest.raises(OutputError, match=r"it is kept at .*\.model\.staging-.*/model$"),
        StagedOutput(target) as stage,
    ):
        (stage.path / "model.safetensors").write_bytes(b"weights")
    monkeypatch.setattr(Path, "rename", real_rename)
    (kept,) = tmp_path.glob(".model.staging-*")
    assert (kept / "model" / "model.safetensors").read_bytes() == b"weights"
    # A later run for the same output (this process's pid is alive, so use a fresh stage) leaves it alone.
    with StagedOutput(target) as stage:
        (stage.path / "x").write_text("x")
    assert (kept / "model" / "model.safetensors").exists()


SEGMENT = st.text(alphabet="abcxyz019_-. ", min_size=1, max_size=8).filter(
    lambda name: name.strip(" .") == name and name not in (".", "..") and not name.startswith(".hf_unified")
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    foreign=st.lists(st.lists(SEGMENT, min_size=1, max_size=3), min_size=1, max_size=8),
    sizes=st.lists(st.integers(0, 3000), min_size=8, max_size=8),
    change_own=st.booleans(),
)
def test_any_foreign_file_in_a_tool_folder_blocks_overwrite_and_survives(
    tmp_path_factory: pytest.TempPathFactory, foreign: list[list[str]], sizes: list[int], change_own: bool
) -> None:
    root = tmp_path_factory.mktemp("manifest")
    target = root / "out"
    with StagedOutput(target) as stage:
        (stage.path / "sub").mkdir()
        (stage.path / "sub" / "weights.bin").write_bytes(b"w" * 100)
        (stage.path / "README.md").write_text("card")
    placed: list[str] = []
    for parts, size in zip(foreign, sizes):
        path = target.joinpath(*parts)
        if path.is_dir() or any(parent.is_file() for parent in path.parents if target in parent.parents):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"u" * size)
        placed.append("/".join(parts))
    if change_own:
        (target / "README.md").write_text("card, edited by the user")
    own = {"sub/weights.bin": b"w" * 100, "README.md": b"card"}  # a file rewritten with other bytes is changed
    new = [name for name in placed if own.get(name) != (target / name).read_bytes()]
    before = digest(root)
    if not new and not change_own:
        with StagedOutput(target, overwrite=True) as stage:  # only the tool's files, as it wrote them
            (stage.path / "x").write_text("x")
        return
    with pytest.raises(OutputError) as refused:
        StagedOutput(target, overwrite=True)
    message = str(refused.value)
    assert "holds files this tool did not write" in message and "\n" not in message
    named = message.split("did not write: ", 1)[1].split("; move them", 1)[0]
    assert named.count(", ") <= 4 or " and " in named, "at most five named, the rest counted"
    assert digest(root) == before, "nothing changed"


def test_saved_weights_follow_the_umask_like_every_other_file(tmp_path: Path, tiny_model_path: str) -> None:
    """transformers writes model.safetensors with mode 0600; the output's files all get the umask's mode."""
    from sentence_transformers import SentenceTransformer

    mask = os.umask(0o022)
    try:
        with StagedOutput(tmp_path / "model") as stage:
            SentenceTransformer(tiny_model_path).save(str(stage.path))
    finally:
        os.umask(mask)
    modes = {path.name: oct(path.stat().st_mode & 0o777) for path in (tmp_path / "model").rglob("*") if path.is_file()}
    assert modes["model.safetensors"] == "0o644" and set(modes.values()) == {"0o644"}, modes


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), keep_time=st.booleans())
def test_an_edit_that_keeps_the_size_is_an_edit(project: Path, data: st.DataObject, keep_time: bool) -> None:
    """A user's edit of a file the tool wrote, at the same size (even with its time put back), blocks
    ``--overwrite``: the manifest knows a small file by its bytes' hash, a large one by its time."""
    out = project / "out"
    if not out.exists():
        assert run(project, ["build", "build.yaml", "-o", "out"])[0] == 0
    own = sorted(path for path in out.rglob("*") if path.is_file() and path.name != MARKER)
    path = data.draw(st.sampled_from(own), label="file")
    content = path.read_bytes()
    position = data.draw(st.integers(0, len(content) - 1), label="position")
    byte = data.draw(st.integers(0, 255).filter(lambda value: value != content[position]), label="byte")
    info = path.stat()
    path.write_bytes(content[:position] + bytes([byte]) + content[position + 1 :])
    if keep_time:
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    before = digest(project)
    code, lines = run(project, ["build", "build.yaml", "-o", "out", "--overwrite"])
    relative = path.relative_to(out).as_posix()
    assert code == 2 and len(lines) == 1, lines
    assert f"{relative} (changed since the tool wrote it)" in lines[0], lines
    assert digest(project) == before, "nothing changed"
    path.write_bytes(content)  # as the tool wrote it: the next example's folder is the tool's again
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def test_a_large_file_edited_in_place_is_an_edit(tmp_path: Path) -> None:
    from hf_unified_embed.utils.outputs import HASHED_BYTES

    target = tmp_path / "model"
    with StagedOutput(target) as stage:
        (stage.path / "weights.bin").write_bytes(b"w" * (HASHED_BYTES + 1))
    time.sleep(0.01)
    with open(target / "weights.bin", "r+b") as handle:  # same size, new bytes, a new modification time
        handle.write(b"u")
    with pytest.raises(OutputError, match=r"weights\.bin \(changed since the tool wrote it\)"):
        StagedOutput(target, overwrite=True)
