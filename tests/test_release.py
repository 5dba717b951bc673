"""The release: one version everywhere, a changelog entry for it, the bundled sample that ``hf-unified-embed
sample`` writes (the wheel's copy made from the same paths), and the declared ranges an existing environment
keeps."""

from __future__ import annotations

import subprocess
import sys
import warnings
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.version import Version

import hf_unified_embed
from hf_unified_embed.cli.main import main
from hf_unified_embed.cli.sample import write_sample
from hf_unified_embed.data.bundled_sample import SAMPLE_LAYOUT
from hf_unified_embed.utils import deprecation, version

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
CHANGELOG = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")


# --- the version ---------------------------------------------------------------------------------------------------


def test_one_version_in_the_metadata_the_package_and_the_command() -> None:
    declared = PYPROJECT["project"]["version"]
    assert hf_unified_embed.__version__ == metadata.version("hf-unified-embed") == declared
    completed = subprocess.run(
        [sys.executable, "-m", "hf_unified_embed", "--version"], capture_output=True, text=True, check=True
    )
    assert completed.stdout.strip() == f"hf-unified-embed {declared}"


def test_the_version_is_read_only_when_asked_for() -> None:
    """Importing the package or the command line does not import importlib.metadata (tens of milliseconds of
    every command's start); ``__version__`` and ``--version`` read it when used."""
    code = (
        "import sys, hf_unified_embed, hf_unified_embed.cli.main\n"
        "before = 'importlib.metadata' in sys.modules\n"
        "print(before, hf_unified_embed.__version__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", PYPROJECT["project"]["version"]]


