"""The documentation site: its generated parts come from the code, its navigation from the pages that exist,
and the strict build (``make docs``) passes and holds what the code defines.

The hook (``docs/hooks/generated.py``) renders the CLI reference from the command's own parsers, the API pages'
members from each sub-package's ``__all__``, the dependency table from ``pyproject.toml`` and the links to
repository files as links into the repository; these tests check each against its source, and search the
escaping of help texts with hypothesis.
"""

from __future__ import annotations

import argparse
import html
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import markdown as markdown_lib
import pytest
import tomllib
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

import hf_unified_embed
from hf_unified_embed.cli.main import build_parser

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
SITE_URL = "https://hf-unified-embed.github.io/hf-unified-embed/"
REPO_URL = "https://github.com/hf-unified-embed/hf-unified-embed"


def _hook() -> Any:
    spec = importlib.util.spec_from_file_location("docs_hook", DOCS / "hooks" / "generated.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = _hook()


class _MkDocsLoader(yaml.SafeLoader):
    """mkdocs.yml with its ``!!python/...`` tags read as plain values (they name Python objects mkdocs builds)."""


_MkDocsLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def mkdocs_config() -> dict[str, Any]:
    return yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_MkDocsLoader)


def nav_pages(entries: Any) -> list[str]:
    """Every page the navigation names, in order."""
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, list):
        return [page for entry in entries for page in nav_pages(entry)]
    if isinstance(entries, dict):
        return [page for value in entries.values() for page in nav_pages(value)]
    return []


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


# --- the configuration -------------------------------------------------------------------------------------------


def test_the_navigation_names_every_page_once_and_only_pages_that_exist() -> None:
    pages = nav_pages(mkdocs_config()["nav"])
    assert len(pages) == len(set(pages)), [page for page in pages if pages.count(page) > 1]
    missing = [page for page in pages if not (DOCS / page).is_file()]
    assert not missing, f"mkdocs.yml's nav names pages that do not exist: {missing}"
    unlisted = sorted(
        path.relative_to(DOCS).as_posix()
        for path in DOCS.rglob("*.md")
        if "hooks" not in path.parts and path.relative_to(DOCS).as_posix() not in pages
    )
    assert not unlisted, f"pages the navigation does not list: {unlisted}"


def test_the_site_and_the_package_metadata_name_the_same_addresses() -> None:
    config = mkdocs_config()
    urls = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]
    assert config["site_url"] == urls["Documentation"] == SITE_URL
    assert config["repo_url"] == urls["Homepage"] == REPO_URL
    assert urls["Changelog"] == f"{REPO_URL}/blob/main/CHANGELOG.md"
    assert urls["Issues"] == f"{REPO_URL}/issues"
    assert config["strict"] is True
    snippets = next(
        ext for ext in config["markdown_extensions"] if isinstance(ext, dict) and "pymdownx.snippets" in ext
    )
    assert snippets["pymdownx.snippets"] == {"base_path": ["."], "check_paths": True}


def test_every_sub_package_that_exports_names_has_an_api_page_listing_exactly_them() -> None:
    documented = {}
    for page in (DOCS / "api").glob("*.md"):
        for match in hook.API_MARKER.finditer(page.read_text(encoding="utf-8")):
            documented[match["module"]] = page.name
    exported = {f"hf_unified_embed.{module.split('.')[0]}" for module in hf_unified_embed._EXPORTS} - {
        "hf_unified_embed.errors"  # no __all__: its page documents the module (every class is public)
    }
    assert exported <= set(documented), f"sub-packages without an API page: {sorted(exported - set(documented))}"
    for module in documented:
        block = hook.api_block(module)
        members = re.findall(r"^        - (\S+)$", block, re.MULTILINE)
        assert members == list(importlib.import_module(module).__all__), module


def test_the_package_page_links_every_headline_name_to_its_documentation() -> None:
    table = hook.package_exports()
    for name in hf_unified_embed.__all__:
        module = hf_unified_embed._NAME_TO_MODULE[name]
        assert f"| [`{name}`][hf_unified_embed.{module}.{name}] |" in table, name


# --- the CLI reference -------------------------------------------------------------------------------------------


def test_the_cli_reference_has_every_subcommand_with_its_usage_and_every_option() -> None:
    reference = hook.cli_reference()
    for name, parser in subcommands(build_parser()).items():
        assert f"## `{name}` {{#{name}}}" in reference, name
        assert parser.format_usage().strip() in reference, name
        for action in parser._actions:
            for flag in action.option_strings:
                assert f"`{flag}" in reference or f", {flag}" in reference, f"{name} {flag}"
    assert "hf-unified-embed sample" in reference and "--overwrite" in reference


