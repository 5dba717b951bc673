"""Property-based: every broken variant of a valid config file is one located error, exit code 2, nothing written.

hypothesis starts from a valid training recipe, build recipe, evaluation suite and merge config (each
is first run as it is, and must succeed) and breaks one thing: a key misspelt, a value of the wrong
type, a number out of its range, a name outside its choices, or bytes that are not UTF-8 text. For
every such file the command that reads it must

* exit with code 2 (never a traceback: in-process, any other exception fails the example),
* print exactly one ``error:`` line, naming the file,
* leave its working folder, its inputs and the datasets cache exactly as they were (a staging folder
  may come and go).

The same holds under ``python -m hf_unified_embed.cli.launch --nproc_per_node=2`` (torchrun), which must
keep the exit code 2. The examples are derandomized (the same ones on every run), so a failure is
reproducible and CI time is bounded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _processes import Expected, failure, launch_command, run
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"
STSB = REPO / "examples" / "data" / "stsb-train.tsv"

#: Examples per file kind: each in-process run is a fraction of a second to a few seconds on 2 cores.
#: Outside CI, ``INPUT_PROPERTY_EXAMPLES=500`` searches deeper and ``INPUT_PROPERTY_RANDOM=1`` elsewhere.
EXAMPLES = int(os.environ.get("INPUT_PROPERTY_EXAMPLES", "40"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    derandomize=os.environ.get("INPUT_PROPERTY_RANDOM") != "1",
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

Path_ = tuple[Any, ...]


@dataclasses.dataclass
class ConfigFile:
    """A valid config file, the command that reads it, and what a broken value of each part looks like.

    Attributes:
        name: the file's name.
        data: its valid content.
        command: ``(config path, work folder) -> argv`` of the command that reads it.
        ranges: numbers out of range, by path.
        choices: the allowed values of the paths that name one of a few things (a format, a kind).
        keys: the valid keys of each mapping, by path; a misspelt key must not land on one of them.
        loose: paths whose value may take several types (left out of the wrong-type mutation).
    """

    name: str
    data: dict[str, Any]
    command: Callable[[Path, Path], list[str]]
    ranges: dict[Path_, list[Any]]
    choices: dict[Path_, set[str]]
    keys: dict[Path_, set[str]]
    loose: set[Path_] = dataclasses.field(default_factory=set)

    def nodes(self) -> list[tuple[Path_, Any]]:
        """Every (path, value) below the root."""
        found: list[tuple[Path_, Any]] = []

        def walk(path: Path_, value: Any) -> None:
            if path:
                found.append((path, value))
            if isinstance(value, dict):
                for key, child in value.items():
                    walk((*path, key), child)
            elif isinstance(value, list):
                for index, child in enumerate(value):
                    walk((*path, index), child)

        walk((), self.data)
        return found


def _edited(data: Any, path: Path_, edit: Callable[[Any, Any], None]) -> Any:
    """A deep copy of ``data`` with ``edit(parent, last key)`` applied where ``path`` points."""
    copy = yaml.safe_load(yaml.safe_dump(data))
    node = copy
    for part in path[:-1]:
        node = node[part]
    edit(node, path[-1])
    return copy


def replaced(data: Any, path: Path_, value: Any) -> Any:
    return _edited(data, path, lambda node, last: node.__setitem__(last, value))


def renamed(data: Any, path: Path_, key: str) -> Any:
    return _edited(data, path, lambda node, last: node.__setitem__(key, node.pop(last)))


def _dump(data: Any) -> bytes:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode("utf-8")


# --- mutations: (what was broken, the file's bytes) ----------------------------------------------


def key_typos(config: ConfigFile) -> st.SearchStrategy[tuple[str, bytes]]:
    keys = [path for path, _ in config.nodes() if isinstance(path[-1], str)]

    @st.composite
    def typo(draw: st.DrawFn) -> tuple[str, bytes]:
        path = draw(st.sampled_from(keys))
        key = path[-1]
        position = draw(st.integers(0, len(key)))
        letter = draw(st.sampled_from("abcdefghijklmnopqrstuvwxyz_"))
        edit = draw(st.sampled_from(["insert", "delete", "replace", "swap"]))
        if edit == "insert":
            new = key[:position] + letter + key[position:]
        elif edit == "delete":
            new = key[: max(position - 1, 0)] + key[position:] if position else key[1:]
        elif edit == "replace":
            new = key[: min(position, len(key) - 1)] + letter + key[min(position, len(key) - 1) + 1 :]
        else:
            i = min(position, len(key) - 2)
            new = key[:i] + key[i + 1] + key[i] + key[i + 2 :] if len(key) > 1 else key + letter
        assume(new and new != key and new not in config.keys.get(path[:-1], set()))
        return f"key {'.'.join(map(str, path))} -> {new!r}", _dump(renamed(config.data, path, new))

    return typo()


def _other_type(value: Any) -> st.SearchStrategy[Any]:
    text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=12)
    numbers = st.one_of(st.integers(-5, 5), st.floats(-3, 3).filter(lambda x: x != int(x)))
    containers = st.one_of(st.lists(st.integers(0, 3), min_size=1, max_size=2), st.just({"k": 1}))
    if isinstance(value, bool):
        return st.one_of(text, st.integers(-5, 5), containers)
    if isinstance(value, int):
        return st.one_of(text, st.booleans(), st.floats(-3, 3).filter(lambda x: x != int(x)), containers)
    if isinstance(value, float):
        return st.one_of(text, st.booleans(), containers)
    if isinstance(value, str):
        return st.one_of(numbers, st.booleans(), containers)
    if isinstance(value, list):
        return st.one_of(numbers, st.booleans(), st.just({"k": 1}))
    return st.one_of(numbers, st.booleans(), st.lists(st.integers(0, 3), min_size=1, max_size=2))


def wrong_types(config: ConfigFile) -> st.SearchStrategy[tuple[str, bytes]]:
    nodes = [(path, value) for path, value in config.nodes() if path not in config.loose]

    @st.composite
    def mutate(draw: st.DrawFn) -> tuple[str, bytes]:
        path, value = draw(st.sampled_from(nodes))
        new = draw(_other_type(value))
        return f"{'.'.join(map(str, path))}: {value!r} -> {new!r}", _dump(replaced(config.data, path, new))

    return mutate()


def out_of_range(config: ConfigFile) -> st.SearchStrategy[tuple[str, bytes]]:
    cases = [(path, value) for path, values in config.ranges.items() for value in values]
    return st.sampled_from(cases).map(
        lambda case: (f"{'.'.join(map(str, case[0]))} = {case[1]!r}", _dump(replaced(config.data, *case)))
    )


def bad_choices(config: ConfigFile) -> st.SearchStrategy[tuple[str, bytes]]:
    @st.composite
    def mutate(draw: st.DrawFn) -> tuple[str, bytes]:
        path = draw(st.sampled_from(sorted(config.choices, key=str)))
        name = draw(st.text("abcdefghijklmnopqrstuvwxyz_-0123456789", min_size=1, max_size=10))
        assume(name not in config.choices[path])
        return f"{'.'.join(map(str, path))} = {name!r}", _dump(replaced(config.data, path, name))

    return mutate()


def binary(config: ConfigFile) -> st.SearchStrategy[tuple[str, bytes]]:
    text = _dump(config.data)
    # Bytes that are never part of UTF-8, whatever surrounds them.
    invalid = st.sampled_from([b"\xff", b"\xfe", b"\xc0", b"\xc1", b"\xf8"])
    # Valid UTF-8 that YAML refuses: control characters.
    control = st.sampled_from(["\x00", "\x07", "\x1b", "\ufffe"]).map(lambda c: c.encode("utf-8"))

    @st.composite
    def mutate(draw: st.DrawFn) -> tuple[str, bytes]:
        at = draw(st.integers(0, len(text)))
        blob = draw(st.binary(max_size=6)) + draw(st.one_of(invalid, control)) + draw(st.binary(max_size=6))
        return f"{blob!r} at byte offset {at}", text[:at] + blob + text[at:]

    return mutate()


def broken(config: ConfigFile) -> st.SearchStrategy[tuple[str, bytes]]:
    kinds = [key_typos(config), wrong_types(config), binary(config)]
    if config.ranges:
        kinds.append(out_of_range(config))
    if config.choices:
        kinds.append(bad_choices(config))
    return st.one_of(kinds)


# --- the valid files ----------------------------------------------------------------------------


def _fields(cls: type) -> set[str]:
    return {field.name for field in dataclasses.fields(cls)}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> Iterator[dict[str, Path]]:
    """The read-only inputs every file points at, and a datasets cache that must not change."""
    import datasets

    from hf_unified_embed.data import build_unified, load_unified, save_unified

    root = tmp_path_factory.mktemp("inputs")
    cache = root / "datasets-cache"
    cache.mkdir()
    patch = pytest.MonkeyPatch()
    patch.setenv("HF_DATASETS_CACHE", str(cache))
    patch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    unified = save_unified(build_unified(SAMPLE_RECIPE, split="train"), root / "unified")
    load_unified(unified)  # datasets' cache of the input: later loads reuse it and must add nothing
    shutil.copy(STSB, root / "stsb.tsv")
    (root / "pairs.jsonl").write_text('{"anchor": "a question", "positive": "an answer"}\n' * 3)
    second = Path(shutil.copytree(tiny_model_path, root / "second-model"))
    yield {"root": root, "unified": unified, "model": Path(tiny_model_path), "second": second, "cache": cache}
    patch.undo()


def train_recipe(inputs: dict[str, Path]) -> ConfigFile:
    from sentence_transformers import SentenceTransformerTrainingArguments

    from hf_unified_embed.losses import CoDiEmbSTSLoss, MultiPositiveInfoNCELoss
    from hf_unified_embed.recipe.train_recipe import DataConfig, SamplerConfig, TrainRecipe
    from hf_unified_embed.schema import TASK_TYPES
    from hf_unified_embed.training.backbones import ModelConfig
    from hf_unified_embed.utils.typecheck import constructor_parameters

    tasks = ["stsb", "sick", "wikiqa", "trecqa", "msrp", "msmarco"]
    data = {
        "base_model": str(inputs["model"]),
        "data": {"path": str(inputs["unified"]), "tasks": ["stsb", "wikiqa"], "max_rows_per_task": 8},
        "losses": {
            "retrieval": {"name": "MultiPositiveInfoNCELoss", "temperature": 0.05},
            "sts": {"name": "CoDiEmbSTSLoss", "pearson_weight": 2.0},
        },
        "negatives_per_query": 2,
        "max_seq_length": 32,
        "instructions": True,
        "model": {"pooling": "mean", "normalize": False},
        "sampler": {"interleave": "shuffled", "instance_order": "random", "batch_sizes": {"wikiqa": 4}},
        "training_args": {"max_steps": 1, "per_device_train_batch_size": 4, "learning_rate": 2.0e-5},
        "seed": 7,
        "output_dir": "out",
    }
    return ConfigFile(
        name="recipe.yaml",
        data=data,
        command=lambda path, work: ["train", str(path)],
        ranges={
            ("negatives_per_query",): [0, -1],
            ("max_seq_length",): [0],
            ("seed",): [-1, 2**32],
            ("data", "max_rows_per_task"): [0, -3],
            ("sampler", "batch_sizes", "wikiqa"): [0, -4],
            ("training_args", "per_device_train_batch_size"): [0, -2],
            ("training_args", "learning_rate"): [-1.0e-3],
            ("training_args", "max_steps"): [-2, -50],
            ("losses", "retrieval", "temperature"): [0.0, -0.5],
        },
        choices={
            ("losses", "retrieval", "name"): set(),
            ("losses", "sts", "name"): set(),
            ("model", "pooling"): {"mean", "lasttoken", "cls", "max", "weightedmean"},
            ("sampler", "interleave"): {"round_robin", "shuffled", "proportional"},
            ("sampler", "instance_order"): {"random", "easy_to_hard", "hard_to_easy"},
            # Every task of the folder is a valid choice (hypothesis also draws string literals it finds in
            # the loaded modules, such as 'stsb', so an unlisted valid name would be drawn as "broken").
            ("data", "tasks", 0): {path.name for path in (inputs["unified"] / "data").iterdir()},
        },
        keys={
            (): _fields(TrainRecipe),
            ("data",): _fields(DataConfig),
            ("model",): _fields(ModelConfig),
            ("sampler",): _fields(SamplerConfig),
            ("sampler", "batch_sizes"): set(tasks),
            ("losses",): set(tasks) | set(TASK_TYPES),
            ("losses", "retrieval"): {"name", *constructor_parameters(MultiPositiveInfoNCELoss)},
            ("losses", "sts"): {"name", *constructor_parameters(CoDiEmbSTSLoss)},
            ("training_args",): _fields(SentenceTransformerTrainingArguments),
        },
    )


def build_recipe(inputs: dict[str, Path]) -> ConfigFile:
    from hf_unified_embed.data.build_recipe import SourceSpec
    from hf_unified_embed.data.source_formats import get_source_format, source_format_names

    data = {
        "sources": [
            {
                "name": "stsb",
                "format": "stsb",
                "data_files": str(inputs["root"] / "stsb.tsv"),
                "task_type": "sts",
                "query_instruction": "Represent the sentence: ",
                "max_rows": 5,
                "license": "CC-BY-SA-4.0",
            },
            {
                "name": "qa",
                "format": "pairs",
                "data_files": [str(inputs["root"] / "pairs.jsonl")],
                "task_type": "retrieval",
                "split": "train",
                "options": {"anchor_column": "anchor"},
            },
        ]
    }
    return ConfigFile(
        name="build.yaml",
        data=data,
        command=lambda path, work: ["build", str(path), "-o", str(work / "out")],
        ranges={("sources", 0, "max_rows"): [0, -1]},
        choices={
            ("sources", 0, "format"): set(source_format_names()),
            ("sources", 1, "task_type"): {
                "sts",
                "retrieval",
                "reranking",
                "pair_classification",
                "classification",
                "clustering",
            },
        },
        keys={
            (): {"sources"},
            ("sources", 0): _fields(SourceSpec),
            ("sources", 1): _fields(SourceSpec),
            ("sources", 1, "options"): set(get_source_format("pairs").option_names),
        },
    )


def suite(inputs: dict[str, Path]) -> ConfigFile:
    from hf_unified_embed.evaluation.kinds import EVALUATION_KINDS
    from hf_unified_embed.evaluation.suite import SuiteEntry

    data = {
        "name": "properties",
        "batch_size": 8,
        "max_rows": 12,
        "evaluations": [
            {"name": "stsb-dev", "kind": "sts", "source": "stsb", "data_files": str(inputs["root"] / "stsb.tsv")},
            {
                "name": "wikiqa",
                "kind": "reranking",
                "unified": str(inputs["unified"]),
                "split": "train",
                "max_rows": 5,
                "evaluator": {"at_k": 5},
            },
        ],
    }
    return ConfigFile(
        name="suite.yaml",
        data=data,
        command=lambda path, work: ["evaluate", str(inputs["model"]), str(path), "-o", str(work / "results.json")],
        ranges={("batch_size",): [0, -8], ("max_rows",): [0, -1], ("evaluations", 1, "max_rows"): [0]},
        choices={("evaluations", 0, "kind"): set(EVALUATION_KINDS), ("evaluations", 1, "kind"): set(EVALUATION_KINDS)},
        keys={
            (): {"name", "data_root", "batch_size", "diagnostics", "max_rows", "evaluations"},
            ("evaluations", 0): _fields(SuiteEntry),
            ("evaluations", 1): _fields(SuiteEntry),
        },
    )


def merge_config(inputs: dict[str, Path]) -> ConfigFile:
    from hf_unified_embed.merge.merge_config import CardConfig, MergeConfig
    from hf_unified_embed.merge.methods import available_merge_methods

    data = {
        "method": "soup",
        "models": [str(inputs["model"]), {"path": str(inputs["second"]), "id": "me/tiny"}],
        "output_dir": "merged",
        "parameters": {"weights": [0.5, 0.5], "normalize": True},
        "precise": False,
        "card": {"model_name": "me/merged", "license": "apache-2.0"},
    }
    return ConfigFile(
        name="merge.yaml",
        data=data,
        command=lambda path, work: ["merge", str(path)],
        ranges={("parameters", "weights"): [[0.5], [0.5, 0.5, 0.5], []]},
        choices={("method",): set(available_merge_methods())},
        keys={(): _fields(MergeConfig), ("card",): _fields(CardConfig), ("models", 1): {"path", "id"}},
    )


FILES = {"train": train_recipe, "build": build_recipe, "suite": suite, "merge": merge_config}


# --- the property ---------------------------------------------------------------------------------


def snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every file below ``roots`` with its size and modification time, and every folder (a folder's own
    time changes when a staging folder comes and goes in it, which is allowed)."""
    return {
        str(path): (path.stat().st_size, path.stat().st_mtime_ns) if path.is_file() else (-1, 0)
        for root in roots
        for path in [root, *root.rglob("*")]
    }