def test_a_source_tree_without_metadata_reads_its_pyproject(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert version.package_version() == PYPROJECT["project"]["version"]


VERSIONS = st.from_regex(r"[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{1,3})?((a|b|rc)[0-9])?", fullmatch=True)
TABLE = st.sampled_from(["build-system", "tool.hatch", "tool.other", "project.urls"])


@settings(max_examples=60, deadline=None)
@given(
    project_version=VERSIONS,
    other_version=VERSIONS,
    other_table=TABLE,
    other_first=st.booleans(),
    keys_before=st.lists(
        st.sampled_from(
            ['name = "x"', 'requires-python = ">=3.10"', "dependencies = []", 'authors = [{ name = "a" }]']
        ),
        unique=True,
    ),
)
def test_the_project_tables_version_is_read_whatever_else_the_file_holds(
    tmp_path_factory: pytest.TempPathFactory,
    project_version: str,
    other_version: str,
    other_table: str,
    other_first: bool,
    keys_before: list[str],
) -> None:
    """Another table's ``version`` key (before or after ``[project]``) is never taken for the release."""
    project = "\n".join(["[project]", *keys_before, f'version = "{project_version}"', 'description = "d"'])
    other = f'[{other_table}]\nversion = "{other_version}"'
    text = "\n\n".join([other, project] if other_first else [project, other]) + "\n"
    assert tomllib.loads(text)["project"]["version"] == project_version  # the drawn file is valid TOML
    root = tmp_path_factory.mktemp("tree")
    (root / "pyproject.toml").write_text(text, encoding="utf-8")
    assert version.version_from_pyproject(root / "pyproject.toml") == project_version


def test_no_metadata_and_no_pyproject_is_an_unknown_version(tmp_path: Path) -> None:
    assert version.version_from_pyproject(tmp_path / "pyproject.toml") == version.UNKNOWN_VERSION


# --- the changelog -------------------------------------------------------------------------------------------------


def test_the_changelog_has_this_release_in_keep_a_changelog_form() -> None:
    release = PYPROJECT["project"]["version"]
    assert "[Keep a Changelog]" in CHANGELOG and "[Semantic Versioning]" in CHANGELOG
    assert f"\n## [{release}] - " in CHANGELOG, f"no section for {release}"
    assert f"\n[{release}]: " in CHANGELOG, "the release heading's link target"
    section = CHANGELOG.split(f"## [{release}]", 1)[1].split("\n## [", 1)[0]
    kinds = [line.removeprefix("### ") for line in section.splitlines() if line.startswith("### ")]
    allowed = ["Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"]
    assert kinds and all(kind in allowed for kind in kinds), kinds
    assert kinds == sorted(kinds, key=allowed.index), "sections in Keep a Changelog's order"


def test_every_deprecated_path_is_in_the_changelog_with_the_release_that_removes_it() -> None:
    release = Version(PYPROJECT["project"]["version"])
    removal = f"{release.major}.{release.minor + 1}.0"
    deprecated = CHANGELOG.split("### Deprecated", 1)[1].split("\n### ", 1)[0]
    assert f"removed in {removal}" in deprecated.lower()
    names = [name.split(".")[-1] for name in hf_unified_embed._DEPRECATED]
    missing = [name for name in names if f"`{name}`" not in deprecated]
    assert not missing, f"names the package face no longer re-exports, missing from Deprecated: {missing}"
    public = [old for old in deprecation.MOVED_MODULES if not old.split(".")[-1].startswith("_")]
    missing = [
        old for old in public if f"`.{old}`" not in deprecated and f"`hf_unified_embed.{old}`" not in deprecated
    ]
    assert not missing, f"moved modules missing from Deprecated: {missing}"


def test_a_deprecated_path_still_works_and_names_its_new_home() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        redact = hf_unified_embed.redact
    from hf_unified_embed.utils.redaction import redact as new

    assert redact is new
    assert any("hf_unified_embed.utils.redaction" in str(w.message) for w in caught)


# --- the bundled sample --------------------------------------------------------------------------------------------


def test_the_wheel_ships_the_sample_from_the_same_paths() -> None:
    include = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    shipped = {
        target.removeprefix("hf_unified_embed/sample/"): source
        for source, target in include.items()
        if target.startswith("hf_unified_embed/sample/")
    }
    assert shipped == SAMPLE_LAYOUT
    assert all((REPO / source).exists() for source in SAMPLE_LAYOUT.values())


def test_the_written_sample_builds_and_its_recipes_and_suites_find_their_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hf_unified_embed.evaluation import load_suite
    from hf_unified_embed.recipe import load_train_recipe
    from hf_unified_embed.recipe.preflight import quick_preflight

    monkeypatch.chdir(tmp_path)
    assert main(["sample", "run"]) == 0
    printed = capsys.readouterr().out
    assert "hf-unified-embed build run/recipes/sample.yaml -o run/outputs/data" in printed
    assert {path.relative_to("run").as_posix() for path in Path("run").rglob("*") if path.is_file()} >= {
        "recipes/sample.yaml",
        "recipes/train_sample.yaml",
        "suites/demo.yaml",
        "suites/sample.yaml",
        "data/LICENSES.md",
    }
    assert main(["build", "run/recipes/sample.yaml", "-o", "run/outputs/data", "--num-proc", "1"]) == 0
    assert "wrote " in capsys.readouterr().out
    recipe = load_train_recipe("run/recipes/train_sample.yaml")
    assert Path(recipe.data.path).resolve() == (tmp_path / "run" / "outputs" / "data").resolve()
    quick_preflight(recipe)
    for suite in ("demo", "sample"):
        entries = load_suite(f"run/suites/{suite}.yaml").entries
        assert entries


def test_a_sample_is_refused_where_the_output_rule_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's")
    assert main(["sample", str(tmp_path / "mine"), "--overwrite"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert (tmp_path / "mine" / "notes.txt").read_text() == "the user's"
    target = write_sample(tmp_path / "fresh")
    assert main(["sample", str(target)]) == 2, "a written sample is not replaced without --overwrite"
    assert "--overwrite" in capsys.readouterr().err
    assert write_sample(target, overwrite=True) == target


# --- what an existing environment keeps ----------------------------------------------------------------------------


def test_no_core_requirement_caps_transformers_and_the_lora_extra_keeps_the_peft_range() -> None:
    core = {Requirement(text).name: Requirement(text) for text in PYPROJECT["project"]["dependencies"]}
    assert not any(spec.operator in ("<", "<=", "==", "~=") for spec in core["transformers"].specifier)
    lora = {
        Requirement(text).name: Requirement(text) for text in PYPROJECT["project"]["optional-dependencies"]["lora"]
    }
    assert not lora["transformers"].specifier.contains("5.22.0")
    assert lora["transformers"].specifier.contains("5.21.1")


@settings(max_examples=40, deadline=None)
@given(minor=st.integers(min_value=18, max_value=40), patch=st.integers(min_value=0, max_value=9))
def test_an_installed_transformers_5_18_or_later_is_kept(minor: int, patch: int) -> None:
    """``pip install hf-unified-embed`` keeps any installed transformers 5.18+ (it never downgrades for LoRA)."""
    core = [Requirement(text) for text in PYPROJECT["project"]["dependencies"]]
    (transformers,) = [requirement for requirement in core if requirement.name == "transformers"]
    assert transformers.specifier.contains(f"5.{minor}.{patch}")
