"""How a model card names its model: the local folder while it sits on disk, the Hub id once pushed.

A card written next to its weights cannot know where the model will be published, and
sentence-transformers' own placeholder (``sentence_transformers_model_id``) makes its usage snippet
fail for everyone. Every card this package writes therefore names the folder it is in, in the form a
user passes to a loader: ``./<folder name>`` — a relative path, so the snippet runs as written from
the folder's parent folder, and never a Hub-looking name that a loader would look up online.

A card given the model's Hub id when it was written (a merge's ``--model-name org/name``,
sentence-transformers' ``model_card_data.model_id``) names that id instead.

``push`` (and a training recipe's ``hub.repo_id``) replaces that name — and the placeholder, the bare
folder name older merge cards used, and any id a sentence-transformers class loads in the card — by the
repository id in the uploaded copy of the card:
every string literal of the card's code blocks that names the model, the card's title, the
``model-index`` name and the comment above the loader. Nothing else in the card is touched (a merge
card's recipe keeps its ``output_dir``).
"""

from __future__ import annotations

import re
from pathlib import Path

#: sentence-transformers' stand-in for a model id its card generator does not know.
PLACEHOLDER = "sentence_transformers_model_id"
#: The comment above the loader in a card that names a local folder, and the one of a pushed card.
LOCAL_COMMENT = "# Load this folder (run from the folder that holds it; `push` puts the Hub id here)"
HUB_COMMENT = "# Download from the 🤗 Hub"

_CODE_BLOCK = re.compile(r"^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```", re.MULTILINE | re.DOTALL)
#: The first argument of a loader call: ``SentenceTransformer("x")``, ``AutoModel.from_pretrained("x")``.
_LOADED = re.compile(
    r"(?:SentenceTransformer|CrossEncoder|SparseEncoder|from_pretrained)\(\s*(?P<quote>[\"'])(?P<id>[^\"'\n]+)(?P=quote)"
)


def local_model_id(folder: str | Path) -> str:
    """How a card saved in ``folder`` names its model: ``./<folder name>``."""
    return f"./{Path(folder).resolve().name}"


def loaded_ids(card: str) -> list[str]:
    """The model ids the card's code blocks load (first argument of each loader call), in order."""
    return list(
        dict.fromkeys(match["id"] for block in _CODE_BLOCK.finditer(card) for match in _LOADED.finditer(block["body"]))
    )


def _local_ids(card: str, folder: Path) -> set[str]:
    """The names by which ``card`` may refer to the model of ``folder`` before it is pushed."""
    names = {PLACEHOLDER, local_model_id(folder), folder.resolve().name}
    # A folder renamed after its card was written keeps the old ``./name``: a loaded relative path is this model.
    names.update(model_id for model_id in loaded_ids(card) if model_id.startswith("./") and "/" not in model_id[2:])
    # What a sentence-transformers class loads is the card's own model, even under a Hub id given before (a
    # merge's --model-name): pushed elsewhere, it is that repository. ``from_pretrained`` may load a base.
    names.update(
        match["id"]
        for block in _CODE_BLOCK.finditer(card)
        for match in _LOADED.finditer(block["body"])
        if not match[0].startswith("from_pretrained")
    )
    return names


def with_repo_id(card: str, repo_id: str, folder: str | Path) -> str:
    """``card`` with every name of ``folder``'s model replaced by ``repo_id`` (see the module docs).

    Args:
        card: the text of the folder's ``README.md``.
        repo_id: the Hub repository the folder is pushed to.
        folder: the model folder the card describes.

    Returns:
        The card a push uploads; the same text when it names no local model.
    """
    names = _local_ids(card, Path(folder))
    # A relative path is the model wherever it stands (``PeftModel.from_pretrained(base, "./x")``); a bare
    # name only as what a loader loads (a folder named "query" must not rename ``prompt_name="query"``).
    paths = [name for name in names if name.startswith("./")]
    path_literal = re.compile(r"(?P<quote>[\"'])(?:" + "|".join(map(re.escape, paths)) + r")(?P=quote)")

    def loader(found: re.Match[str]) -> str:
        text = found[0]
        if found["id"] not in names:
            return text
        start, end = found.span("id")
        return text[: start - found.start()] + repo_id + text[end - found.start() :]

    def code_block(match: re.Match[str]) -> str:
        body = _LOADED.sub(loader, match["body"])
        body = path_literal.sub(lambda found: f"{found['quote']}{repo_id}{found['quote']}", body)
        return f"```{match['lang']}\n{body.replace(LOCAL_COMMENT, HUB_COMMENT)}```"

    front, body = _split_front_matter(card)
    alternatives = "|".join(map(re.escape, sorted(names)))
    # ``model-index`` entries are named after the model (a merge without --model-name: its folder name); only
    # those, the top-level list items, never the ``name`` of a dataset inside their results.
    front = re.sub(
        rf"^(?P<head>-\s+name:\s*)(?P<quote>[\"']?)(?:{alternatives})(?P=quote)\s*$",
        lambda found: f"{found['head']}{repo_id}",
        front,
        flags=re.MULTILINE,
    )
    body = _CODE_BLOCK.sub(code_block, body)
    # The title: ``# <name>`` or ``# <name> (soup merge)``.
    body = re.sub(rf"^# (?:{alternatives})(?=$| \()", lambda _: f"# {repo_id}", body, count=1, flags=re.MULTILINE)
    return front + body


def _split_front_matter(card: str) -> tuple[str, str]:
    """``(front matter with its --- lines, the rest)``; an empty front matter when the card has none."""
    if not card.startswith("---\n"):
        return "", card
    end = card.find("\n---", 4)
    if end < 0:
        return "", card
    end = card.find("\n", end + 1)
    end = len(card) if end < 0 else end + 1
    return card[:end], card[end:]
