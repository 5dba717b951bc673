"""Every script in examples/ runs end to end: a smoke run (2 steps) on the bundled sample and a tiny model.

The bundled sample (examples/data) holds a few hundred rows of each source; ``sample_data_root``
lays it out like ../shared/data (links, no copies), so every example reads it through its ordinary
``--data-root``. Scripts are discovered, so a new example fails here until it has an entry in
``SMOKE_RUNS``. Each runs in its own process, as a user starts it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests import _processes as processes

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
SAMPLE = EXAMPLES / "data"
#: The shared command line of the scripts, next to them; not an example itself.
SHARED_CLI = "example_cli.py"
#: The README's quick start: no command line of its own (tests/test_quickstart.py runs it).
QUICKSTART = "quickstart.py"
SCRIPTS = sorted(path.name for path in EXAMPLES.glob("*.py") if path.name not in {SHARED_CLI, QUICKSTART})
SHARED_OPTIONS = (
    "--base-model",
    "--data-root",
    "--output-dir",
    "--max-steps",
    "--seed",
    "--eval-rows",
    "--device",
    "--offline",
)
#: The variables the shared command line may set (tests/conftest.py sets them for the test session).
HF_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "TOKENIZERS_PARALLELISM")

# example_cli lives next to the scripts (a script's folder is on sys.path when it runs), not in the package.
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

#: Scripts that read the bundled sample in its own layout (their default --data-root).
OWN_SAMPLE_LAYOUT = {"demo.py", "train_llm_lora.py"}
#: Scripts whose default base model is not a BERT (they build their own tiny decoder).
OWN_BASE_MODEL = {"train_llm_lora.py"}


def _exists(*relative: str) -> Callable[[Path], None]:
    def check(output: Path) -> None:
        for name in relative:
            assert (output / name).exists(), f"{output / name} was not written"

    return check


def _lora_outputs(output: Path) -> None:
    from _roundtrip import assert_hub_metadata, reload

    _exists("adapter/adapter_model.safetensors", "adapter/README.md", "merged/model.safetensors")(output)
    # The merged folder, reloaded in a fresh process, encodes as the adapter folder does.
    adapter, merged = (np.asarray(reload("embeddings", output / name)) for name in ("adapter", "merged"))
    assert np.abs(adapter - merged).max() <= 1e-5, "the merged model does not reload as the adapter model"
    card = reload("card", output / "merged" / "README.md")["data"]
    assert card["base_model"] == "example/tiny-qwen2" and "base_model_relation" not in card, "a full model"
    assert_hub_metadata(card)


def _demo_outputs(output: Path) -> None:
    import yaml

    _exists("results.json", "model/README.md", "model/evaluation.json", "model/hf_unified_embed_recipe.yaml", "logs")(
        output
    )
    # The demo trains examples/recipes/train.yaml as shipped: only data, output, seed, steps and device differ.
    shipped, trained = (
        yaml.safe_load(path.read_text(encoding="utf-8"))
        for path in (REPO / "examples" / "recipes" / "train.yaml", output / "model" / "hf_unified_embed_recipe.yaml")
    )
    for key in ("losses", "negatives_per_query", "max_seq_length", "instructions"):
        assert trained[key] == shipped[key], key
    assert trained["data"]["tasks"] == shipped["data"]["tasks"]
    assert {key: trained["sampler"][key] for key in shipped["sampler"]} == shipped["sampler"]
    different = {"max_steps", "seed", "save_strategy", "report_to", "use_cpu", "disable_tqdm"}
    assert {k: v for k, v in trained["training_args"].items() if k not in different} == shipped["training_args"]
    results = json.loads((output / "results.json").read_text(encoding="utf-8"))
    assert set(results) == {"base", "recipe"}
    card = (output / "data" / "README.md").read_text(encoding="utf-8")
    # The sample recipe's provenance reaches the card through the Python API (build_unified + save_unified).
    assert "CC-BY-NC-SA-3.0" in card and "source: unknown" not in card and "license: unknown" not in card


#: Per script: its own options for a smoke run, and what it must have written.
SMOKE_RUNS: dict[str, tuple[list[str], Callable[[Path], None]]] = {
    "train_llm_lora.py": (["--batch-size", "4", "--lora-r", "4"], _lora_outputs),
    "curriculum_datacube.py": (
        ["--iterations", "2000", "--max-rows-per-task", "64", "--batch-size", "8"],
        _exists("curriculum/curriculum_plan.json", "model/model.safetensors"),
    ),
    "demo.py": ([], _demo_outputs),
    "distill_mined_negatives.py": (
        ["--batch-size", "4", "--max-rows", "32", "--corpus-size", "64"],
        _exists("mined/README.md", "model/model.safetensors"),
    ),
    "gur_pretrain.py": (["--batch-size", "8", "--save-mlm-head"], _exists("final/mlm_head.safetensors")),
    "merge_and_publish.py": ([], _exists("merged-hierarchical/README.md", "ir-leaning/model.safetensors")),
    "merge_hierarchical.py": ([], _exists("merged/model.safetensors", "deltas.png")),
    "train_angle_stsb.py": (["--batch-size", "8"], _exists("model/evaluation.json")),
    "train_instructor.py": (["--batch-size", "8"], _exists("model/model.safetensors")),
    "train_ir_sts.py": (["--batch-size", "8", "--max-rows", "64"], _exists("final/model.safetensors")),
}


@pytest.fixture(scope="session")
def sample_data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample laid out like ../shared/data."""
    from example_cli import lay_out_sample

    return lay_out_sample(tmp_path_factory.mktemp("sample-data"))


