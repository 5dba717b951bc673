"""A full storage is one line: the output, the cause, and what was kept; never a traceback, never the kill of
``SIGXFSZ``.

Libraries report a full disk (``ENOSPC``), a file-size limit (``EFBIG``) or a quota (``EDQUOT``) each their
own way; :func:`storage_full` finds it behind each. The commands then run under a real file-size limit
(``RLIMIT_FSIZE``, as ``ulimit -f`` sets it), where every write past the limit fails, and on a real full disk:
a small ``tmpfs`` mounted for the test (as root; skipped where it cannot be mounted) and filled to a few
bytes, where ``datasets`` refuses to build (``Not enough disk space``) and every write fails:

* ``build --overwrite`` with 4 kB free: one line naming the output; the earlier output stays as it was;
* ``train`` with the datasets cache (``HF_DATASETS_CACHE``) there: one line naming the cache and the variable;
* ``evaluate -o`` there: one line naming the file, and the results printed (the table and the JSON that
  would have been written, equal to what a run on a roomy disk writes);
* ``train`` whose checkpoint folder fills: one line naming the checkpoint folder (not the output), the
  half-written checkpoint removed, the earlier checkpoints and the user's files in the folder unchanged.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from _fault_runs import Fault, Outcome, beside, check_one_line_end, command_env, run_command
from _output_project import COMMANDS, hashes, project_template
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_unified_embed.errors import OutputError
from hf_unified_embed.training.checkpoints import checkpoint_writes
from hf_unified_embed.utils.outputs import StagedOutput
from hf_unified_embed.utils.write_failures import FULL_ERRNOS, failure_line, storage_full

FULL = sorted(FULL_ERRNOS)
OTHERS = [errno.EACCES, errno.ENOENT, errno.EIO, errno.EROFS, errno.EPERM]


def as_libraries_raise(number: int, style: str) -> BaseException:
    """An error of ``number`` as one library or another raises it."""
    text = os.strerror(number)
    if style == "python":
        return OSError(number, text, "/data/out/model.safetensors")
    if style == "pyarrow":
        return OSError(f"[Errno {number}] Error writing bytes to file. Detail: [errno {number}] {text}")
    if style == "rust":
        kind = {errno.ENOSPC: "StorageFull", errno.EFBIG: "FileTooLarge", errno.EDQUOT: "QuotaExceeded"}.get(
            number, "Other"
        )
        return RuntimeError(
            f'Error while serializing: IoError(Os {{ code: {number}, kind: {kind}, message: "{text}" }})'
        )
    # datasets re-raises a worker's error as the cause of its own
    wrapped = RuntimeError("An error occurred while generating the dataset")
    wrapped.__cause__ = OSError(number, text)
    return wrapped


@settings(max_examples=40, deadline=None)
@given(number=st.sampled_from(FULL + OTHERS), style=st.sampled_from(["python", "pyarrow", "rust", "datasets"]))
def test_a_full_storage_is_found_behind_what_each_library_raises(number: int, style: str):
    found = storage_full(as_libraries_raise(number, style))
    if number in FULL_ERRNOS:
        assert found is not None and found.errno == number and found.cause == os.strerror(number)
    else:
        assert found is None


def test_torch_s_unnamed_write_failure_counts_as_a_full_storage():
    error = RuntimeError(
        "[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file data/0: file write failed"
    )
    found = storage_full(error)
    assert found is not None and "disk full" in found.cause


@settings(max_examples=10, deadline=None)
@given(number=st.sampled_from(FULL), kind=st.sampled_from(["folder", "file"]))
def test_a_full_storage_inside_a_staged_output_is_one_line_and_nothing_kept(
    tmp_path_factory: pytest.TempPathFactory, number: int, kind: str
):
    folder = tmp_path_factory.mktemp("full")
    target = folder / "out"
    with pytest.raises(OutputError) as caught, StagedOutput(target, kind=kind) as stage:  # type: ignore[arg-type]
        stage.kept_note = "the model was trained"
        raise OSError(number, os.strerror(number), str(stage.path))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"cannot write the output {target}: {os.strerror(number)}")
    assert message.endswith("nothing of it was kept; the model was trained")
    assert not target.exists() and beside(target) == []


def test_datasets_refusal_to_build_without_room_is_the_full_storage_of_its_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import datasets
    import datasets.builder

    (tmp_path / "rows.jsonl").write_text('{"a": 1}\n')
    monkeypatch.setattr(datasets.builder, "has_sufficient_disk_space", lambda *args, **kwargs: False)
    cache = tmp_path / "cache"
    with pytest.raises(OSError, match="Not enough disk space") as caught:
        datasets.load_dataset("json", data_files=str(tmp_path / "rows.jsonl"), cache_dir=str(cache))
    found = storage_full(caught.value)
    assert found is not None and found.errno == errno.ENOSPC and found.path == str(cache)
    line = failure_line(caught.value)
    assert line is not None and line.startswith(f"cannot write the datasets cache ({cache}): No space left on device")
    assert "HF_DATASETS_CACHE" in line and "\n" not in line


@settings(max_examples=20, deadline=None)
@given(
    earlier=st.lists(st.integers(1, 50), max_size=3, unique=True),
    half_step=st.integers(51, 99),
    named=st.booleans(),
)
def test_a_full_checkpoint_folder_loses_only_the_checkpoint_this_run_half_wrote(
    tmp_path_factory: pytest.TempPathFactory, earlier: list[int], half_step: int, named: bool
):
    folder = tmp_path_factory.mktemp("checkpoints")
    for step in earlier:  # whole checkpoints of an earlier run
        (folder / f"checkpoint-{step}").mkdir()
        (folder / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (folder / "notes.txt").write_text("the user's notes")
    (folder / "checkpoint-0-mine").mkdir()  # a folder of the user's that only looks like one
    before = hashes(folder)
    with pytest.raises(OutputError) as caught, checkpoint_writes(folder):
        half = folder / f"checkpoint-{half_step}"
        half.mkdir()
        (half / "model.safetensors").write_bytes(b"half")
        if named:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(half / "optimizer.pt"))
        raise RuntimeError("[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed: file write failed")
    line = str(caught.value)
    assert line.startswith(f"cannot write the checkpoint folder {folder}:") and "\n" not in line
    assert f"checkpoint-{half_step} was removed" in line
    if earlier:
        assert f"{folder / f'checkpoint-{max(earlier)}'}, stays" in line
    assert hashes(folder) == before


def test_a_full_storage_elsewhere_is_not_blamed_on_the_checkpoint_folder(tmp_path: Path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    with pytest.raises(OSError) as caught, checkpoint_writes(folder):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "cache" / "x.arrow"))
    assert not isinstance(caught.value, OutputError)
    with pytest.raises(RuntimeError), checkpoint_writes(folder):  # torch's unnamed failure, no checkpoint begun
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")


def test_a_full_storage_outside_the_output_is_named_instead_of_the_output(tmp_path: Path):
    target = tmp_path / "out"
    elsewhere = tmp_path / "checkpoints" / "checkpoint-2" / "optimizer.pt"
    with pytest.raises(OutputError) as caught, StagedOutput(target):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(elsewhere))
    assert str(caught.value).startswith(f"cannot write {elsewhere}: No space left on device; nothing of the output")
    assert not target.exists() and beside(target) == []


# --- the commands under a file-size limit -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> Iterator[Path]:
    with project_template(tmp_path_factory.mktemp("full-disk"), tiny_model_path) as project:
        yield project


#: Per command, a limit that its output's largest file exceeds: a shard (build), the weights (merge, train).
LIMITS = {"build": 3_000, "build-2": 3_000, "merge": 200_000, "train": 300_000}


@pytest.mark.slow
@pytest.mark.parametrize("command", list(LIMITS))
def test_a_command_past_the_file_size_limit_ends_in_one_line(template: Path, tmp_path: Path, command: str):
    project = Path(shutil.copytree(template, tmp_path / "project", symlinks=True))
    argv = COMMANDS["build" if command == "build-2" else command][0]("out")
    if command == "build-2":
        argv += ["--num-proc", "2"]
    outcome = run_command(project, argv, tmp_path / "cache", Fault("fsize", size=LIMITS[command]))
    # Exit 2, not the kill of SIGXFSZ (-25) nor a traceback (1).
    check_one_line_end(outcome, {2}, command)
    line = outcome.err.splitlines()[-1]
    assert line.startswith(f"error: cannot write the output {project / 'out'}: File too large"), line
    if command == "train":
        assert "the model was trained" in line, line
    assert not (project / "out").exists() and beside(project / "out") == []


# --- the commands on a full disk ----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB ``tmpfs`` mounted at ``tmp_path / "disk"`` for the test: a real file system that fills."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small file system needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, left: int) -> None:
    """Fill ``disk`` until ``left`` bytes are free (a multiple of its block size)."""
    (disk / "filler").unlink(missing_ok=True)
    stats = os.statvfs(disk)
    free = stats.f_bavail * stats.f_frsize
    with open(disk / "filler", "wb") as handle:
        handle.write(b"\0" * max(0, free - left))
    stats = os.statvfs(disk)
    assert stats.f_bavail * stats.f_frsize == left


def run_full(project: Path, argv: list[str], cache: Path) -> tuple[Outcome, str]:
    """Run ``hf-unified-embed ARGV`` in ``project`` as a user's process; its outcome and its standard output."""
    done = subprocess.run(
        [sys.executable, "-m", "hf_unified_embed", *argv],
        cwd=project,
        env=command_env(cache),
        capture_output=True,
        text=True,
        timeout=900,
    )
    return Outcome(done.returncode, done.stderr, [], 0.0), done.stdout


