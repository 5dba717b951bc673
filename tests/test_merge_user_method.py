"""A merge method in the user's own module, named ``package.module:Class``: Python API, CLI and card."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml
from _merge_helpers import noisy_copy, read_weights
from huggingface_hub import ModelCard

from hf_unified_embed.merge import MergeConfig, MergeError, merge_models
from tests import _processes as processes

REPO_ROOT = Path(__file__).resolve().parent.parent

USER_MODULE = '''
"""A user's merge method: the first model's layers up to a depth, the second model's after it."""

import dataclasses
from pathlib import Path

from hf_unified_embed.merge import LinearMergeMethod


@dataclasses.dataclass
class Handover(LinearMergeMethod):
    name = "handover"
    description = "the donor's lower layers under the receiver's upper layers"
    citation = "@misc{handover2026, title={Handover merges}, year={2026}}"
    depth: int = 1

    def input_roles(self) -> dict[Path, list[str]]:
        return {self.models[0]: ["donor"], self.models[1]: ["receiver"]}

    def coefficients(self, group: str) -> dict[Path, float]:
        index = int(group.rsplit(".", 1)[1]) if group.rsplit(".", 1)[-1].isdigit() else -1
        donor = 1.0 if index < self.depth else 0.0
        return {self.models[0]: donor, self.models[1]: 1.0 - donor}

    def group_weights(self, groups):
        return {group: {"donor": self.coefficients(group)[self.models[0]]} for group in groups}

    def card_section(self, directory: Path) -> str:
        (directory / "handover.txt").write_text("depth " + str(self.depth))
        return "### Handover\\n\\nThe donor gives its lower " + str(self.depth) + " layer(s)."
'''


@pytest.fixture
def user_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    package = tmp_path / "user_code" / "my_merges"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "methods.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(package.parent))
    yield package.parent
    for name in [name for name in sys.modules if name.split(".")[0] == "my_merges"]:
        del sys.modules[name]  # the next test's package lives in another folder


@pytest.fixture(scope="module")
def pair(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("user-method")
    return noisy_copy(tiny_model_path, root / "donor", 0), noisy_copy(tiny_model_path, root / "receiver", 1)


def _check_output(out: Path, pair: tuple[Path, Path]) -> None:
    merged, donor, receiver = read_weights(out), read_weights(pair[0]), read_weights(pair[1])
    assert torch.equal(merged["encoder.layer.0.output.dense.weight"], donor["encoder.layer.0.output.dense.weight"])
    assert torch.equal(merged["encoder.layer.1.output.dense.weight"], receiver["encoder.layer.1.output.dense.weight"])
    card = ModelCard.load(out / "README.md")
    assert "handover" in card.data.tags
    assert "the donor's lower layers under the receiver's upper layers" in card.text
    donor_path, receiver_path = (os.path.relpath(path, out) for path in pair)  # paths relative to the output
    assert f"`{donor_path}` (donor)" in card.text and f"`{receiver_path}` (receiver)" in card.text
    assert str(pair[0]) not in card.text
    assert "### Handover" in card.text and (out / "handover.txt").read_text() == "depth 1"
    assert "@misc{handover2026" in card.text
    assert yaml.safe_load((out / "merge_config.yaml").read_text())["method"] == "my_merges.methods:Handover"


def test_user_method_through_the_python_api(user_package: Path, pair: tuple[Path, Path], tmp_path: Path) -> None:
    out = merge_models(list(pair), "my_merges.methods:Handover", tmp_path / "out", depth=1, show_progress=False)
    _check_output(out, pair)


def test_user_method_through_the_cli(user_package: Path, pair: tuple[Path, Path], tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(user_package)])}
    command = [sys.executable, "-m", "hf_unified_embed.cli.main", "merge", "--method", "my_merges.methods:Handover"]
    command += ["--models", str(pair[0]), str(pair[1]), "--param", "depth=1", "-o", str(tmp_path / "out")]
    result = processes.run([*command, "--no-progress"], expected=processes.Expected(), env=env)
    assert result.returncode == 0, processes.failure(result)
    _check_output(tmp_path / "out", pair)

    bad = [*command[:5], "my_merges.methods:Nope", *command[6:-1], str(tmp_path / "other")]
    result = processes.run(bad, expected=processes.Expected(), env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr, processes.failure(result)
    assert "module 'my_merges.methods' has no attribute 'Nope'" in result.stderr


def test_user_method_errors(user_package: Path, tmp_path: Path) -> None:
    with pytest.raises(MergeError, match=r"cannot import module 'no_such_package.x'"):
        MergeConfig(models=["a", "b"], method="no_such_package.x:Y", output_dir=tmp_path)
    (user_package / "my_merges" / "not_methods.py").write_text("class Plain:\n    name = 'plain'\n")
    with pytest.raises(MergeError, match=r"not a concrete subclass of hf_unified_embed.merge.MergeMethod"):
        MergeConfig(models=["a", "b"], method="my_merges.not_methods:Plain", output_dir=tmp_path)
    with pytest.raises(MergeError, match=r"unknown merge method 'handover'.*package.module:ClassName"):
        MergeConfig(models=["a", "b"], method="handover", output_dir=tmp_path)
