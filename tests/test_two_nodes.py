"""Two nodes on one machine: two torchrun agents (``--nnodes=2``, c10d rendezvous on the loopback address) of
one process each run ``mine-negatives``, ``evaluate`` and ``train`` (in memory and streaming) as one node of
two processes does, and a streaming checkpoint the two nodes saved resumes on one node of two processes.

What is per run is on global rank 0 alone, whichever agent holds it: the printed report and the progress
bars, and the one writer of the output. Every address is 127.0.0.1 (the rendezvous, each agent's own
address, the gloo group's interface), so nothing leaves the machine.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from _processes import Expected, failure, free_port, run

from hf_unified_embed.data import build_unified, load_unified, save_unified

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"
SAMPLE_SUITE = REPO / "examples" / "suites" / "sample.yaml"
#: Two agents of one process each, then one agent of two: start-up, a gloo group, a tiny model's few steps.
NODE = Expected(startup_s=20, processes=2, steps=4)
MINING_OPTIONS = ["--tasks", "trecqa", "--query-block", "8", "--corpus-block", "200", "--relative-margin", "0.01"]


def _environment() -> dict[str, str]:
    # gloo finds its interface from the host name unless told: the loopback interface keeps it on this machine.
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "GLOO_SOCKET_IFNAME": "lo"}


def _module(*arguments: str) -> list[str]:
    return ["-m", "hf_unified_embed", *arguments]


def _two_nodes(*arguments: str) -> list[Any]:
    """Both agents of a two-node run, started together; their completed processes, node 0 first."""
    port = free_port()
    commands = [
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            "--nproc_per_node=1",
            "--rdzv_backend=c10d",
            f"--rdzv_endpoint=127.0.0.1:{port}",
            f"--rdzv_id=two-nodes-{port}",
            f"--node_rank={node}",
            "--local_addr=127.0.0.1",
            *_module(*arguments),
        ]
        for node in (0, 1)
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda command: run(command, expected=NODE, env=_environment()), commands))


def _one_node(*arguments: str) -> Any:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        *_module(*arguments),
    ]
    return run(command, expected=NODE, env=_environment())


def _succeeded(*completed: Any) -> None:
    for process in completed:
        assert process.returncode == 0, failure(process)


def _weights(folder: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(folder / "model.safetensors")


def _assert_same_weights(trained: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> None:
    assert trained.keys() == reference.keys()
    for key, weights in reference.items():
        np.testing.assert_allclose(trained[key], weights, atol=1e-6, err_msg=key)


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_unified(build_unified(SAMPLE_RECIPE, split="train"), tmp_path_factory.mktemp("sample") / "data")


@pytest.mark.multiprocess
def test_mining_on_two_nodes_writes_what_one_node_of_two_processes_writes(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    arguments = ["mine-negatives", str(unified_dir), "--model", tiny_model_path, *MINING_OPTIONS]
    nodes = _two_nodes(*arguments, "-o", str(tmp_path / "nodes"))
    for completed in nodes:
        assert completed.returncode == 0, failure(completed)
    one = _one_node(*arguments, "-o", str(tmp_path / "one"))
    assert one.returncode == 0, failure(one)
    # Global rank 0 prints the report and draws the bars, whichever agent it runs under.
    printed = "".join(completed.stdout for completed in nodes)
    assert printed.replace(str(tmp_path / "nodes"), "OUT") == one.stdout.replace(str(tmp_path / "one"), "OUT")
    assert sum(completed.stderr.count("Searching:") > 0 for completed in nodes) == 1
    mined, reference = load_unified(tmp_path / "nodes"), load_unified(tmp_path / "one")
    for task in reference:
        rows, expected = mined[task].to_list(), reference[task].to_list()
        assert [row["negatives"] for row in rows] == [row["negatives"] for row in expected], task
        for a, b in zip(rows, expected):
            np.testing.assert_allclose(a["negative_scores"], b["negative_scores"], atol=1e-5)
            np.testing.assert_allclose(a["positive_scores"], b["positive_scores"], atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nodes", "one"], "one writer, no staging or lock left"


@pytest.mark.multiprocess
def test_training_on_two_nodes_gives_one_node_of_two_processes_model(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    recipes = {}
    for name in ("nodes", "one"):
        recipe = {
            "base_model": tiny_model_path,
            "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa"], "max_rows_per_task": 16},
            "losses": {
                "retrieval": {"name": "MultiPositiveInfoNCELoss", "gather_across_devices": True},
                "sts": {"name": "CoDiEmbSTSLoss", "gather_across_devices": True},
            },
            "negatives_per_query": 2,
            "training_args": {"max_steps": 2, "per_device_train_batch_size": 4, "seed": 0},
            "output_dir": str(tmp_path / name),
        }
        recipes[name] = tmp_path / f"{name}.yaml"
        recipes[name].write_text(yaml.safe_dump(recipe))
    nodes = _two_nodes("train", str(recipes["nodes"]))
    _succeeded(*nodes)
    one = _one_node("train", str(recipes["one"]))
    _succeeded(one)
    assert sum("trained model" in completed.stdout for completed in nodes) == 1, "global rank 0 reports"
    _assert_same_weights(_weights(tmp_path / "nodes"), _weights(tmp_path / "one"))
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["nodes", "nodes.yaml", "one", "one.yaml"], "one writer per run, no staging or lock left"


@pytest.mark.multiprocess
def test_evaluating_on_two_nodes_gives_one_node_of_two_processes_metrics(tiny_model_path: str, tmp_path: Path) -> None:
    # A set of each kind that encodes lists of texts: sentence pairs, a corpus with queries, answer candidates.
    only = ["--only", "stsb-sample", "msmarco-sample", "trecqa-sample"]
    arguments = ["evaluate", tiny_model_path, str(SAMPLE_SUITE), "--batch-size", "16", "--no-diagnostics", *only]
    nodes = _two_nodes(*arguments, "-o", str(tmp_path / "nodes.json"))
    _succeeded(*nodes)
    one = _one_node(*arguments, "-o", str(tmp_path / "one.json"))
    _succeeded(one)
    assert sum(completed.stdout.count("wrote ") for completed in nodes) == 1, "global rank 0 prints the table once"
    measured, reference = (json.loads((tmp_path / name).read_text()) for name in ("nodes.json", "one.json"))
    assert list(measured["results"]) == list(reference["results"])
    for name, entry in reference["results"].items():
        for metric, value in entry["metrics"].items():
            assert measured["results"][name]["metrics"][metric] == pytest.approx(value, rel=1e-6), (name, metric)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nodes.json", "one.json"]


def _streaming_recipe(unified_dir: Path, model: str, out: Path, **training: Any) -> dict[str, Any]:
    return {
        "base_model": model,
        "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa"], "streaming": True},
        "losses": {
            "retrieval": {"name": "MultiPositiveInfoNCELoss", "gather_across_devices": True},
            "sts": {"name": "CoDiEmbSTSLoss", "gather_across_devices": True},
        },
        "negatives_per_query": 2,
        "training_args": {
            "max_steps": 4,
            "per_device_train_batch_size": 4,
            "seed": 0,
            "save_strategy": "steps",
            "save_steps": 2,
            **training,
        },
        "output_dir": str(out),
    }


@pytest.mark.multiprocess
def test_streaming_on_two_nodes_trains_as_one_node_and_its_checkpoint_resumes_on_one_node(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    def recipe(name: str, **training: Any) -> str:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(_streaming_recipe(unified_dir, tiny_model_path, tmp_path / name, **training)))
        return str(path)

    nodes = _two_nodes("train", recipe("nodes"))
    _succeeded(*nodes)
    assert sum("trained model" in completed.stdout for completed in nodes) == 1, "global rank 0 reports"
    one = _one_node("train", recipe("one"))
    _succeeded(one)
    _assert_same_weights(_weights(tmp_path / "nodes"), _weights(tmp_path / "one"))
    # The state two nodes of one process saved at step 2 continues on one node of two: same rows, same model.
    checkpoint = tmp_path / "nodes-checkpoints" / "checkpoint-2"
    resumed = _one_node("train", recipe("resumed", resume_from_checkpoint=str(checkpoint)))
    _succeeded(resumed)
    _assert_same_weights(_weights(tmp_path / "resumed"), _weights(tmp_path / "one"))
