"""Issue 31, rule 2: one strict YAML loader for every file the package reads, and paths relative to the file.

* A key given twice in one mapping (block or flow, at any depth) stops every command with exit status 2
  and one line naming the file, both lines and the key path — training recipe, build recipe, merge
  config, evaluation suite alike. PyYAML alone keeps the last value without a word.
* A relative path in a training recipe or a merge config is relative to the file's folder, as build
  recipes and suites already were, so a command means the same from any working folder.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from _merge_helpers import noisy_copy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.evaluation import load_suite
from hf_unified_embed.merge import MergeConfig
from hf_unified_embed.recipe import load_train_recipe, recipe_from_dict

REPO = Path(__file__).resolve().parent.parent


def run_cli(argv: list[str]) -> tuple[int, list[str]]:
    """Exit status and stderr lines of one in-process command (usable inside hypothesis examples)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(argv)
    return status, err.getvalue().splitlines()


# One document of each kind, the commands that read it, and where a duplicate goes in the examples below.
KINDS: dict[str, dict[str, Any]] = {
    "train recipe": {
        "text": """\
base_model: null
data:
  path: ./data
  tasks: [stsb]
losses:
  sts: {name: CoDiEmbSTSLoss}
training_args:
  num_train_epochs: 1
  learning_rate: 5.0e-5
  learning_rate: 5.0
output_dir: ./out
""",
        "message": "{file}:10: duplicate key 'learning_rate' in 'training_args' (first at line 9)",
        "commands": [["train", "{file}"], ["train", "{file}", "--check"]],
    },
    "train recipe, flow mapping": {
        "text": """\
data: ./data
losses: {sts: CoDiEmbSTSLoss}
training_args: {learning_rate: 5.0e-5, learning_rate: 5.0}
output_dir: ./out
""",
        "message": "{file}:3: duplicate key 'learning_rate' in 'training_args' (first at line 3)",
        "commands": [["train", "{file}", "--check"]],
    },
    "build recipe": {
        "text": """\
sources:
  - name: stsb
    format: stsb
    data_files: stsb-train.tsv
    task_type: sts
    task_type: retrieval
""",
        "message": "{file}:6: duplicate key 'task_type' in 'sources[0]' (first at line 5)",
        "commands": [["build", "{file}", "-o", "{out}"]],
    },
    "merge config": {
        "text": """\
method: task_arithmetic
models: [run-a, run-b]
output_dir: merged
parameters:
  base: base
  weights: [0.5, 0.5]
  base: other-base
""",
        "message": "{file}:7: duplicate key 'base' in 'parameters' (first at line 5)",
        "commands": [["merge", "{file}"]],
    },
    "evaluation suite": {
        "text": """\
name: dev
evaluations:
  - {name: stsb-dev, kind: sts, source: stsb, data_files: stsb-dev.tsv}
  - name: sick-trial
    kind: sts
    source: sick
    data_files: sick-trial.txt
    kind: retrieval
""",
        "message": "{file}:8: duplicate key 'kind' in 'evaluations[1]' (first at line 5)",
        "commands": [["evaluate", "no-such-model", "{file}"]],
    },
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_duplicate_key_stops_every_command_with_one_line(kind: str, tmp_path: Path) -> None:
    spec = KINDS[kind]
    file = tmp_path / "config.yaml"
    file.write_text(spec["text"], encoding="utf-8")
    for command in spec["commands"]:
        argv = [part.format(file=file, out=tmp_path / "out") for part in command]
        status, lines = run_cli(argv)
        assert (status, lines) == (2, ["error: " + spec["message"].format(file=file)]), argv
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"], "nothing is written"


def test_a_suite_named_by_a_recipe_reports_its_own_lines(tmp_path: Path) -> None:
    (tmp_path / "suite.yaml").write_text("name: a\nname: b\nevaluations: []\n", encoding="utf-8")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("data: ./data\nlosses: {sts: CoDiEmbSTSLoss}\nevaluation: suite.yaml\noutput_dir: out\n")
    (tmp_path / "data").mkdir()
    status, lines = run_cli(["train", str(recipe), "--check"])
    assert status == 2
    assert lines == [
        f"error: {recipe}: evaluation: {tmp_path / 'suite.yaml'}:2: duplicate key 'name' at the top level "
        "(first at line 1)"
    ]


def test_a_merged_key_may_be_overridden_but_not_given_twice(tmp_path: Path) -> None:
    """``<<: *defaults`` then an explicit key is YAML's override (allowed); the explicit key twice is not."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "data: ./data\nlosses: {sts: CoDiEmbSTSLoss}\noutput_dir: out\n"
        "training_args:\n  <<: {num_train_epochs: 1, learning_rate: 5.0e-5}\n  learning_rate: 2.0e-5\n"
    )
    assert load_train_recipe(recipe).training_args == {"num_train_epochs": 1, "learning_rate": 2.0e-5}
    recipe.write_text(
        "data: ./data\nlosses: {sts: CoDiEmbSTSLoss}\noutput_dir: out\n"
        "training_args:\n  <<: {num_train_epochs: 1}\n  learning_rate: 2.0e-5\n  learning_rate: 5.0\n"
    )
    status, lines = run_cli(["train", str(recipe), "--check"])
    assert (status, lines) == (
        2,
        [f"error: {recipe}:7: duplicate key 'learning_rate' in 'training_args' (first at line 6)"],
    )


# --- the same, drawn: a key path, a duplicated key and the keys around it, in each kind of file ----------

#: Plain scalars YAML 1.1 reads as booleans or null: as keys they would equal one another (``yes``, ``on``).
_SPECIAL = {"yes", "no", "on", "off", "true", "false", "null", "y", "n"}
keys = st.from_regex(r"[a-z][a-z0-9_]{0,9}", fullmatch=True).filter(lambda key: key not in _SPECIAL)

Pairs = list[tuple[str, Any]]  # a mapping that may give a key twice

#: A document of each kind as pairs, the command that reads it, and the mappings inside it where the
#: drawn duplicate goes (a path of keys and list indices; a drawn path of new mappings may go on).
BASES: dict[str, tuple[Pairs, list[str], list[list[str | int]]]] = {
    "train recipe": (
        [
            ("data", [("path", "./data"), ("tasks", ["stsb", "wikiqa"])]),
            ("losses", [("retrieval", [("name", "MultiPositiveInfoNCELoss")]), ("sts", [("name", "CoDiEmbSTSLoss")])]),
            ("sampler", [("interleave", "shuffled"), ("batch_sizes", [("wikiqa", 16)])]),
            ("training_args", [("learning_rate", 0.00005), ("warmup_steps", 0.1)]),
            ("output_dir", "./out"),
        ],
        ["train", "{file}", "--check"],
        [[], ["data"], ["losses", "sts"], ["sampler", "batch_sizes"], ["training_args"]],
    ),
    "build recipe": (
        [("sources", [[("name", "stsb"), ("format", "stsb"), ("data_files", "stsb.tsv"), ("task_type", "sts")]])],
        ["build", "{file}", "-o", "{out}"],
        [[], ["sources", 0]],
    ),
    "merge config": (
        [
            ("method", "task_arithmetic"),
            ("models", ["run-a", "run-b"]),
            ("parameters", [("base", "base"), ("weights", [0.5, 0.5])]),
            ("output_dir", "merged"),
            ("card", [("model_name", "me/merged")]),
        ],
        ["merge", "{file}"],
        [[], ["parameters"], ["card"]],
    ),
    "evaluation suite": (
        [
            ("name", "dev"),
            ("diagnostics", [("max_texts", 64)]),
            ("evaluations", [[("name", "stsb-dev"), ("kind", "sts"), ("source", "stsb"), ("data_files", "x.tsv")]]),
        ],
        ["evaluate", "no-such-model", "{file}"],
        [[], ["diagnostics"], ["evaluations", 0]],
    ),
}


def is_mapping(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, tuple) for item in value)


def render(pairs: Pairs, target: Pairs, flow: bool, duplicated: str) -> tuple[str, list[int]]:
    """YAML text of ``pairs`` in block style (``target`` on one line if ``flow``) and the lines of the
    key ``duplicated`` in ``target``."""
    out: list[str] = []
    found: list[int] = []

    def inline(value: Any) -> str:
        if is_mapping(value):
            return "{" + ", ".join(f"{key}: {inline(item)}" for key, item in value) + "}"
        if isinstance(value, list):
            return "[" + ", ".join(inline(item) for item in value) + "]"
        return json.dumps(value)  # JSON scalars are YAML scalars

    def block(mapping: Pairs, indent: str, first_prefix: str | None = None) -> None:
        for index, (key, item) in enumerate(mapping):
            prefix = first_prefix if first_prefix is not None and index == 0 else indent
            if mapping is target and key == duplicated:
                found.append(len(out) + 1)
            if flow and item is target:
                out.append(f"{prefix}{key}: {inline(item)}")
                found.extend(len(out) for inner, _ in item if inner == duplicated)
            elif is_mapping(item):
                out.append(f"{prefix}{key}:")
                block(item, indent + "  ")
            elif isinstance(item, list) and item and all(is_mapping(entry) for entry in item):
                out.append(f"{prefix}{key}:")
                for entry in item:
                    block(entry, indent + "    ", first_prefix=indent + "  - ")
            else:
                out.append(f"{prefix}{key}: {inline(item)}")

    block(pairs, "")
    return "\n".join(out) + "\n", found


@st.composite
def documents(draw: st.DrawFn, kind: str) -> tuple[str, str, int, int, str]:
    """(YAML text, the duplicated key, its first line, its second line, the key path the message names)."""
    pairs: Pairs = copy.deepcopy(BASES[kind][0])
    path: list[str | int] = list(draw(st.sampled_from(BASES[kind][2])))
    target: Any = pairs
    for step in path:
        target = target[step] if isinstance(step, int) else dict(target)[step]
    for extra in draw(st.lists(keys, max_size=2)):  # deeper: new mappings below the chosen one
        if extra in dict(target):
            break
        inner: Pairs = []
        target.append((extra, inner))
        target, path = inner, [*path, extra]
    existing = [key for key, _ in target]
    key = draw(st.sampled_from(existing) | keys if existing else keys)
    fillers = draw(st.lists(keys.filter(lambda k: k not in existing and k != key), max_size=4, unique=True))
    kept: Pairs = [pair for pair in target if pair[0] != key] + [(name, i) for i, name in enumerate(fillers)]
    first = draw(st.integers(0, len(kept)))
    second = draw(st.integers(first + 1, len(kept) + 1))
    values = draw(st.tuples(st.integers(-5, 5) | keys, st.integers(-5, 5) | keys))
    kept.insert(first, (key, values[0]))
    kept.insert(second, (key, values[1]))
    target[:] = kept
    flow = bool(path) and not isinstance(path[-1], int) and draw(st.booleans())
    text, found = render(pairs, target, flow, key)
    assert len(found) == 2, (text, found)
    where = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path).lstrip(".")
    return text, key, found[0], found[1], where


@pytest.mark.parametrize("kind", list(BASES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_drawn_duplicate_key_names_both_lines_and_its_path(kind: str, data: st.DataObject) -> None:
    text, key, first, second, where = data.draw(documents(kind), label="document")
    place = f"in '{where}'" if where else "at the top level"
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / f"{kind.replace(' ', '-')}.yaml"
        file.write_text(text, encoding="utf-8")
        argv = [part.format(file=file, out=Path(folder) / "out") for part in BASES[kind][1]]
        status, lines = run_cli(argv)
        assert status == 2, text
        assert lines == [f"error: {file}:{second}: duplicate key '{key}' {place} (first at line {first})"], text
        assert sorted(p.name for p in Path(folder).iterdir()) == [file.name]


# --- relative paths: relative to the file, from any working folder -------------------------------------


def test_the_shipped_recipe_names_the_same_files_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``train examples/recipes/train.yaml`` from the repository root, from its own folder and from elsewhere."""
    recipe_file = REPO / "examples" / "recipes" / "train.yaml"
    seen = []
    for cwd, name in (
        (REPO, "examples/recipes/train.yaml"),
        (recipe_file.parent, "train.yaml"),
        (tmp_path, str(recipe_file)),
        (tmp_path, os.path.relpath(recipe_file, tmp_path)),
    ):
        monkeypatch.chdir(cwd)
        recipe = load_train_recipe(name)
        assert recipe.source == name
        assert isinstance(recipe.evaluation, str)
        paths = {"data.path": recipe.data.path, "evaluation": recipe.evaluation, "output_dir": recipe.output_dir}
        assert all(Path(value).is_absolute() for value in paths.values()), paths
        seen.append({key: Path(value).resolve() for key, value in paths.items()})
        assert load_suite(recipe.evaluation).name == "demo-sample"  # the suite file is found from here
    assert (
        seen
        == [
            {
                "data.path": REPO / "outputs" / "demo" / "data",  # what `make demo` writes
                "evaluation": REPO / "examples" / "suites" / "demo.yaml",
                "output_dir": REPO / "outputs" / "recipe-run",
            }
        ]
        * 4
    )
    assert load_train_recipe(recipe_file).base_model is None  # the packaged model: no path


RECIPE_WITH_EVERY_PATH = """\
base_model: ../models/base
data: {path: ../data, tasks: [stsb]}
losses: {sts: CoDiEmbSTSLoss}
curriculum: {plan: ../data/curriculum_plan.json}
evaluation: ../suites/dev.yaml
evaluation_data_root: ../eval-data
output_dir: ../runs/out
training_args:
  output_dir: ../runs/checkpoints
  logging_dir: logs
  resume_from_checkpoint: ../runs/checkpoints/checkpoint-5
  deepspeed: ds.json
  fsdp_config: {min_num_params: 1}
  learning_rate: 5.0e-5
"""


def test_every_path_of_a_training_recipe_is_relative_to_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "project" / "recipes"
    folder.mkdir(parents=True)
    (folder / "local-model").mkdir()
    recipe_file = folder / "recipe.yaml"
    recipe_file.write_text(RECIPE_WITH_EVERY_PATH, encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    project = str(tmp_path / "project")

    recipe = load_train_recipe(os.path.relpath(recipe_file))
    assert recipe.base_model == f"{project}/models/base"
    assert recipe.data.path == f"{project}/data"
    assert recipe.curriculum is not None and recipe.curriculum.plan == f"{project}/data/curriculum_plan.json"
    assert recipe.evaluation == f"{project}/suites/dev.yaml"
    assert recipe.evaluation_data_root == f"{project}/eval-data"
    assert recipe.output_dir == f"{project}/runs/out"
    assert recipe.training_args == {
        "output_dir": f"{project}/runs/checkpoints",
        "logging_dir": f"{folder}/logs",
        "resume_from_checkpoint": f"{project}/runs/checkpoints/checkpoint-5",
        "deepspeed": f"{folder}/ds.json",
        "fsdp_config": {"min_num_params": 1},  # a mapping, not a path
        "learning_rate": 5.0e-5,
    }

    # Hub ids, absolute and ~ paths stay as written; a bare name is local when it exists next to the file.
    recipe_file.write_text(
        "base_model: local-model\n"
        "data: {path: org/dataset}\n"
        "losses: {sts: CoDiEmbSTSLoss}\n"
        "curriculum: {teacher: sentence-transformers/all-MiniLM-L6-v2}\n"
        "evaluation: {evaluations: [{name: dev, kind: sts, source: stsb, data_files: dev.tsv}]}\n"
        f"output_dir: {tmp_path}/absolute\n"
        "training_args: {resume_from_checkpoint: true, logging_dir: ~/logs}\n",
        encoding="utf-8",
    )
    recipe = load_train_recipe(recipe_file)
    assert recipe.base_model == f"{folder}/local-model"
    assert recipe.data.path == "org/dataset"
    assert recipe.curriculum is not None and recipe.curriculum.teacher == "sentence-transformers/all-MiniLM-L6-v2"
    assert recipe.output_dir == f"{tmp_path}/absolute"
    assert recipe.training_args == {"resume_from_checkpoint": True, "logging_dir": "~/logs"}
    # An inline suite's files are relative to the recipe's folder too (its default data_root).
    assert isinstance(recipe.evaluation, dict) and recipe.evaluation["data_root"] == str(folder)
    assert load_suite(recipe.evaluation).data_root == folder


def test_a_recipe_given_as_a_mapping_keeps_paths_relative_to_the_working_folder() -> None:
    raw = yaml.safe_load(RECIPE_WITH_EVERY_PATH)
    recipe = recipe_from_dict(raw)
    assert (recipe.data.path, recipe.output_dir, recipe.evaluation) == ("../data", "../runs/out", "../suites/dev.yaml")
    assert recipe.training_args["deepspeed"] == "ds.json"


def test_train_check_finds_the_recipes_files_from_another_folder(
    tiny_model_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The preflight of ``train RECIPE --check`` (every file must exist) from a folder that is not the recipe's."""
    from hf_unified_embed.recipe.preflight import preflight

    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    (folder / "base").symlink_to(tiny_model_path, target_is_directory=True)
    suite = "evaluations: [{name: stsb-dev, kind: sts, source: stsb, data_files: stsb-dev.tsv, split: validation}]\n"
    (folder / "suite.yaml").write_text(f"data_root: {REPO / 'examples' / 'data' / 'eval'}\n{suite}")
    (folder / "recipe.yaml").write_text(
        "base_model: ./base\ndata: ./data\nlosses: {sts: CoDiEmbSTSLoss}\nevaluation: suite.yaml\noutput_dir: out\n"
        "training_args: {max_steps: 1}\n"
    )
    monkeypatch.chdir(tmp_path)
    resolved = preflight(load_train_recipe("project/recipe.yaml"))
    assert resolved.recipe.output_dir == str(folder / "out")
    assert resolved.training_args.output_dir == str(folder / "out-checkpoints")
    assert not (tmp_path / "out").exists() and not (folder / "out").exists()


def test_a_merge_config_reads_its_paths_relative_to_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "project" / "merges"
    folder.mkdir(parents=True)
    project = tmp_path / "project"
    config = folder / "merge.yaml"
    config.write_text(
        """\
method: hierarchical
models: [../runs/ir, {path: ../runs/sts, id: org/sts}, ../runs/mixed]
output_dir: ../merged
reference: ../runs/mixed
model_ids: {../base: org/base}
parameters:
  ir_models: [0, ../runs/mixed]
  sts_models: [../runs/sts, 2]
  base: ../base
  ir_specialist: ./ir-only
  sts_specialist: /abs/sts-only
  temperature: 0.5
""",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    merge = MergeConfig.from_yaml("project/merges/merge.yaml")
    assert [spec.path for spec in merge.models] == [project / "runs/ir", project / "runs/sts", project / "runs/mixed"]
    assert merge.models[1].id == "org/sts"
    assert merge.output_dir == project / "merged"
    assert merge.reference == str(project / "runs/mixed")
    assert merge.given_ids() == {project / "runs/sts": "org/sts", project / "base": "org/base"}
    assert merge.parameters == {
        "ir_models": [0, str(project / "runs/mixed")],
        "sts_models": [str(project / "runs/sts"), 2],
        "base": str(project / "base"),
        "ir_specialist": str(folder / "ir-only"),
        "sts_specialist": "/abs/sts-only",
        "temperature": 0.5,
    }
    config.write_text(
        """\
method: task_arithmetic
models: [../runs/ir, org/hub-model]
output_dir: ../merged
parameters: {base: ../base}
search:
  suite: ../suites/dev.yaml
  data_root: ../data
  parameters: {weights: [0.5, 1.0]}
  objective: {stsb-dev: 1.0}
""",
        encoding="utf-8",
    )
    merge = MergeConfig.from_yaml(config)
    assert [spec.path for spec in merge.models] == [project / "runs/ir", Path("org/hub-model")]  # a Hub id stays
    assert merge.parameters == {"base": str(project / "base")}
    assert merge.search is not None
    assert (merge.search.suite, merge.search.data_root) == (str(project / "suites/dev.yaml"), str(project / "data"))
    # A mapping given to the Python API has no file: its paths stay relative to the working folder.
    assert MergeConfig.from_dict({"method": "soup", "models": ["a", "b"], "output_dir": "o"}).output_dir == Path("o")


def test_merge_command_reads_the_files_paths_from_any_folder(
    tiny_model_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``merge project/merge.yaml`` from elsewhere merges the config's models into the config's output_dir;
    a flag's path (``-o``) is relative to the working folder."""
    project = tmp_path / "project"
    noisy_copy(tiny_model_path, project / "runs" / "a", 0)
    noisy_copy(tiny_model_path, project / "runs" / "b", 1)
    (project / "merge.yaml").write_text("method: soup\nmodels: [runs/a, runs/b]\noutput_dir: merged\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    status, lines = run_cli(["merge", "../project/merge.yaml", "--no-progress"])
    assert (status, lines) == (0, [])
    assert (project / "merged" / "model.safetensors").is_file()
    assert run_cli(["merge", "../project/merge.yaml", "--no-progress", "-o", "here"])[0] == 0
    assert (elsewhere / "here" / "model.safetensors").is_file()
    shutil.rmtree(elsewhere / "here")
    assert sorted(p.name for p in elsewhere.iterdir()) == []