def _cell_text(markdown: str) -> str:
    """What a reader sees of ``markdown`` in a table cell: the rendered text, tags and entities resolved."""
    rendered = markdown_lib.markdown(f"| a |\n| --- |\n| {markdown} |", extensions=["tables"])
    cell = re.search(r"<td>(.*)</td>", rendered, re.DOTALL)
    assert cell is not None, rendered
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", cell.group(1))).split())


#: What a help text is made of: words, paths with placeholders (``data/<task>/*.parquet``), options, numbers.
HELP_TEXT = st.text(alphabet=st.sampled_from(list("abltmpXYZ019 <>*_|/.,:;()[]{}=+-~'\"#%!?&$\\")), max_size=40)


@settings(max_examples=200, deadline=None)
@given(text=HELP_TEXT)
@example("data/<task>/<split>-*.parquet + README.md")
@example("[a](b) ![i](p) &lt; a\\*b __x__ a|b")
def test_a_help_text_renders_as_written(text: str) -> None:
    """Angle brackets, asterisks, underscores, pipes and the like in a help text are shown, never interpreted."""
    assert _cell_text(hook.escape(text)) == " ".join(text.split())


@settings(max_examples=50, deadline=None)
@given(before=HELP_TEXT, code=st.text(alphabet=st.sampled_from(list("ab <>*_|-.")), min_size=1, max_size=12))
def test_a_code_span_in_a_help_text_stays_code(before: str, code: str) -> None:
    code = code.strip(" ") or "x"
    rendered = markdown_lib.markdown(hook.escape(f"{before} `{code}`"))
    assert f"<code>{html.escape(code, quote=False)}</code>" in rendered


# --- repository links and the dependency table ------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    target=st.sampled_from(["pyproject.toml", "examples/recipes/sample.yaml", "examples/data", "tests/test_wheel.py"]),
    anchor=st.sampled_from(["", "#L1", "#section"]),
    depth=st.sampled_from([0, 1]),
)
def test_a_link_to_a_repository_file_points_into_the_repository(target: str, anchor: str, depth: int) -> None:
    page = DOCS / ("api/page.md" if depth else "page.md")
    link = "../" * (depth + 1) + target
    markdown = f"see [it]({link}{anchor}) and [a page](install.md)"
    kind = "tree" if (REPO / target).is_dir() else "blob"
    assert hook.repository_links(markdown, page, DOCS, REPO_URL) == (
        f"see [it]({REPO_URL}/{kind}/main/{target}{anchor}) and [a page](install.md)"
    )


def test_a_link_to_a_missing_repository_file_is_left_for_the_strict_build_to_refuse() -> None:
    markdown = "[gone](../no/such/file.py) [inside](../docs/install.md)"
    assert hook.repository_links(markdown, DOCS / "page.md", DOCS, REPO_URL) == markdown


def test_the_dependency_table_lists_every_declared_requirement_but_the_dev_extra() -> None:
    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    table = hook.dependency_ranges(REPO / "pyproject.toml")
    listed = set(re.findall(r"^\| [^|]+ \| `([^`\[]+)", table, re.MULTILINE))
    users = {Requirement(text).name for text in project["dependencies"]}
    for extra, texts in project["optional-dependencies"].items():
        if extra != "dev":
            users |= {Requirement(text).name for text in texts}
    assert listed == users
    assert "| every install | `transformers` | `>=5.18` |" in table
    assert "| `[lora]` | `transformers` | `>=5.18, <5.22` |" in table
    assert "| every install | `sentence-transformers` | `>=6.2, <7` |" in table


def test_the_loss_table_is_the_losses_own_declaration_wherever_a_page_asks_for_it() -> None:
    from hf_unified_embed.losses.overview import loss_overview_markdown

    page = "# Losses\n\n<!-- loss-overview -->\n\nMore.\n"
    assert hook.render(page, REPO) == f"# Losses\n\n{loss_overview_markdown().strip()}\n\n\nMore.\n"
    assert hook.LOSS_MARKER in (DOCS / "losses.md").read_text(encoding="utf-8")


# --- the build -----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_strict_build_passes_and_holds_the_generated_references(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs is not None, "mkdocs is installed with the dev extra"
    site = tmp_path / "site"
    completed = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=1800,  # a hang guard: the whole site and its generated reference, on a machine that may be loaded
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    cli = (site / "cli" / "index.html").read_text(encoding="utf-8")
    assert 'id="sample"' in cli and "hf-unified-embed sample" in cli
    losses = (site / "api" / "losses" / "index.html").read_text(encoding="utf-8")
    assert 'id="hf_unified_embed.losses.MultiPositiveInfoNCELoss"' in losses
    assert "also learns from these rows" in (site / "losses" / "index.html").read_text(
        encoding="utf-8"
    )  # the generated table
    changelog = (site / "changelog" / "index.html").read_text(encoding="utf-8")
    assert f"{hf_unified_embed.__version__}" in changelog
