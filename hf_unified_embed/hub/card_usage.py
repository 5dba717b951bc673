"""The usage section every card of this package shares: what to install, what to pass, which prompt to use."""

from __future__ import annotations

from typing import Any

from hf_unified_embed.hub.consumers import ConsumerNeeds


def prompts_markdown(model_or_folder: Any) -> str:
    """The card's table of a model's named prompts (name, the call, what it is for); ``""`` when it has none.

    Args:
        model_or_folder: a ``SentenceTransformer`` or a saved model folder.
    """
    from hf_unified_embed.training.published_prompts import prompt_table

    rows = prompt_table(model_or_folder)
    if not rows:
        return ""
    lines = [
        "The model was trained with instructions and carries them as named prompts: sentence-transformers puts",
        "the prompt in front of each text (the pooling leaves it out), so use the one that matches your texts.",
        "",
        "| Prompt name | Call | For |",
        "|:------------|:-----|:----|",
    ]
    # A purpose is free text: a pipe would end its table cell.
    lines += [f"| `{row['name']}` | `{row['call']}` | {row['purpose'].replace('|', '/')} |" for row in rows]
    return "\n".join(lines)


def loader_arguments(model_id: str, needs: ConsumerNeeds) -> str:
    """The arguments of the card's ``SentenceTransformer(...)`` call: the id, and the flag the folder needs."""
    return f'"{model_id}", trust_remote_code=True' if needs.trust_remote_code else f'"{model_id}"'
