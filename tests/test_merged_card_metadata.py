"""A merged card keeps what its inputs' cards said: the licence (one when they agree, `other` naming each
otherwise, with the data licences an input's own card gave), every input by its Hub id with
`base_model_relation: merge`, and the inputs' datasets. Cards are parsed back with huggingface_hub."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from _merge_helpers import noisy_copy
from huggingface_hub import ModelCard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.hub.card_ids import loaded_ids
from hf_unified_embed.merge import merge_models
from hf_unified_embed.merge.card import merged_license

BASE_ID = "sentence-transformers/all-MiniLM-L6-v2"
#: The data table a trained card has (cards/model_card.md.j2), for an input whose licence is `other`.
DATA_TABLE = (
    "| Task | Type | Rows | Positives / row | Negatives / row | Query instruction | Document instruction | Source | License |\n"
    "|:-----|:-----|-----:|----------------:|----------------:|:------------------|:---------------------|:-------|:--------|\n"
    "| sick | sts | 100 | 1 | 0 | — | — | SICK (Marelli et al.) | CC-BY-NC-SA-3.0 |\n"
    "| stsb | sts | 100 | 1 | 0 | — | — | STS Benchmark | CC-BY-SA-4.0 |\n"
)


@pytest.fixture(scope="module")
def runs(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("inputs")
    return [noisy_copy(tiny_model_path, root / f"run-{seed}", seed) for seed in range(3)]


def _card(license_: str | None, datasets: list[str] = (), body: str = "") -> str:  # type: ignore[assignment]
    metadata = {
        **({"license": license_} if license_ else {}),
        **({"datasets": list(datasets)} if datasets else {}),
        "base_model": BASE_ID,
    }
    return f"---\n{yaml.safe_dump(metadata, sort_keys=False)}---\n\n# a run\n\n{body}"


def _inputs(runs: list[Path], root: Path, licenses: list[str | None]) -> list[Path]:
    inputs = []
    for index, license_ in enumerate(licenses):
        folder = shutil.copytree(runs[index], root / f"in-{index}")
        body = DATA_TABLE if license_ == "other" else ""
        (folder / "README.md").write_text(_card(license_, [f"org/data-{index}"], body))
        inputs.append(folder)
    return inputs


LICENSES = st.sampled_from([None, "mit", "apache-2.0", "other", "cc-by-nc-sa-4.0"])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(licenses=st.lists(LICENSES, min_size=2, max_size=3), method=st.sampled_from(["soup", "slerp"]))
def test_the_licence_is_carried_over_by_the_rule(
    runs: list[Path], tmp_path_factory: pytest.TempPathFactory, licenses: list[str | None], method: str
) -> None:
    if method == "slerp":
        licenses = licenses[:2]
    root = tmp_path_factory.mktemp("merge")
    inputs = _inputs(runs, root, licenses)
    out = merge_models(inputs, method, root / "merged", show_progress=False)
    card = ModelCard.load(out / "README.md")
    known = {license_ for license_ in licenses if license_}
    if not known:
        assert card.data.license is None
    elif len(known) == 1 and all(licenses):
        assert card.data.license == known.pop()
        if card.data.license != "other":
            assert f"Every merged input is licensed `{card.data.license}`" in card.text
    else:
        assert card.data.license == "other"
    if card.data.license == "other":  # each input named with its own licence
        rows = [line for line in card.text.splitlines() if line.startswith("| `in-")]
        for folder, license_ in zip(inputs, licenses, strict=True):
            (row,) = [row for row in rows if row.startswith(f"| `{folder.name}`")]
            assert row.endswith(f"| {license_ or 'not stated'} |")
    if "other" in licenses:  # the reason an input gave for its own `other` travels with it
        assert "| sick | SICK (Marelli et al.) | CC-BY-NC-SA-3.0 |" in card.text
    assert card.data.datasets == [f"org/data-{index}" for index in range(len(licenses))]
    assert card.data.license == merged_license(licenses)


def test_an_explicit_licence_wins_and_the_inputs_are_still_named(runs: list[Path], tmp_path: Path) -> None:
    inputs = _inputs(runs, tmp_path, ["mit", "other"])
    config = {"method": "soup", "models": [str(path) for path in inputs], "output_dir": str(tmp_path / "m")}
    config["card"] = {"license": "cc-by-nc-4.0"}
    (tmp_path / "merge.yaml").write_text(yaml.safe_dump(config))
    assert main(["merge", str(tmp_path / "merge.yaml"), "--no-progress"]) == 0
    card = ModelCard.load(tmp_path / "m" / "README.md")
    assert card.data.license == "cc-by-nc-4.0"
    rows = [line for line in card.text.splitlines() if line.startswith("| `in-")]
    assert rows[0].endswith("| mit |") and rows[1].endswith("| other |")


def test_base_model_lists_every_input_by_its_own_id(runs: list[Path], tmp_path: Path) -> None:
    """Given ids (--model-ids), a recipe's hub.repo_id and a card's model id each name their input; an input with
    none of them is named by the base it was trained from."""
    given_id, by_recipe, by_base = (shutil.copytree(run, tmp_path / run.name) for run in runs)
    (by_recipe / "hf_unified_embed_recipe.yaml").write_text(
        yaml.safe_dump({"base_model_id": BASE_ID, "hub": {"repo_id": "org/from-recipe", "private": False}})
    )
    (by_base / "hf_unified_embed_recipe.yaml").write_text(yaml.safe_dump({"base_model_id": BASE_ID}))
    carded = shutil.copytree(runs[0], tmp_path / "carded")
    (carded / "README.md").write_text(_card("mit") + '```python\nmodel = SentenceTransformer("org/from-card")\n```\n')
    out = tmp_path / "soup-out"
    models = [str(given_id), str(by_recipe), str(by_base), str(carded)]
    argv = ["merge", "--method", "soup", "--models", *models, "-o", str(out), "--no-progress"]
    assert main([*argv, "--model-ids", "org/given", "-", "-", "-"]) == 0
    card = ModelCard.load(out / "README.md")
    assert card.data.base_model == ["org/given", "org/from-recipe", BASE_ID, "org/from-card"]
    assert card.data.base_model_relation == "merge"
    # The merged model itself is its folder until pushed: never a Hub-looking name, never a local path.
    assert loaded_ids(card.text) == ["./soup-out"]
    assert str(tmp_path) not in (out / "README.md").read_text()


@settings(max_examples=50, deadline=None)
@given(st.lists(LICENSES, min_size=1, max_size=6))
def test_merged_license_rule(licenses: list[str | None]) -> None:
    result = merged_license(licenses)
    named = [license_ for license_ in licenses if license_]
    if not named:
        assert result is None
    elif len(set(named)) == 1 and len(named) == len(licenses):
        assert result == named[0]
    else:
        assert result == "other"
