"""The merge output goes through StagedOutput: kill -9 leaves nothing a rerun trips on; secrets are not written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from _merge_helpers import noisy_copy
from safetensors.torch import load_file, save_file

from hf_unified_embed.cli.main import main
from hf_unified_embed.errors import InputError, InputNotFoundError
from hf_unified_embed.merge import MergeError, merge_models
from tests import _processes as processes

REPO_ROOT = Path(__file__).resolve().parent.parent


def _synthetic_input(folder: Path, seed: int, tensors: int = 48, side: int = 1024) -> Path:
    """A plain weights folder of ``tensors`` × 4 MB, big enough for a merge to be caught mid-way."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "synthetic", "architectures": ["Synthetic"]}))
    generator = torch.Generator().manual_seed(seed)
    weights = {f"layers.{index}.weight": torch.randn(side, side, generator=generator) for index in range(tensors)}
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@pytest.mark.slow
def test_kill_9_mid_merge_then_rerun(tmp_path: Path) -> None:
    inputs = [_synthetic_input(tmp_path / f"in{seed}", seed) for seed in range(2)]
    out = tmp_path / "merged"
    command = [sys.executable, "-m", "hf_unified_embed.cli.main", "merge", "--method", "soup", "--models"]
    command += [*map(str, inputs), "-o", str(out), "--max-shard-size", "16MB", "--no-progress", "--no-card"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + processes.time_limit(processes.Expected())
    while time.monotonic() < deadline and process.poll() is None:
        # Mid-way: the staging folder holds some weights, and the merge is still running.
        if any(path.stat().st_size > 0 for path in tmp_path.glob(".merged.staging-*/merged/*.safetensors")):
            break
        time.sleep(0.005)
    assert process.poll() is None, "the merge ended before it could be killed; make the inputs larger"
    process.send_signal(signal.SIGKILL)
    process.wait()
    leftovers = list(tmp_path.glob(".merged.staging-*"))
    assert leftovers and not out.exists(), "kill -9 should leave the staging folder and no output"

    rerun = processes.run(command, expected=processes.Expected(), env=env)
    assert rerun.returncode == 0, processes.failure(rerun)
    assert not list(tmp_path.glob(".merged.staging-*")), "the rerun should remove the dead run's staging folder"
    merged = {}
    for shard in out.glob("model-*.safetensors"):
        merged.update(load_file(str(shard)))
    first, second = load_file(str(inputs[0] / "model.safetensors")), load_file(str(inputs[1] / "model.safetensors"))
    assert merged.keys() == first.keys()
    torch.testing.assert_close(
        merged["layers.47.weight"], (first["layers.47.weight"] + second["layers.47.weight"]) / 2
    )


@pytest.fixture(scope="module")
def pair(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("outputs")
    return noisy_copy(tiny_model_path, root / "a", 0), noisy_copy(tiny_model_path, root / "b", 1)


def test_secrets_are_not_written(pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "hf_" + "Ab1" * 12
    monkeypatch.setenv("HF_TOKEN", token)
    config = tmp_path / "merge.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "method": "soup",
                "models": [{"path": str(pair[0]), "id": f"org/run-{token}"}, str(pair[1])],
                "output_dir": str(tmp_path / "out"),
                "card": {"model_name": "org/merged"},
            }
        )
    )
    assert main(["merge", str(config), "--no-progress"]) == 0
    written = [path for path in (tmp_path / "out").rglob("*") if path.is_file()]
    assert any(path.name == "merge_config.yaml" for path in written) and any(p.name == "README.md" for p in written)
    for path in written:
        assert token.encode() not in path.read_bytes(), path


def test_user_errors_are_located_one_line_errors(
    pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(InputNotFoundError, match="does not exist"):
        merge_models([pair[0], tmp_path / "missing"], "soup", tmp_path / "o1", show_progress=False)
    with pytest.raises(
        MergeError, match=r"method 'task_arithmetic': parameter 'base': input should be a path or null, got 3"
    ):
        merge_models(list(pair), "task_arithmetic", tmp_path / "o2", base=3, show_progress=False)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    (broken / "model.safetensors").write_bytes((pair[1] / "model.safetensors").read_bytes())
    with pytest.raises(InputError, match=r"broken/config.json: not valid JSON"):  # as every command checks a model
        merge_models([pair[0], broken], "soup", tmp_path / "o3", show_progress=False)

    cases = [
        (["--models", str(pair[0]), str(tmp_path / "missing")], "does not exist"),
        (
            ["--models", *map(str, pair), "--param", "base=3", "--method", "task_arithmetic"],
            "command line: method 'task_arithmetic': parameter 'base': input should be",
        ),
        (["--models", *map(str, pair), "--param", "nonsense"], "expected NAME=VALUE"),
        (["--models", *map(str, pair), "-o", str(pair[0]), "--overwrite"], "overlaps the input"),
    ]
    for extra, message in cases:
        args = ["merge", "--method", "soup", "-o", str(tmp_path / "cli"), "--no-progress", *extra]
        assert main(args) == 2, extra
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