def error_line(outcome: Outcome, what: str) -> str:
    check_one_line_end(outcome, {2}, what)
    return outcome.err.splitlines()[-1]


@pytest.mark.slow
def test_build_overwrite_with_4_kb_free_is_one_line_and_keeps_the_earlier_output(
    template: Path, tmp_path: Path, small_disk: Path
):
    project = Path(shutil.copytree(template, tmp_path / "project", symlinks=True))
    out, cache = small_disk / "out", small_disk / "cache"
    first, _ = run_full(project, ["build", "build.yaml", "-o", str(out)], cache)
    check_one_line_end(first, {0}, "the first build")
    before, inputs = hashes(out), hashes(project)
    fill(small_disk, 4096)
    outcome, _ = run_full(project, ["build", "build.yaml", "-o", str(out), "--overwrite"], cache)
    line = error_line(outcome, "build --overwrite with 4 kB free")
    assert line.startswith(f"error: cannot write the output {out}: No space left on device"), line
    assert hashes(out) == before and beside(out) == [], "the earlier output changed"
    assert hashes(project) == inputs


@pytest.mark.slow
@pytest.mark.parametrize("left", [0, 4096])
def test_train_with_the_datasets_cache_on_a_full_disk_names_the_cache(
    template: Path, tmp_path: Path, small_disk: Path, left: int
):
    project = Path(shutil.copytree(template, tmp_path / "project", symlinks=True))
    inputs = hashes(project)
    cache = small_disk / "cache"
    fill(small_disk, left)
    outcome, _ = run_full(project, ["train", "recipe.yaml", "-o", "out"], cache)
    line = error_line(outcome, f"train with the datasets cache on a disk with {left} bytes free")
    assert line.startswith(f"error: cannot write the datasets cache {cache}: No space left on device"), line
    assert "HF_DATASETS_CACHE" in line and f"nothing of the output {project / 'out'} was kept" in line, line
    assert not (project / "out").exists() and beside(project / "out") == []
    assert not (project / "out-checkpoints").exists()
    assert hashes(project) == inputs


