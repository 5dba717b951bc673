"""Every kind of artifact the command line writes, loaded the way its users load it: without hf_unified_embed.

The test run builds the artifacts once (a MiniLM trained by a recipe over the bundled sample, a soup of two of
them, a causal Qwen2 LoRA adapter and its merge, bidirectional Qwen2 and Llama decoders in every layer
and from layer 2 — trained, as a LoRA adapter, with the adapter merged, and merged with the merge
tool), then one fresh process where ``import hf_unified_embed`` fails and whose working directory is
outside the repository loads each folder by sentence-transformers and by ``AutoModel`` + the pooling
the folder describes (:mod:`tests._consumers`). Its embeddings must equal the project's own in-memory
ones to 1e-5; a bidirectional folder loaded without ``trust_remote_code`` must fail, never run causal;
a bidirectional adapter, which no loader outside the package runs bidirectional, is refused by
``bidirectional_adapter_problem`` (what ``push`` checks). The unified dataset folder of ``build`` loads
with plain ``datasets.load_dataset`` for every config, and streaming.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _consumers import consume

REPO = Path(__file__).resolve().parent.parent
TEXTS = [
    "what is the capital of france",
    "Paris is the capital and most populous city of France.",
    "A man is playing a guitar.",
    "who",
]
SETTINGS = {"every layer": 0, "from layer 2": 2}


@dataclass
class Artifacts:
    """Folder → the project's own embeddings of :data:`TEXTS`, and how its users load it."""

    expected: dict[str, np.ndarray] = field(default_factory=dict)
    #: folders that need ``trust_remote_code=True`` (self-contained bidirectional decoders)
    remote_code: set[str] = field(default_factory=set)
    #: bidirectional LoRA adapter folders: nothing outside the package loads them bidirectional
    bidirectional_adapters: set[str] = field(default_factory=set)
    #: LoRA adapter folders (transformers loads them through their base and peft)
    adapters: set[str] = field(default_factory=set)


def _encode(model: Any) -> np.ndarray:
    return np.asarray(model.encode(TEXTS), dtype=np.float64)


def _recipe(data: Path, base: str, out: Path, **extra: Any) -> dict[str, Any]:
    return {
        "base_model": base,
        "data": {"path": str(data), "tasks": ["stsb", "wikiqa"], "max_rows_per_task": 16},
        "losses": {"retrieval": "MultiPositiveInfoNCELoss", "sts": "CoDiEmbSTSLoss"},
        "negatives_per_query": 1,
        "training_args": {"max_steps": 2, "per_device_train_batch_size": 4, "learning_rate": 1e-2, "seed": 0},
        "output_dir": str(out),
        **extra,
    }


