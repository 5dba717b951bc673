"""MkDocs hook: the parts of the site generated from the code at build time, never copied by hand.

A page asks for a generated part with an HTML comment on a line of its own (invisible where Markdown is
read without the site, as on GitHub):

* ``<!-- cli-reference -->``: every ``hf-unified-embed`` subcommand's usage, description and options,
  rendered from the parser the console script builds (:func:`hf_unified_embed.cli.main.build_parser`);
* ``<!-- loss-overview -->``: the "which loss for my data" table,
  :func:`hf_unified_embed.losses.overview.loss_overview_markdown`;
* ``<!-- api: MODULE -->``: the API reference of ``MODULE``: one mkdocstrings block whose members are the
  module's ``__all__`` (its exports), so a page lists exactly what the package exports;
* ``<!-- package-exports -->``: the names ``import hf_unified_embed`` exports, each linked to where its
  sub-package's page documents it;
* ``<!-- dependency-ranges -->``: the requirements ``pyproject.toml`` declares, the core's and each extra's.

A link from a page to a file of the repository outside ``docs/`` (``[the lock](../constraints.txt)``, right
on GitHub) becomes a link to that file in the repository (``repo_url``); a link to a file that does not exist
is left alone, and the strict build fails on it.
"""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path
from typing import Any

import tomllib

CLI_MARKER = "<!-- cli-reference -->"
LOSS_MARKER = "<!-- loss-overview -->"
EXPORTS_MARKER = "<!-- package-exports -->"
RANGES_MARKER = "<!-- dependency-ranges -->"
API_MARKER = re.compile(r"^<!-- api: (?P<module>[A-Za-z_][A-Za-z0-9_.]*) -->$", re.MULTILINE)

#: A relative Markdown link or image that leaves its folder: ``](../path#anchor)``.
REPOSITORY_LINK = re.compile(r"\]\((?P<target>(?:\.\./)+[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")

#: Markdown that help texts may contain by accident outside their code spans: HTML's angle brackets
#: (``data/<task>/...``) and entities, emphasis, links, backslash escapes and table pipes.
_ESCAPES = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        "\\": "\\\\",
        "*": r"\*",
        "_": r"\_",
        "[": r"\[",
        "]": r"\]",
        "|": r"\|",
    }
)


def escape(text: str) -> str:
    """``text`` as literal Markdown: what lies outside its ``code spans`` is escaped, the spans are kept."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part if part.startswith("`") else part.translate(_ESCAPES) for part in parts)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """``(name, parser, one-line help)`` of each subcommand, in the order of ``--help``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return [(name, sub, helps.get(name, "")) for name, sub in action.choices.items()]
    return []


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        invocation = formatter._format_action_invocation(action)
        help_text = formatter._expand_help(action) if action.help else ""
        default = action.default
        if default not in (None, False, argparse.SUPPRESS) and action.option_strings and "default" not in help_text:
            help_text = f"{help_text} (default: `{default}`)".strip()
        rows.append(f"| `{invocation}` | {escape(' '.join(help_text.split()))} |")
    return rows


def _options_table(parser: argparse.ArgumentParser) -> str:
    rows = _option_rows(parser)
    return "\n".join(["| argument | meaning |", "| --- | --- |", *rows]) if rows else ""


def cli_reference() -> str:
    """The CLI reference in Markdown: the command's own options, then a section per subcommand."""
    from hf_unified_embed.cli.main import build_parser

    parser = build_parser()
    parts = [
        "```text\n" + parser.format_usage().strip() + "\n```",
        escape(parser.description or ""),
        _options_table(parser),
        "| command | what it does |\n| --- | --- |\n"
        + "\n".join(f"| [`{name}`](#{name}) | {escape(text)} |" for name, _, text in _subcommands(parser)),
    ]
    for name, sub, _ in _subcommands(parser):
        parts += [
            f"## `{name}` {{#{name}}}",
            escape(sub.description or ""),
            "```text\n" + sub.format_usage().strip() + "\n```",
            _options_table(sub),
        ]
    return "\n\n".join(part for part in parts if part) + "\n"