def printed_results(stdout: str) -> dict:
    """The JSON object a command printed after its table."""
    start = stdout.index("\n{") + 1
    return json.loads(stdout[start:])


@pytest.mark.slow
def test_evaluate_o_on_a_full_disk_prints_the_results_and_names_the_file(
    template: Path, tmp_path: Path, small_disk: Path
):
    project = Path(shutil.copytree(template, tmp_path / "project", symlinks=True))
    argv = ["evaluate", "model", "suite.yaml", "--no-diagnostics", "-o"]
    done, _ = run_full(project, [*argv, "roomy.json"], tmp_path / "cache")
    check_one_line_end(done, {0}, "evaluate on a roomy disk")
    written = json.loads((project / "roomy.json").read_text())

    target = small_disk / "results.json"
    fill(small_disk, 4096)  # room for the lock, not for the results
    outcome, stdout = run_full(project, [*argv, str(target)], tmp_path / "cache")
    line = error_line(outcome, "evaluate -o on a full disk")
    assert line.startswith(f"error: cannot write the output {target}: No space left on device"), line
    assert "the results are printed above" in line, line
    assert "spearman_cosine" in stdout.split("\n{")[0], "the table was not printed"
    assert printed_results(stdout) == written
    assert not target.exists() and beside(target) == []

    fill(small_disk, 0)  # not even the lock: it stops before evaluating, naming the file
    outcome, _ = run_full(project, [*argv, str(target)], tmp_path / "cache")
    line = error_line(outcome, "evaluate -o on a disk with nothing free")
    assert line.startswith(f"error: cannot write the output {target}: No space left on device"), line
    assert not target.exists() and beside(target) == []