def _load(script: str):
    spec = importlib.util.spec_from_file_location(f"example_{Path(script).stem}", EXAMPLES / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_example_has_a_smoke_run() -> None:
    assert sorted(SMOKE_RUNS) == SCRIPTS, "add the new example to SMOKE_RUNS in tests/test_examples.py"


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_takes_the_shared_options(script: str, capsys: pytest.CaptureFixture[str]) -> None:
    from example_cli import example_parser

    with pytest.raises(SystemExit) as stop:
        _load(script).main(["--help"])
    assert stop.value.code == 0
    text = _without_defaults(capsys.readouterr().out)
    shared = _without_defaults(example_parser(EXAMPLES / script).format_help())
    group = shared[shared.index("options every example takes") :]
    # The same option lines, help texts and defaults as the shared parser's (not copies that drift);
    # only the defaults of --data-root and --base-model may differ (the demo reads the bundled sample).
    assert group in text
    for option in SHARED_OPTIONS:
        assert option in group


#: Run in a fresh process: load every script and run its ``main`` up to ``parse_example_args``.
BEFORE_PARSING = """
import importlib.util, json, os, sys
from pathlib import Path

examples = Path(sys.argv[1])
sys.path.insert(0, str(examples))
before = dict(os.environ)
import example_cli

class Parsed(Exception):
    pass

def parse_example_args(parser, argv=None, **settings):
    raise Parsed(sorted(name for name in ("huggingface_hub", "datasets", "transformers") if name in sys.modules))

example_cli.parse_example_args = parse_example_args  # the scripts import the name when they are loaded
report = {}
for script in sys.argv[2:]:
    spec = importlib.util.spec_from_file_location("example_" + Path(script).stem, examples / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        module.main([])
    except Parsed as parsed:
        report[script] = parsed.args[0]
    else:
        report[script] = "main never called parse_example_args"
report["environment changes"] = sorted(set(before.items()) ^ set(os.environ.items()))
print(json.dumps(report))
"""


def test_examples_import_the_hugging_face_libraries_only_after_parsing() -> None:
    # parse_example_args decides offline mode; huggingface_hub reads HF_HUB_OFFLINE when first imported.
    env = {key: value for key, value in os.environ.items() if key not in HF_VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", BEFORE_PARSING, str(EXAMPLES), *SCRIPTS],
        env={**env, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report.pop("environment changes") == [], "loading an example changed os.environ"
    assert report == {script: [] for script in SCRIPTS}, "Hugging Face libraries imported before parse_example_args"


def _without_defaults(text: str) -> str:
    """Help text, whitespace normalised (column widths depend on the other options), without the two defaults."""
    text = re.sub(r"read from \(default:[^)]*\)", "read from (default: DATA_ROOT)", " ".join(text.split()))
    return re.sub(r"Hub id \(default:[^)]*\)", "Hub id (default: BASE)", text)


@pytest.mark.examples
@pytest.mark.parametrize("script", SCRIPTS)
def test_example_smoke_run(
    script: str, tiny_model_path: str, minilm_path: str, sample_data_root: Path, tmp_path: Path
) -> None:
    extra, check = SMOKE_RUNS[script]
    output = tmp_path / "out"
    data_root = [] if script in OWN_SAMPLE_LAYOUT else ["--data-root", str(sample_data_root)]
    base = [] if script in OWN_BASE_MODEL else ["--base-model", tiny_model_path]
    # A random tiny model scores every document alike, so its mining keeps no negative past the positive-aware
    # margin and the distillation would have nothing to learn from (refused): the real MiniLM mines.
    teachers = {"curriculum_datacube.py": tiny_model_path, "distill_mined_negatives.py": minilm_path}
    teacher = ["--teacher", teachers[script]] if script in teachers else []
    command = [sys.executable, str(EXAMPLES / script), *base, *data_root, *teacher]
    command += ["--output-dir", str(output), "--max-steps", "2", *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    # Measured 8-13 s on the quiet machine: start-up, 2 steps per training, merges and evaluation slices.
    done = processes.run(command, expected=processes.Expected(steps=40), cwd=tmp_path, env=env)
    log = done.stdout + done.stderr
    assert done.returncode == 0, processes.failure(done)
    assert "smoke run: 2 step(s)" in done.stdout
    assert "pin_memory" not in log, "a dataloader pinned memory without an accelerator"
    check(output)


@pytest.mark.examples
def test_example_reports_missing_data_as_one_line(tmp_path: Path) -> None:
    done = processes.run(
        [sys.executable, str(EXAMPLES / "train_ir_sts.py"), "--data-root", str(tmp_path), "--max-steps", "1"],
        expected=processes.Expected(),
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip().splitlines()[-1].startswith(f"error: {tmp_path}: missing sts/stsbenchmark/sts-train.csv")
    )
    assert "Traceback" not in done.stderr


@pytest.mark.examples
def test_without_the_shared_data_an_example_reads_the_bundled_sample(tiny_model_path: str, tmp_path: Path) -> None:
    # A checkout (or copied examples) with no ../shared/data beside it: the scripts and their shared command
    # line, with the bundled sample next to them, as in the repository.
    examples = tmp_path / "checkout" / "examples"
    examples.mkdir(parents=True)
    for name in ("train_ir_sts.py", SHARED_CLI):
        (examples / name).write_bytes((EXAMPLES / name).read_bytes())
    (examples / "data").symlink_to(SAMPLE, target_is_directory=True)
    assert not (tmp_path / "shared" / "data").exists()
    command = [sys.executable, str(examples / "train_ir_sts.py"), "--base-model", tiny_model_path]
    command += ["--output-dir", str(tmp_path / "out"), "--max-steps", "2", "--batch-size", "8", "--max-rows", "64"]
    scratch = tmp_path / "tmp"  # the child's temporary folder: the sample's layout is made there
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(scratch)}
    done = processes.run(command, expected=processes.Expected(steps=2), cwd=tmp_path, env=env)
    assert done.returncode == 0, processes.failure(done)
    notes = [line for line in done.stderr.splitlines() if "bundled sample" in line]
    assert notes == [
        f"{tmp_path / 'shared' / 'data'} does not exist: reading the bundled sample ({examples / 'data'}) instead; "
        "--data-root DIR reads yours"
    ]
    assert (tmp_path / "out" / "final" / "model.safetensors").is_file()
    assert not list(scratch.glob("hf-unified-embed-sample-*")), "the sample's layout outlived the run"
