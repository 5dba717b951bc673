"""docs/your-data.md works as written: every shape's bundled file builds, validates and trains.

The guide shows the files of ``examples/data/your-data/`` by including them (``--8<--``), so what a
reader copies is what runs here: each build recipe through ``hf-unified-embed build`` and ``validate``
as the guide's commands run them, then all shapes in one folder through ``train --check`` (each task
gets the loss the guide names) and ``train`` for one step per task with the guide's training recipe.
The Hub shape's recipe names a Hub id; here the same recipe reads its local Parquet copy.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.utils.locations import looks_local

REPO = Path(__file__).resolve().parent.parent
GUIDE = REPO / "docs" / "your-data.md"
FOLDER = REPO / "examples" / "data" / "your-data"
TRAIN_RECIPE = FOLDER / "train.yaml"
#: Every build recipe of the folder (the training recipe is the one other YAML file).
BUILD_RECIPES = sorted(path.name for path in FOLDER.glob("*.yaml") if path != TRAIN_RECIPE)
#: The Hub shape's local copy: the same columns as the Hub dataset its recipe names.
HUB_RECIPE, HUB_COPY = "hub.yaml", FOLDER / "hub-copy"
INCLUDE = re.compile(r'^-{1,3}8<-{1,3}\s+"([^"]+)"\s*$', re.MULTILINE)
#: The task, task type and loss the guide gives each shape.
SHAPES = {
    "beir.yaml": ("baking", "retrieval", "MultiPositiveInfoNCELoss"),
    "documents.yaml": ("documents", "retrieval", "MultiPositiveInfoNCELoss"),
    "faq-pairs.yaml": ("faq", "retrieval", "MultiPositiveInfoNCELoss"),
    "hub.yaml": ("natural-questions", "retrieval", "MultiPositiveInfoNCELoss"),
    "judged-documents.yaml": ("search-log", "retrieval", "MultiPositiveInfoNCELoss"),
    "multi-positives.yaml": ("trivia", "retrieval", "MultiPositiveInfoNCELoss"),
    "nested-pairs.yaml": ("forum", "retrieval", "MultiPositiveInfoNCELoss"),
    "nli-triplets.yaml": ("nli", "retrieval", "MultiPositiveInfoNCELoss"),
    "paraphrase-labels.yaml": ("paraphrase", "pair_classification", "AnglEJointLoss"),
    "similarity-0-1.yaml": ("similarity-0-1", "sts", "CoDiEmbSTSLoss"),
    "similarity-0-5.yaml": ("similarity-0-5", "sts", "CoDiEmbSTSLoss"),
    "similarity-decimal-comma.yaml": ("similarity-decimal-comma", "sts", "CoDiEmbSTSLoss"),
    "support-triplets.yaml": ("support", "retrieval", "MultiPositiveInfoNCELoss"),
}


def _sources(name: str) -> list[dict]:
    """The sources of a build recipe with absolute ``data_files`` (the Hub shape reading its local copy)."""
    sources = yaml.safe_load((FOLDER / name).read_text(encoding="utf-8"))["sources"]
    for source in sources:
        if name == HUB_RECIPE:
            assert not looks_local(source["data_files"]), "the Hub shape's recipe names a Hub dataset id"
            source["data_files"] = str(HUB_COPY)
        else:
            source["data_files"] = str(FOLDER / source["data_files"])
    return sources


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_every_include_of_the_guide_names_a_file_and_every_shape_is_shown() -> None:
    included = INCLUDE.findall(GUIDE.read_text(encoding="utf-8"))
    assert included, "the guide includes no file"
    missing = [name for name in included if not (REPO / name).is_file()]
    assert not missing, f"docs/your-data.md includes files that do not exist: {missing}"
    shown = {Path(name).name for name in included if Path(name).parent == FOLDER.relative_to(REPO)}
    assert set(BUILD_RECIPES) | {TRAIN_RECIPE.name} <= shown, "a recipe of examples/data/your-data is not in the guide"
    assert "examples/quickstart.py" in included


def test_every_bundled_recipe_has_its_shape() -> None:
    assert sorted(SHAPES) == BUILD_RECIPES, "give the new recipe its (task, task type, loss) in SHAPES"


def test_the_hub_copy_has_the_columns_the_hub_recipe_reads() -> None:
    (source,) = yaml.safe_load((FOLDER / HUB_RECIPE).read_text(encoding="utf-8"))["sources"]
    columns = {name for path in HUB_COPY.glob("*.parquet") for name in pq.read_schema(path).names}
    options = source["options"]
    assert {options["query_column"], options["positive_columns"]} <= columns


@pytest.mark.parametrize("recipe", BUILD_RECIPES)
def test_each_shape_builds_and_validates(recipe: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task, task_type, _ = SHAPES[recipe]
    path = FOLDER / recipe
    if recipe == HUB_RECIPE:  # no download here: the same recipe on the local copy
        path = _write(tmp_path / recipe, {"sources": _sources(recipe)})
    out = tmp_path / "data"
    assert main(["build", str(path), "-o", str(out)]) == 0, capsys.readouterr().err
    assert main(["validate", str(out)]) == 0, capsys.readouterr().err
    from hf_unified_embed.data import load_unified

    built = load_unified(out)
    assert list(built) == [task]
    assert len(built[task]) >= 12 and set(built[task]["task_type"]) == {task_type}


def test_every_shape_trains_with_the_guides_training_recipe(
    tiny_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build = _write(tmp_path / "all.yaml", {"sources": [s for name in BUILD_RECIPES for s in _sources(name)]})
    data = tmp_path / "data"
    assert main(["build", str(build), "-o", str(data)]) == 0, capsys.readouterr().err
    assert main(["validate", str(data)]) == 0, capsys.readouterr().err

    recipe = yaml.safe_load(TRAIN_RECIPE.read_text(encoding="utf-8"))
    recipe.update(base_model=tiny_model_path, data={"path": str(data)}, output_dir=str(tmp_path / "model"))
    train = _write(tmp_path / "train.yaml", recipe)
    capsys.readouterr()
    assert main(["train", str(train), "--check"]) == 0, capsys.readouterr().err
    plan = capsys.readouterr().out
    for recipe_name, (task, task_type, loss) in SHAPES.items():
        row = next((line.split() for line in plan.splitlines() if line.split()[:1] == [task]), None)
        assert row is not None, f"{recipe_name}: task {task} is not in the plan:\n{plan}"
        assert row[1:4] == [task_type, row[2], loss], f"{recipe_name}: {row}"
    # One epoch of steps takes every batch of every task once: each shape trains with its loss.
    steps = int(re.search(r"optimizer steps per epoch: (\d+)", plan).group(1))
    assert steps >= len(SHAPES)
    assert main(["train", str(train), "--max-steps", str(steps)]) == 0, capsys.readouterr().err
    assert (tmp_path / "model" / "model.safetensors").is_file()


#: Column names a user's header could hold: any printable text without the characters that end a field.
COLUMN_NAMES = st.text(
    st.characters(codec="utf-8", exclude_characters='\t\n\r,;|"\ufeff', exclude_categories=("Cs", "Cc")),
    min_size=1,
    max_size=12,
).filter(lambda name: name == name.strip())
#: The delimiter each extension implies (the guide's "File types"); another extension needs the option.
IMPLIED = {".csv": ",", ".tsv": "\t", ".tab": "\t", ".txt": "\t"}


def _scored_pairs() -> list[tuple[str, str, float]]:
    with open(FOLDER / "similarity-0-5.tsv", encoding="utf-8", newline="") as handle:
        rows = csv.DictReader(handle, delimiter="\t")
        return [(row["sentence1"], row["sentence2"], float(row["score"])) for row in rows]


def _write_table(path: Path, columns: list[str], rows: list[tuple[str, str, float]], delimiter: str) -> None:
    records = [dict(zip(columns, row)) for row in rows]
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    elif path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(records), path)
    else:
        with open(path, "w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, columns, delimiter=delimiter)
            writer.writeheader()
            writer.writerows(records)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    columns=st.lists(COLUMN_NAMES, min_size=3, max_size=3, unique=True),
    suffix=st.sampled_from([".tsv", ".csv", ".txt", ".tab", ".dat", ".jsonl", ".parquet"]),
    delimiter=st.sampled_from(["\t", ",", ";", "|"]),
    low=st.integers(-10, 10),
    width=st.integers(1, 100),
)
def test_columns_named_in_options_and_scores_in_their_range_read_as_the_guide_says(
    tmp_path: Path, columns: list[str], suffix: str, delimiter: str, low: int, width: int
) -> None:
    # The guide's rules for `pairs`: a header names the columns and `options` name the ones to read, in
    # any of the file types; delimited text is split at the delimiter its extension implies, or at
    # `options.delimiter`; `score_range: [low, high]` maps a score s onto (s - low) / (high - low).
    from hf_unified_embed.data import build_unified

    pairs = _scored_pairs()
    high = low + width
    path = tmp_path / f"pairs{suffix}"
    _write_table(path, columns, [(a, b, low + score / 5 * width) for a, b, score in pairs], delimiter)
    options: dict[str, object] = {"anchor_column": columns[0], "positive_column": columns[1]}
    options.update(score_column=columns[2], score_range=[low, high])
    if suffix not in (".jsonl", ".parquet") and IMPLIED.get(suffix) != delimiter:
        options["delimiter"] = delimiter
    source = {"name": "pairs", "format": "pairs", "data_files": str(path), "task_type": "sts", "options": options}
    built = build_unified({"sources": [source]})["pairs"]
    assert built["query"] == [a for a, _, _ in pairs]
    assert built["positives"] == [[b] for _, b, _ in pairs]
    assert [scores[0] for scores in built["positive_scores"]] == pytest.approx([s / 5 for *_, s in pairs], abs=1e-5)


def test_raw_documents_train_with_gur_loss_as_the_guide_offers(
    tiny_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    assert main(["build", str(FOLDER / "documents.yaml"), "-o", str(data)]) == 0, capsys.readouterr().err
    recipe = yaml.safe_load(TRAIN_RECIPE.read_text(encoding="utf-8"))
    recipe.update(base_model=tiny_model_path, data={"path": str(data)}, output_dir=str(tmp_path / "model"))
    recipe["losses"]["retrieval"] = {"name": "GURLoss"}
    train = _write(tmp_path / "train.yaml", recipe)
    assert main(["train", str(train), "--max-steps", "1"]) == 0, capsys.readouterr().err
    assert (tmp_path / "model" / "model.safetensors").is_file()


def test_the_new_shapes_build_the_rows_their_sections_describe(tmp_path: Path) -> None:
    # Decimal commas: each "4,8" is 4.8 on [0, 5]; the file has Windows line ends and `;` fields.
    from hf_unified_embed.data import build_unified

    raw = (FOLDER / "similarity-decimal-comma.csv").read_bytes()
    assert b"\r\n" in raw
    with open(FOLDER / "similarity-decimal-comma.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter=";"))
    assert all("," in row["score"] for row in rows)
    built = build_unified({"sources": _sources("similarity-decimal-comma.yaml")})["similarity-decimal-comma"]
    scores = [float(row["score"].replace(",", ".")) / 5 for row in rows]
    assert [row[0] for row in built["positive_scores"]] == pytest.approx(scores)

    # Nested records: `question.body` and `answer.text` of each object.
    records = [json.loads(line) for line in (FOLDER / "nested-pairs.jsonl").read_text(encoding="utf-8").splitlines()]
    built = build_unified({"sources": _sources("nested-pairs.yaml")})["forum"]
    assert built["query"] == [record["question"]["body"] for record in records]
    assert built["positives"] == [[record["answer"]["text"]] for record in records]

    # Judged documents: the documents marked relevant are positives, the others negatives; the query
    # without a relevant document is skipped and counted.
    records = [
        json.loads(line) for line in (FOLDER / "judged-documents.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    kept = [record for record in records if any(doc["relevant"] for doc in record["docs"])]
    assert len(kept) == len(records) - 1
    built = build_unified({"sources": _sources("judged-documents.yaml")})["search-log"]
    assert built["query"] == [record["query"]["text"] for record in kept]
    assert built["positives"] == [[doc["text"] for doc in record["docs"] if doc["relevant"]] for record in kept]
    assert built["negatives"] == [[doc["text"] for doc in record["docs"] if not doc["relevant"]] for record in kept]