def _checkpoint_recipe(project: Path, folder: Path, steps: int, resume: bool) -> str:
    recipe = yaml.safe_load((project / "recipe.yaml").read_text())
    recipe.pop("evaluation")
    recipe["training_args"].update(max_steps=steps, save_strategy="steps", save_steps=1, output_dir=str(folder))
    if resume:
        recipe["training_args"]["resume_from_checkpoint"] = True
    name = f"recipe-{steps}.yaml"
    (project / name).write_text(yaml.safe_dump(recipe))
    return name


@pytest.mark.slow
def test_a_full_checkpoint_folder_is_named_and_its_half_checkpoint_removed(
    template: Path, tmp_path: Path, small_disk: Path
):
    project = Path(shutil.copytree(template, tmp_path / "project", symlinks=True))
    folder = small_disk / "checkpoints"
    first, _ = run_full(project, ["train", _checkpoint_recipe(project, folder, 1, False), "-o", "one"], tmp_path / "c")
    check_one_line_end(first, {0}, "the first run")
    (folder / "notes.txt").write_text("the user's notes")
    before = hashes(folder)
    size = sum(path.stat().st_size for path in (folder / "checkpoint-1").rglob("*") if path.is_file())
    fill(small_disk, (size // 2) // 4096 * 4096)  # room for half a checkpoint

    recipe = _checkpoint_recipe(project, folder, 2, True)
    outcome, _ = run_full(project, ["train", recipe, "-o", "two"], tmp_path / "c")
    line = error_line(outcome, "train with a full checkpoint folder")
    assert line.startswith(f"error: cannot write the checkpoint folder {folder}:"), line
    assert "cannot write the output" not in line and "checkpoint-2 was removed" in line, line
    assert f"{folder / 'checkpoint-1'}, stays" in line, line
    assert hashes(folder) == before, "the checkpoint folder changed: " + str(sorted(set(hashes(folder)) ^ set(before)))
    assert not (project / "two").exists() and beside(project / "two") == []
