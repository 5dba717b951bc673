"""What `push` uploads: the card names the repository everywhere the local card names the folder, the folder is
left as it was, and `push --dry-run` prints exactly that card and what its users need to load the model."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import ModelCard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.hub.card_ids import HUB_COMMENT, LOCAL_COMMENT, PLACEHOLDER, loaded_ids, with_repo_id
from hf_unified_embed.hub.consumers import consumer_needs
from hf_unified_embed.recipe.model_card import UnifiedModelCardData

REPO_ID = "me/pushed-model"


@pytest.fixture
def uploads(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, bytes]]:
    """Every ``upload_folder`` call, as the files it would send (name → bytes); no network."""
    sent: list[dict[str, bytes]] = []

    def upload_folder(**kwargs: object) -> object:
        folder = Path(str(kwargs["folder_path"]))
        sent.append({str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()})
        return type("CommitInfo", (), {"commit_url": "https://huggingface.co/fake/commit/1", "pr_url": None})()

    monkeypatch.setattr(huggingface_hub, "create_repo", lambda *args, **kwargs: None)
    monkeypatch.setattr(huggingface_hub, "upload_folder", upload_folder)
    return sent


@pytest.fixture(scope="module")
def saved_model(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model saved with this package's card (as a training run saves it), in a folder of its own."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(
        tiny_model_path, model_card_data=UnifiedModelCardData(model_name="tiny unified", local_files_only=True)
    )
    model._model_card_text = None  # a card of its own, as after training
    model.model_card_data.add_tags("generated_from_trainer")
    folder = tmp_path_factory.mktemp("saved") / "my-embedder"
    model.save(str(folder))
    return folder


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _python_blocks(card: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", card, flags=re.MULTILINE | re.DOTALL)


def test_a_saved_card_loads_its_own_folder(saved_model: Path) -> None:
    card = ModelCard.load(saved_model / "README.md")
    assert PLACEHOLDER not in card.text
    assert loaded_ids(card.text) == ["./my-embedder"]
    assert LOCAL_COMMENT in card.text
    assert "```bash\npip install -U sentence-transformers\n```" in card.text


def test_push_uploads_the_card_naming_the_repo_and_leaves_the_folder(
    saved_model: Path, uploads: list[dict[str, bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = shutil.copytree(saved_model, tmp_path / "my-embedder")
    before = _digest(folder)
    assert main(["push", str(folder), REPO_ID, "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert main(["push", str(folder), REPO_ID]) == 0
    assert _digest(folder) == before, "push never edits the user's folder"
    assert not any(path.name.startswith(".my-embedder.upload-") for path in tmp_path.iterdir()), "no copy left"
    (sent,) = uploads
    uploaded = sent["README.md"].decode()
    card = ModelCard(uploaded)
    assert loaded_ids(card.text) == [REPO_ID]
    assert "./my-embedder" not in uploaded and PLACEHOLDER not in uploaded and LOCAL_COMMENT not in uploaded
    assert HUB_COMMENT in uploaded
    # Everything else is what the folder holds, byte for byte.
    assert {name: hashlib.sha256(data).hexdigest() for name, data in sent.items() if name != "README.md"} == {
        name: digest for name, digest in before.items() if name != "README.md"
    }
    # The dry run printed exactly that card, then what a user of the model needs.
    shown = printed.split("--- README.md ---\n", 1)[1].split("\n--- consumer needs ---", 1)[0]
    assert shown == uploaded.rstrip()
    assert "pip install -U sentence-transformers" in printed and "trust_remote_code=True: not needed" in printed


def test_a_recipe_push_rewrites_the_card_too(
    saved_model: Path, uploads: list[dict[str, bytes]], tmp_path: Path
) -> None:
    from hf_unified_embed.recipe.run import _push

    folder = shutil.copytree(saved_model, tmp_path / "run-output")
    _push(folder, REPO_ID, private=True, revision=None, create_pr=False, token=None)
    uploaded = uploads[0]["README.md"].decode()
    assert loaded_ids(uploaded) == [REPO_ID] and "./my-embedder" not in uploaded


_NAME = st.from_regex(r"[a-z][a-z0-9_-]{0,12}", fullmatch=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    folder=_NAME,
    old=st.sampled_from(["./{folder}", "./old-name", PLACEHOLDER, "{folder}", "org/given-before"]),
    org=_NAME,
    repo=_NAME,
)
def test_every_local_name_of_the_model_becomes_the_repo_id(
    tmp_path: Path, folder: str, old: str, org: str, repo: str
) -> None:
    """Drawn folder names and the ways a card may name its model; prompt names and other strings are kept."""
    repo_id = f"{org}/{repo}"
    name = old.format(folder=folder)
    card = (
        f"---\nmodel-index:\n- name: {name}\n  results: []\n---\n\n# {name}\n\n"
        f'```python\n{LOCAL_COMMENT}\nmodel = SentenceTransformer("{name}")\n'
        f"emb = model.encode(['{folder}'], prompt_name=\"{folder}\")\n```\n\n"
        "```yaml\noutput_dir: keep-me\n```\n"
    )
    rewritten = with_repo_id(card, repo_id, tmp_path / folder)
    assert loaded_ids(rewritten) == [repo_id]
    assert f"# {repo_id}\n" in rewritten and f"- name: {repo_id}\n" in rewritten
    assert f'prompt_name="{folder}"' in rewritten and f"['{folder}']" in rewritten, "only the model is renamed"
    assert "output_dir: keep-me" in rewritten and HUB_COMMENT in rewritten
    assert with_repo_id(rewritten, repo_id, tmp_path / folder) == rewritten, "a second push changes nothing"


# --- what a consumer needs -------------------------------------------------------------------------------------


def _folder(root: Path, files: dict[str, object]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return root


ST_MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.Transformer"}]


def test_a_plain_model_needs_sentence_transformers_only(tmp_path: Path) -> None:
    needs = consumer_needs(_folder(tmp_path, {"modules.json": ST_MODULES, "config.json": {"model_type": "bert"}}))
    assert needs.packages == ["sentence-transformers"] and not needs.trust_remote_code and not needs.warnings


def test_an_adapter_needs_peft_and_a_bidirectional_one_is_warned(tmp_path: Path) -> None:
    files = {"modules.json": ST_MODULES, "adapter_config.json": {"base_model_name_or_path": "org/base"}}
    assert consumer_needs(_folder(tmp_path / "a", files)).packages == ["sentence-transformers", "peft"]
    files["sentence_bert_config.json"] = {"attention": "bidirectional", "first_bidirectional_layer": 0}
    (warning,) = consumer_needs(_folder(tmp_path / "b", files)).warnings
    assert "adapter" in warning and "causal" in warning and "merge" in warning


def test_remote_code_is_required_and_its_gaps_are_named(tmp_path: Path) -> None:
    code = "import torch\nimport einops\nfrom transformers import Qwen2Model\nfrom hf_unified_embed import x\n"
    folder = _folder(
        tmp_path,
        {
            "modules.json": ST_MODULES,
            "config.json": {
                "model_type": "bidir-qwen2",
                "auto_map": {"AutoConfig": "configuration_bidir.Config", "AutoModel": "modeling_bidir.Model"},
            },
            "modeling_bidir.py": code,
        },
    )
    needs = consumer_needs(folder)
    assert needs.trust_remote_code and needs.packages == ["sentence-transformers", "einops"]
    assert any("configuration_bidir.py" in warning for warning in needs.warnings), "a file auto_map names is missing"
    assert any("modeling_bidir.py imports hf_unified_embed" in warning for warning in needs.warnings)
    assert not any("unknown to transformers" in warning for warning in needs.warnings), "auto_map provides it"


def test_what_would_not_load_is_warned(tmp_path: Path) -> None:
    modules = [{"idx": 0, "name": "0", "path": "", "type": "hf_unified_embed.training.x.Module"}]
    folder = _folder(tmp_path, {"modules.json": modules, "config.json": {"model_type": "no-such-type"}})
    needs = consumer_needs(folder)
    assert needs.trust_remote_code
    assert any("unknown to transformers" in warning for warning in needs.warnings)
    assert any("No module named 'hf_unified_embed'" in warning for warning in needs.warnings)
    start_layer = _folder(
        tmp_path / "k",
        {
            "modules.json": ST_MODULES,
            "config.json": {
                "model_type": "qwen2",
                "hf_unified_embed_attention": {"attention": "bidirectional", "first_bidirectional_layer": 2},
            },
        },
    )
    (warning,) = consumer_needs(start_layer).warnings
    assert "from layer 2" in warning and "causal" in warning


def test_push_refuses_an_adapter_of_a_bidirectional_decoder(
    tmp_path: Path, uploads: list[dict[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(
        tmp_path / "adapter",
        {
            "modules.json": ST_MODULES,
            "adapter_config.json": {"base_model_name_or_path": "org/base", "r": 4},
            "sentence_bert_config.json": {"attention": "bidirectional", "first_bidirectional_layer": 2},
            "README.md": "---\nbase_model: org/base\n---\n# adapter\n",
        },
    )
    for extra in (["--dry-run"], []):
        assert main(["push", str(folder), REPO_ID, *extra]) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and "merge_adapter" in error
    assert not uploads
