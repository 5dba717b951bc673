"""Per-task instructions (INSTRUCTOR §2.1) as sentence-transformers prompts, excluded from pooling.

The unified schema keeps one ``query_instruction`` and one ``document_instruction`` per task. The
trainer's ``prompts={task: {column: text}}`` argument prepends them per batch; with
``Pooling(include_prompt=False)`` the instruction tokens shape the text tokens through attention but
are not averaged into the embedding, as INSTRUCTOR trains.

sentence-transformers excludes the first ``len(tokenize(prompt))`` tokens of ``prompt + text``. That
is only right when the prompt ends on a token boundary of the concatenation. WordPiece (BERT) always
does; byte-level BPE (GPT-2, Qwen2, Llama 3) and SentencePiece (Llama 2, T5) attach a space to the
*next* word, so a prompt ending in a space tokenizes alone as ``[..., ":", " "]`` but as
``[..., ":", " what"]`` in front of a text — and the first text token would be dropped from pooling.
Given the model's tokenizer, :func:`prompts_from_unified` therefore ends such prompts with a newline
instead (a boundary for every common tokenizer) and checks the boundary before training.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from datasets import Dataset, DatasetDict
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Pooling

from hf_unified_embed.errors import InputError, shown
from hf_unified_embed.schema import INSTRUCTION_COLUMNS
from hf_unified_embed.training.instruction_fit import check_instruction_room
from hf_unified_embed.utils.arguments import checked_arguments

#: The prompt key of each instruction: numbered columns (``positive_2``) resolve to their kind.
_PROMPT_KEYS: dict[str, tuple[str, ...]] = {
    "query_instruction": ("query",),
    "document_instruction": ("positive", "negative"),
}


def _single_value(dataset: Dataset, task: str, column: str) -> str:
    values = dataset.unique(column)
    if len(values) != 1:
        raise ValueError(
            f"task {shown(task)}, field {shown(column)}: instructions must be uniform per task to become prompts, "
            f"found {len(values)} different values"
        )
    return str(values[0])


#: Texts put after a prompt to see whether the prompt's tokens stay the same in front of a text.
_BOUNDARY_PROBES = ("what", "The", "a", "1", "(", "é")


def ends_on_token_boundary(tokenizer: Any, prompt: str) -> bool:
    """Whether the tokens of ``prompt`` (as sentence-transformers counts them) start every ``prompt + text``."""
    alone = tokenizer(prompt)["input_ids"]
    if alone and alone[-1] in set(tokenizer.all_special_ids):
        alone = alone[:-1]  # sentence-transformers drops a trailing EOS/SEP from the prompt length
    return all(tokenizer(prompt + probe)["input_ids"][: len(alone)] == alone for probe in _BOUNDARY_PROBES)


def _as_prompt(instruction: str, tokenizer: Any | None, where: str) -> str:
    # sentence-transformers concatenates prompt + text with no separator; "answers:what" would
    # tokenise differently from the instruction alone and blur the prompt boundary.
    prompt = instruction if instruction[-1:].isspace() else instruction + " "
    if tokenizer is None or ends_on_token_boundary(tokenizer, prompt):
        return prompt
    newline = instruction.rstrip() + "\n"
    if ends_on_token_boundary(tokenizer, newline):
        return newline
    raise InputError(
        f"{where}: the instruction {shown(instruction)} does not end on a token boundary of this tokenizer, "
        "with a trailing space or a newline, so excluding it from pooling would also drop text tokens; "
        "end it with a character that the tokenizer never joins to the next word"
    )


def prompts_from_unified(
    dataset_dict: DatasetDict | Mapping[str, Dataset],
    tokenizer: Any | None = None,
    max_seq_length: int | None = None,
) -> dict[str, dict[str, str]]:
    """The ``prompts`` training argument built from the tasks' instructions.

    Args:
        dataset_dict: Unified tasks keyed by task name (the dataset names the trainer sees).
        tokenizer: The model's tokenizer. When given, every prompt is checked to end on a token
            boundary (see the module docstring) and a trailing space the tokenizer would join to
            the text becomes a newline.
        max_seq_length: The model's. With ``tokenizer``, an instruction that leaves too little of it for
            the text is refused (:func:`~hf_unified_embed.training.instruction_fit.check_instruction_room`).

    Returns:
        ``{task: {"query": query_instruction, "positive": document_instruction, "negative": ...}}``;
        empty instructions and tasks without any are left out. A space is appended to an
        instruction that does not end in whitespace. :class:`UnifiedDataCollator` resolves
        ``positive_1..K`` / ``negative_1..K`` to the ``positive`` / ``negative`` entries.

    Example:
        ::

            prompts = prompts_from_unified(train)
            # {"wikiqa": {"query": "Represent the question for retrieving answers: ", "positive": ...}}
    """
    prompts: dict[str, dict[str, str]] = {}
    for task, dataset in dataset_dict.items():
        task_prompts = {}
        for column in INSTRUCTION_COLUMNS:
            instruction = _single_value(dataset, task, column)
            if instruction.strip():
                where = f"task {shown(task)}, field {shown(column)}"
                if tokenizer is not None:  # first: a million-word instruction is refused on a prefix
                    check_instruction_room(tokenizer, instruction, max_seq_length, where)
                prompt = _as_prompt(instruction, tokenizer, where)
                task_prompts.update(dict.fromkeys(_PROMPT_KEYS[column], prompt))
        if task_prompts:
            prompts[task] = task_prompts
    return prompts


@checked_arguments
def exclude_instructions_from_pooling(model: SentenceTransformer) -> SentenceTransformer:
    """Set ``include_prompt=False`` on every ``Pooling`` module of ``model`` (INSTRUCTOR pooling).

    Unlike ``SentenceTransformer.set_pooling_include_prompt`` this refuses a model without a
    ``Pooling`` module instead of silently changing nothing. The setting is saved with the model,
    so ``encode(..., prompt=...)`` after loading pools the same way. Returns ``model``.
    """
    pooling = [module for module in model.modules() if isinstance(module, Pooling)]
    if not pooling:
        raise ValueError(
            "the model has no Pooling module, so instruction tokens cannot be excluded from pooling; "
            f"its modules are {[type(m).__name__ for m in model.children()]}"
        )
    for module in pooling:
        module.include_prompt = False
    return model
