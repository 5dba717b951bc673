"""An instruction must leave room for the text: the check every command that prepends one runs first.

sentence-transformers prepends a task's instruction (a prompt) to every text and then truncates the
whole to ``max_seq_length`` tokens. An instruction as long as that leaves nothing of the text: every
query of the task embeds to the same vector, and training and mining go on without a word (measured:
a 35-token query instruction at ``max_seq_length: 32`` trained with exit 0; three different queries had
identical embeddings). :func:`check_instruction_room` refuses such an instruction with the task, the
field, its length in tokens and ``max_seq_length``; :func:`check_prompt_options` applies it to the prompts an
evaluation suite entry gives its evaluator (which :func:`with_prompt_names` turns into the model's prompt names); :func:`long_instruction_warning` is the tokenizer-free hint
``validate`` gives.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from hf_unified_embed.errors import InputError, shown

logger = logging.getLogger(__name__)

#: Fewest text tokens an instruction must leave, whatever ``max_seq_length`` (and at least a quarter of it).
MIN_TEXT_TOKENS = 8
#: Words above which ``validate`` (which has no tokenizer) warns: about 85 tokens for English WordPiece,
#: two thirds of the 128 tokens models of MiniLM's size are trained at.
WARN_INSTRUCTION_WORDS = 64


def text_room(max_seq_length: int) -> int:
    """Tokens an instruction must leave for the text: ``max(8, max_seq_length // 4)``."""
    return max(MIN_TEXT_TOKENS, max_seq_length // 4)


def instruction_tokens(tokenizer: Any, instruction: str, max_seq_length: int) -> int:
    """The tokens ``instruction`` takes in front of a text (special tokens included), counted on a prefix.

    A token spans at least one character, so a prefix of ``8 × max_seq_length`` characters that already
    holds ``max_seq_length`` tokens settles the question without tokenizing a million-word instruction.
    """
    prefix = instruction[: 8 * max_seq_length]
    # verbose=False: transformers' "sequence length is longer than the specified maximum" is this check's to say.
    count = len(tokenizer(prefix, verbose=False)["input_ids"])
    if count >= max_seq_length or len(prefix) == len(instruction):
        return count
    return len(tokenizer(instruction, verbose=False)["input_ids"])


def check_instruction_room(tokenizer: Any, instruction: str, max_seq_length: int | None, where: str) -> None:
    """Refuse ``instruction`` when it leaves fewer than :func:`text_room` tokens of ``max_seq_length`` for the text.

    Args:
        tokenizer: the model's tokenizer.
        instruction: the prompt put in front of every text (empty: nothing to check).
        max_seq_length: the model's; ``None`` (no limit known) or infinite (a static embedding model's: it
            truncates nothing) checks nothing.
        where: names the task and the field in the error, e.g. ``"task 'wikiqa', field 'query_instruction'"``.

    Raises:
        InputError: naming ``where``, the instruction's tokens and ``max_seq_length``.
    """
    if not instruction.strip() or not max_seq_length or not math.isfinite(max_seq_length):
        return
    tokens = instruction_tokens(tokenizer, instruction, max_seq_length)
    needed = text_room(max_seq_length)
    if max_seq_length - tokens < needed:
        size = f"{tokens}" if tokens < max_seq_length else f"at least {tokens}"
        raise InputError(
            f"{where}: the instruction takes {size} tokens of max_seq_length {max_seq_length}, leaving "
            f"{max(max_seq_length - tokens, 0)} for the text (at least {needed} needed): every text would be cut "
            "to (nearly) nothing; shorten the instruction or raise max_seq_length"
        )


#: Evaluator options (sentence-transformers' ``InformationRetrievalEvaluator``) that put a prompt in front of
#: every text, each with the option that names one of the model's own prompts instead.
PROMPT_OPTIONS = {"query_prompt": "query_prompt_name", "corpus_prompt": "corpus_prompt_name"}


def check_prompt_options(options: Mapping[str, Any], model: Any, where: str) -> None:
    """The prompts of an evaluator's ``options`` leave room for the text under ``model``'s ``max_seq_length``.

    Args:
        options: the evaluator's options (a suite entry's ``evaluator:`` mapping).
        model: the ``SentenceTransformer`` that will encode (its tokenizer, ``max_seq_length`` and ``prompts``).
        where: names the entry in the error, e.g. ``"entry 'nq'"``; the field is added.

    Raises:
        InputError: see :func:`check_instruction_room`.
    """
    for option, named in PROMPT_OPTIONS.items():
        field, prompt = option, options.get(option)
        if prompt is None and options.get(named) is not None:
            field, prompt = named, (getattr(model, "prompts", None) or {}).get(options[named])
        if isinstance(prompt, str):
            check_instruction_room(
                model.tokenizer, prompt, model.max_seq_length, f"{where}, field 'evaluator.{field}'"
            )


def with_prompt_names(options: Mapping[str, Any], model: Any, where: str) -> dict[str, Any]:
    """An evaluator's ``options`` with each prompt text the model has under a name replaced by that name.

    A model trained here carries its instructions as named prompts, and its users encode by name
    (``encode_query``, ``prompt_name=``); an evaluation that gives the same text encodes the same, and by the
    name it shows that it measured what a user gets. A text the model does not have is kept, with a warning
    that those numbers are not what the model's own prompts give.

    Args:
        options: the evaluator's options (a suite entry's ``evaluator:`` mapping).
        model: the ``SentenceTransformer`` that will encode.
        where: names the entry in the warning.

    Returns:
        A copy of ``options``; ``query_prompt: TEXT`` becomes ``query_prompt_name: NAME`` (the side's own
        default, ``query`` / ``document``, when it has that text), likewise ``corpus_prompt``.
    """
    prompts: Mapping[str, str] = getattr(model, "prompts", None) or {}
    result = dict(options)
    for (option, named), side in zip(PROMPT_OPTIONS.items(), ("query", "document")):
        text = result.get(option)
        if not isinstance(text, str) or named in result:
            continue
        names = [name for name, prompt in prompts.items() if prompt == text]
        if names:
            del result[option]
            result[named] = side if side in names else names[0]
        elif any(prompts.values()):
            logger.warning(
                "%s: evaluator.%s is not one of the model's prompts (%s): these numbers are not what a user of the "
                "model's own prompts gets",
                where,
                option,
                ", ".join(name for name, prompt in prompts.items() if prompt),
            )
    return result


def check_suite_prompts(suite: Any, model: Any) -> None:
    """Every entry of an evaluation suite: its evaluator's prompts leave room for the text (before any is scored)."""
    for entry in suite.entries:
        check_prompt_options(entry.evaluator, model, f"entry {shown(entry.name)}")


def long_instruction_warning(instruction: str, where: str) -> str | None:
    """A warning for an instruction of more than :data:`WARN_INSTRUCTION_WORDS` words (no tokenizer needed)."""
    words = len(instruction[: 64 * WARN_INSTRUCTION_WORDS].split())
    if words <= WARN_INSTRUCTION_WORDS:
        return None
    count = f"{words}" if len(instruction) <= 64 * WARN_INSTRUCTION_WORDS else f"more than {words}"
    return (
        f"{where}: the instruction has {count} words; with the model's max_seq_length it may leave little or no "
        "room for the text (train and mine-negatives check it in tokens)"
    )