def run_in_process(argv: list[str], work: Path) -> tuple[int, str]:
    """``main(argv)`` in ``work`` (where relative output folders land), with its standard error."""
    err = io.StringIO()
    with contextlib.chdir(work), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def check_one_located_error(code: int, err: str, path: Path, what: str) -> None:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2, f"{what}: exit code {code}\n{err[-3000:]}"
    assert len(lines) == 1, f"{what}: {len(lines)} error lines\n{err[-3000:]}"
    assert str(path) in lines[0], f"{what}: the error does not name {path}: {lines[0]}"
    assert "Traceback" not in err, f"{what}\n{err[-3000:]}"


@pytest.mark.parametrize("kind", list(FILES))
def test_the_valid_files_work(kind: str, inputs: dict[str, Path]) -> None:
    """Every mutation starts from a file that works, so the mutation is what the command refuses."""
    config = FILES[kind](inputs)
    with tempfile.TemporaryDirectory(dir=inputs["root"]) as folder:
        work = Path(folder)
        path = work / config.name
        path.write_bytes(_dump(config.data))
        argv = config.command(path, work)
        code, err = run_in_process([*argv, "--check"] if kind == "train" else argv, work)
        assert code == 0, err[-3000:]


@pytest.mark.parametrize("kind", list(FILES))
def test_every_broken_file_is_one_located_error(kind: str, inputs: dict[str, Path]) -> None:
    config = FILES[kind](inputs)

    @PROPERTY
    @given(broken(config))
    def check(mutation: tuple[str, bytes]) -> None:
        what = mutation[0]
        with written(config, mutation, inputs) as (work, path):
            code, err = run_in_process(config.command(path, work), work)
            check_one_located_error(code, err, path, what)

    check()


