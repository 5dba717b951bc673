"""The shared example command line, smoke-run evaluation slices and device-dependent training settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
DEMO_SUITE = EXAMPLES / "suites" / "demo.yaml"
#: The variables the shared command line may set (tests/conftest.py sets them for the test session).
HF_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "TOKENIZERS_PARALLELISM")

# example_cli lives next to the scripts (a script's folder is on sys.path when it runs), not in the package.
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


def _parse(*argv: str, full_steps: int = -1):
    from example_cli import example_parser, parse_example_args

    return parse_example_args(example_parser(REPO / "examples" / "x.py"), list(argv), full_steps=full_steps)


def test_defaults_are_the_full_run_on_the_shared_data(capsys: pytest.CaptureFixture[str]) -> None:
    from hf_unified_embed.recipe import packaged_minilm_path

    args = _parse(full_steps=30)
    assert args.max_steps == 30 and not args.smoke and args.eval_rows is None
    assert args.base_model == packaged_minilm_path()
    assert args.data_root == REPO.parent / "shared" / "data"
    assert args.output_dir == Path("outputs/x") and args.seed == 42
    assert args.device in ("cpu", "cuda")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("argv", "smoke", "eval_rows"),
    [
        (["--max-steps", "2"], True, 64),
        (["--max-steps", "10", "--eval-rows", "5"], True, 5),
        (["--max-steps", "2", "--eval-rows", "0"], True, None),
        (["--max-steps", "11"], False, None),
        (["--max-steps", "200", "--eval-rows", "100"], False, 100),
        (["--max-steps", "-1"], False, None),
    ],
)
def test_smoke_runs_evaluate_small_slices(argv: list[str], smoke: bool, eval_rows: int | None) -> None:
    args = _parse(*argv)
    assert (args.smoke, args.eval_rows) == (smoke, eval_rows)


@pytest.mark.parametrize("argv", [["--max-steps", "0"], ["--eval-rows", "-3"], ["--max-steps", "x"]])
def test_bad_values_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        _parse(*argv)
    assert stop.value.code == 2


def test_evaluation_suite_caps_rows_and_resolves_the_yaml_data_root(tmp_path: Path) -> None:
    from example_cli import evaluation_suite

    from hf_unified_embed.evaluation import load_suite

    smoke = evaluation_suite(_parse("--max-steps", "1", "--eval-rows", "16"), DEMO_SUITE)
    assert smoke["max_rows"] == 16 and smoke["diagnostics"] == {"max_texts": 16}
    assert Path(smoke["data_root"]) == (REPO / "examples" / "data").resolve()
    loaded = load_suite(smoke)  # from any working folder: the data root is absolute
    assert loaded.max_rows == 16 and all(loaded.rows_of(entry) == 16 for entry in loaded.entries)

    full = evaluation_suite(_parse(), {"evaluations": [], "diagnostics": False}, data_root=tmp_path)
    assert "max_rows" not in full and full["diagnostics"] is False and full["data_root"] == str(tmp_path)


def test_suite_max_rows_limits_every_entry_unless_it_sets_its_own(tiny_model_path: str) -> None:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.evaluation import run_suite

    suite = {
        "data_root": str(REPO / "examples" / "data"),
        "diagnostics": False,
        "max_rows": 8,
        "evaluations": [
            {"name": "stsb-dev", "kind": "sts", "source": "stsb", "data_files": "eval/stsb-dev.tsv"},
            {"name": "trecqa", "kind": "reranking", "source": "trecqa", "data_files": "eval/trecqa-test.csv"},
            {"name": "msrp", "kind": "pair_classification", "source": "msrp", "data_files": "eval/msrp-test.tsv"},
            {
                "name": "stsb-more",
                "kind": "sts",
                "source": "stsb",
                "data_files": "eval/stsb-dev.tsv",
                "max_rows": 20,
            },
        ],
    }
    results = run_suite(SentenceTransformer(tiny_model_path, device="cpu"), suite, show_progress_bar=False)
    counts = {entry.name: entry.num_examples for entry in results.entries}
    # Reranking counts the questions of the 8 rows that have both answers and non-answers.
    assert 0 < counts.pop("trecqa") <= 8
    assert counts == {"stsb-dev": 8, "msrp": 8, "stsb-more": 20}


@pytest.mark.parametrize("value", [0, -1, 1.5, "10", True])
def test_suite_max_rows_must_be_a_positive_integer(value: object) -> None:
    from hf_unified_embed.errors import SuiteError
    from hf_unified_embed.evaluation import load_suite

    entry = {"name": "s", "kind": "sts", "source": "stsb", "data_files": "x.tsv"}
    with pytest.raises(SuiteError, match="max_rows"):
        load_suite({"evaluations": [entry], "max_rows": value})
    with pytest.raises(SuiteError, match=r"entry 's', field 'max_rows'"):
        load_suite({"evaluations": [{**entry, "max_rows": value}]})


def test_device_training_args_pin_memory_only_with_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from hf_unified_embed.training import device_training_args

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_training_args() == {"dataloader_pin_memory": False}
    assert device_training_args("cpu") == {"dataloader_pin_memory": False, "use_cpu": True}
    # A GPU without bfloat16 or TF32 (compute capability 7.0); tests/test_device_defaults.py has the rest.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    assert device_training_args()["dataloader_pin_memory"] is True
    assert device_training_args("cuda:1")["dataloader_pin_memory"] is True
    assert device_training_args("cpu") == {"dataloader_pin_memory": False, "use_cpu": True}


def test_training_arguments_share_the_settings_and_the_script_wins(tmp_path: Path) -> None:
    import torch
    from example_cli import training_arguments

    model = torch.nn.Linear(4, 4)
    options = _parse("--max-steps", "3", "--seed", "7", "--device", "cpu")
    args = training_arguments(options, tmp_path, model=model, seed=8)
    assert (args.max_steps, args.seed, args.save_strategy, args.report_to) == (3, 8, "no", [])
    assert args.dataloader_pin_memory is False and args.use_cpu is True


def test_recipe_training_args_leave_the_device_defaults_to_the_run(tmp_path: Path) -> None:
    """A recipe's device settings are train_from_recipe's own (they depend on the base model's size):
    only ``--device cpu`` is passed on."""
    from example_cli import recipe_training_args

    assert recipe_training_args(_parse("--device", "cpu"))["use_cpu"] is True
    assert "use_cpu" not in recipe_training_args(_parse("--device", "cuda"))
    assert not {"bf16", "tf32", "dataloader_num_workers"} & recipe_training_args(_parse("--device", "cuda")).keys()


def test_run_example_turns_input_errors_into_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from example_cli import require_files, run_example

    with pytest.raises(SystemExit) as stop:
        run_example(lambda: require_files(tmp_path, "a/b.tsv", "c"))
    assert stop.value.code == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path}: missing a/b.tsv, c; point --data-root at the folder that holds them\n"
    )


def test_sample_recipe_looks_the_bundled_files_up_by_name(tmp_path: Path) -> None:
    from example_cli import sample_recipe

    recipe = sample_recipe(REPO / "examples" / "recipes" / "sample.yaml", tmp_path)
    assert recipe.base_dir == tmp_path
    assert {spec.name: spec.data_files for spec in recipe.sources}["stsb"] == "stsb-train.tsv"
    assert {spec.name: spec.license for spec in recipe.sources}["sick"] == "CC-BY-NC-SA-3.0"  # notes kept


def _without_hf_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment of a user who set none of the variables (monkeypatch restores them afterwards)."""
    import huggingface_hub.constants

    for name in HF_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    # parse_example_args also updates the libraries' copies of the setting when they are already imported.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", huggingface_hub.constants.HF_HUB_OFFLINE)
    datasets_config = sys.modules.get("datasets.config")
    if datasets_config is not None:
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
            monkeypatch.setattr(datasets_config, name, getattr(datasets_config, name))


def test_importing_example_cli_leaves_the_environment_alone() -> None:
    # A fresh process, without the variables the test session sets: a setdefault at import would show.
    env = {key: value for key, value in os.environ.items() if key not in HF_VARIABLES}
    code = (
        "import os, sys; before = dict(os.environ); sys.path.insert(0, sys.argv[1]); import example_cli; "
        "changed = sorted(set(before.items()) ^ set(os.environ.items())); print(changed); assert not changed"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(EXAMPLES)], env=env, cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_hub_base_model_does_not_turn_offline_mode_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    _without_hf_variables(monkeypatch)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    args = _parse("--base-model", "BAAI/bge-small-en-v1.5")
    assert args.base_model == "BAAI/bge-small-en-v1.5" and args.offline is False
    assert "HF_HUB_OFFLINE" not in os.environ and huggingface_hub.constants.HF_HUB_OFFLINE is False
    assert os.environ["TOKENIZERS_PARALLELISM"] == "false"


def test_the_packaged_default_base_model_turns_offline_mode_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    _without_hf_variables(monkeypatch)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    args = _parse()
    assert args.offline is True and os.environ["HF_HUB_OFFLINE"] == "1"
    # huggingface_hub was imported before (by this test session): its copy of the setting follows.
    assert huggingface_hub.constants.HF_HUB_OFFLINE is True


def test_the_environment_wins_over_the_packaged_default(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_hf_variables(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert _parse().offline is False and os.environ["HF_HUB_OFFLINE"] == "0"


def test_offline_option_turns_offline_mode_on_with_a_hub_base_model(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_hf_variables(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the user's explicit option wins over the environment
    args = _parse("--base-model", "BAAI/bge-small-en-v1.5", "--offline")
    assert args.offline is True and os.environ["HF_HUB_OFFLINE"] == "1"


def test_a_script_without_the_packaged_base_or_needing_the_hub_stays_online(monkeypatch: pytest.MonkeyPatch) -> None:
    from example_cli import example_parser, parse_example_args

    _without_hf_variables(monkeypatch)
    own_base = parse_example_args(example_parser(EXAMPLES / "x.py"), [], packaged_base=False)
    assert own_base.base_model is None and own_base.offline is False
    parser = example_parser(EXAMPLES / "x.py")
    parser.add_argument("--teacher")
    teacher = parse_example_args(parser, ["--teacher", "BAAI/bge-small-en-v1.5"], needs_hub=lambda a: bool(a.teacher))
    assert teacher.offline is False and "HF_HUB_OFFLINE" not in os.environ