def api_block(module_name: str) -> str:
    """One mkdocstrings block documenting the exports (``__all__``) of ``module_name``."""
    module = importlib.import_module(module_name)
    members = list(getattr(module, "__all__", []))
    if not members:
        raise ValueError(f"{module_name} has no __all__: its API page would document nothing")
    listed = "".join(f"\n        - {name}" for name in members)
    return f"::: {module_name}\n    options:\n      members:{listed}\n"


def package_exports() -> str:
    """A table of ``hf_unified_embed.__all__``: each name linked (autorefs) to its sub-package's documentation."""
    import hf_unified_embed

    rows = []
    for name in hf_unified_embed.__all__:
        module = hf_unified_embed._NAME_TO_MODULE[name]
        documented = f"hf_unified_embed.{module}.{name}"
        rows.append(f"| [`{name}`][{documented}] | `hf_unified_embed.{module}` |")
    return "\n".join(["| name | defined in |", "| --- | --- |", *rows]) + "\n"


def dependency_ranges(pyproject: Path) -> str:
    """A table of the requirements ``pyproject`` declares: the core's, then each extra's but ``dev``'s."""
    from packaging.requirements import Requirement

    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    groups = [("every install", project["dependencies"])]
    groups += [(f"`[{extra}]`", texts) for extra, texts in project["optional-dependencies"].items() if extra != "dev"]
    rows = []
    for group, texts in groups:
        for text in texts:
            requirement = Requirement(text)
            extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
            lower_first = sorted(
                requirement.specifier, key=lambda spec: (not spec.operator.startswith(">"), str(spec))
            )
            allowed = ", ".join(str(spec) for spec in lower_first) or "any"
            rows.append(f"| {group} | `{requirement.name}{extras}` | `{allowed}` |")
    python = project.get("requires-python", "")
    head = f"Python `{python}`.\n\n" if python else ""
    return head + "\n".join(["| needed by | package | versions |", "| --- | --- | --- |", *rows]) + "\n"


def loss_overview() -> str:
    from hf_unified_embed.losses.overview import loss_overview_markdown

    return loss_overview_markdown().strip() + "\n"


def repository_links(markdown: str, page: Path, docs_dir: Path, repo_url: str) -> str:
    """``markdown`` of ``page`` with its links to repository files outside ``docs_dir`` pointed at ``repo_url``."""
    root = docs_dir.parent.resolve()

    def link(match: re.Match[str]) -> str:
        target = (page.parent / match["target"]).resolve()
        if not target.exists() or target.is_relative_to(docs_dir.resolve()) or not target.is_relative_to(root):
            return match[0]
        kind = "tree" if target.is_dir() else "blob"
        return f"]({repo_url.rstrip('/')}/{kind}/main/{target.relative_to(root).as_posix()}{match['anchor'] or ''})"

    return REPOSITORY_LINK.sub(link, markdown)


def render(markdown: str, root: Path) -> str:
    """``markdown`` with every marker replaced by what it stands for (``root``: the repository)."""
    if RANGES_MARKER in markdown:
        markdown = markdown.replace(RANGES_MARKER, dependency_ranges(root / "pyproject.toml"))
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if EXPORTS_MARKER in markdown:
        markdown = markdown.replace(EXPORTS_MARKER, package_exports())
    if LOSS_MARKER in markdown:
        markdown = markdown.replace(LOSS_MARKER, loss_overview())
    return API_MARKER.sub(lambda match: api_block(match["module"]), markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    docs_dir = Path(config["docs_dir"])
    markdown = repository_links(markdown, docs_dir / page.file.src_path, docs_dir, config["repo_url"])
    return render(markdown, Path(config["config_file_path"]).parent)