def read_only(inputs: dict[str, Path]) -> list[Path]:
    return [inputs[name] for name in ("unified", "model", "second", "cache")]


@contextlib.contextmanager
def written(config: ConfigFile, mutation: tuple[str, bytes], inputs: dict[str, Path]) -> Iterator[tuple[Path, Path]]:
    """The mutated content as the config file in a fresh working folder; on leaving, that folder, the inputs and
    the datasets cache must be exactly as they were before the command ran."""
    what, content = mutation
    with tempfile.TemporaryDirectory(dir=inputs["root"]) as folder:
        work = Path(folder)
        path = work / config.name
        path.write_bytes(content)
        before = snapshot(work, *read_only(inputs))
        yield work, path
        assert snapshot(work, *read_only(inputs)) == before, what


@pytest.mark.multiprocess
def test_broken_recipes_under_torchrun_exit_2(inputs: dict[str, Path]) -> None:
    """Two of the broken recipes, launched with two processes: the launcher keeps the exit code 2."""
    config = train_recipe(inputs)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_CACHE": str(inputs["cache"])}

    @settings(PROPERTY, max_examples=2)
    @given(st.one_of(wrong_types(config), key_typos(config)))
    def check(mutation: tuple[str, bytes]) -> None:
        what = mutation[0]
        with written(config, mutation, inputs) as (work, path):
            completed = run(
                launch_command(*config.command(path, work)), expected=Expected(startup_s=15, processes=2), env=env
            )
            assert completed.returncode == 2, f"{what}\n{failure(completed)}"
            check_one_located_error(completed.returncode, completed.stderr, path, what)

    check()