@pytest.fixture(scope="session")
def unified_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``hf-unified-embed build`` of the bundled sample recipe."""
    from hf_unified_embed.cli.main import main

    folder = tmp_path_factory.mktemp("consumers") / "data"
    assert main(["build", str(REPO / "examples/recipes/sample.yaml"), "-o", str(folder)]) == 0
    return folder


@pytest.fixture(scope="session")
def artifacts(
    unified_folder: Path,
    minilm_path: str,
    tiny_qwen2_path: str,
    tiny_llama_path: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Artifacts:
    from hf_unified_embed.merge import merge_models
    from hf_unified_embed.recipe import recipe_from_dict
    from hf_unified_embed.recipe.run import train_from_recipe
    from hf_unified_embed.training.backbones import merge_adapter
    from hf_unified_embed.training.bidirectional_transformer import load_sentence_transformer

    root = tmp_path_factory.mktemp("artifacts")
    found = Artifacts()

    def train(name: str, base: str, **extra: Any) -> Any:
        outcome = train_from_recipe(recipe_from_dict(_recipe(unified_folder, base, root / name, **extra)))
        found.expected[str(root / name)] = _encode(outcome.model)
        return outcome

    def merge(name: str, inputs: list[str]) -> None:
        merge_models([root / folder for folder in inputs], "soup", root / name, show_progress=False)
        found.expected[str(root / name)] = _encode(load_sentence_transformer(str(root / name)))

    lora = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    train("minilm-a", minilm_path)
    train("minilm-b", minilm_path, training_args={"max_steps": 1, "per_device_train_batch_size": 4, "seed": 1})
    merge("minilm-soup", ["minilm-a", "minilm-b"])

    causal = {"attention": "causal", "padding_side": "left"}
    adapter = train("qwen2-causal-adapter", tiny_qwen2_path, model=causal, peft=lora)
    found.adapters.add(str(root / "qwen2-causal-adapter"))
    merge_adapter(adapter.model).save(str(root / "qwen2-causal-merged"))
    found.expected[str(root / "qwen2-causal-merged")] = _encode(adapter.model)

    for family, base in (("qwen2", tiny_qwen2_path), ("llama", tiny_llama_path)):
        for first in SETTINGS.values():
            stem = f"{family}-{first}"
            model = {"attention": "bidirectional", "first_bidirectional_layer": first, "padding_side": "left"}
            train(f"{stem}-trained", base, model=model)
            adapter = train(f"{stem}-adapter", base, model=model, peft=lora)
            merge_adapter(adapter.model).save(str(root / f"{stem}-merged-adapter"))
            found.expected[str(root / f"{stem}-merged-adapter")] = _encode(adapter.model)
            merge(f"{stem}-soup", [f"{stem}-trained", f"{stem}-adapter"])
            found.remote_code |= {str(root / f"{stem}-{kind}") for kind in ("trained", "merged-adapter", "soup")}
            found.bidirectional_adapters.add(str(root / f"{stem}-adapter"))
            found.adapters.add(str(root / f"{stem}-adapter"))
    return found


@pytest.fixture(scope="session")
def consumed(artifacts: Artifacts, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    requests = []
    for folder in artifacts.expected:
        requests += [(folder, "st"), (folder, "st_trust")]
        if folder not in artifacts.adapters:
            requests += [(folder, "auto"), (folder, "auto_trust")]
    return consume(requests, TEXTS, cwd=tmp_path_factory.mktemp("elsewhere"))


def _difference(result: Any, expected: np.ndarray, where: str) -> float:
    assert not isinstance(result, str), f"{where}: {result}"
    return float(np.abs(np.asarray(result, dtype=np.float64) - expected).max())


def test_every_full_model_gives_the_projects_embeddings_without_the_package(
    artifacts: Artifacts, consumed: dict[str, Any]
) -> None:
    checked = 0
    for folder, expected in artifacts.expected.items():
        if folder in artifacts.bidirectional_adapters:
            continue
        ways = (
            ["st_trust", "auto_trust"] if folder in artifacts.remote_code else ["st", "st_trust", "auto", "auto_trust"]
        )
        if folder in artifacts.adapters:  # a causal adapter: sentence-transformers loads base + adapter
            ways = ["st", "st_trust"]
        for way in ways:
            difference = _difference(consumed[f"{folder}|{way}"], expected, f"{Path(folder).name} by {way}")
            assert difference <= 1e-5, f"{Path(folder).name} by {way}: {difference:.3g} from the project's embeddings"
            checked += 1
    assert checked >= 40, checked


def test_a_bidirectional_folder_without_trust_remote_code_fails_loudly(
    artifacts: Artifacts, consumed: dict[str, Any]
) -> None:
    for folder in artifacts.remote_code:
        for way in ("st", "auto"):
            result = consumed[f"{folder}|{way}"]
            assert isinstance(result, str) and "trust_remote_code=True" in result, (Path(folder).name, way, result)


def test_a_bidirectional_adapter_never_loads_causal_and_push_refuses_it(
    artifacts: Artifacts, consumed: dict[str, Any]
) -> None:
    from hf_unified_embed.training.bidirectional_transformer import bidirectional_adapter_problem

    for folder in artifacts.bidirectional_adapters:
        for way in ("st", "st_trust"):  # the module class needs the package: an error either way
            result = consumed[f"{folder}|{way}"]
            assert isinstance(result, str), (Path(folder).name, way)
        assert "hf_unified_embed" in consumed[f"{folder}|st_trust"]
        problem = bidirectional_adapter_problem(folder)
        assert problem is not None and "merge_adapter" in problem and "\n" not in problem
    for folder in set(artifacts.expected) - artifacts.bidirectional_adapters:
        assert bidirectional_adapter_problem(folder) is None, folder


def test_the_self_contained_code_imports_only_torch_and_transformers(artifacts: Artifacts) -> None:
    for folder in artifacts.remote_code:
        config = json.loads((Path(folder) / "config.json").read_text())
        assert config["model_type"].startswith("bidirectional_") and "AutoModel" in config["auto_map"]
        code = (Path(folder) / "modeling_bidirectional.py").read_text()
        imported = {
            line.split()[1].split(".")[0] for line in code.splitlines() if line.startswith(("import ", "from "))
        }
        assert imported <= {"__future__", "typing", "torch", "transformers"}, imported


@pytest.mark.parametrize("streaming", [False, True])
def test_the_unified_dataset_loads_with_plain_load_dataset(
    unified_folder: Path, tmp_path: Path, streaming: bool
) -> None:
    """Every config of the built folder, in a process without the package, as a Hub user loads it."""
    from _processes import Expected, failure, run
    from huggingface_hub import DatasetCard

    configs = [entry["config_name"] for entry in DatasetCard.load(unified_folder / "README.md").data.configs]
    assert len(configs) >= 5, configs
    script = (
        "import json, sys\n"
        "sys.modules['hf_unified_embed'] = None\n"
        "from datasets import load_dataset\n"
        "folder, streaming, out = sys.argv[1], sys.argv[2] == 'stream', {}\n"
        "for config in json.loads(sys.argv[3]):\n"
        "    data = load_dataset(folder, config, streaming=streaming, cache_dir=sys.argv[4])\n"
        "    out[config] = {split: [len(list(rows)), sorted(next(iter(rows)))] for split, rows in data.items()}\n"
        "print(json.dumps(out))\n"
    )
    command = [
        __import__("sys").executable,
        "-c",
        script,
        str(unified_folder),
        "stream" if streaming else "plain",
        json.dumps(configs),
        str(tmp_path / "cache"),
    ]
    completed = run(command, expected=Expected(30, steps=len(configs), step_s=2), cwd=str(tmp_path))
    assert completed.returncode == 0, failure(completed)
    loaded = json.loads(completed.stdout.strip().splitlines()[-1])
    from datasets import load_dataset

    for config in configs:
        local = load_dataset(str(unified_folder), config, cache_dir=str(tmp_path / "mine"))
        assert loaded[config] == {split: [len(rows), sorted(rows.column_names)] for split, rows in local.items()}, (
            config
        )
