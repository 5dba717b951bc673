"""Per-task instructions (INSTRUCTOR §2.1) as sentence-transformers prompts, excluded from pooling.

The unified schema keeps one ``query_instruction`` and one ``document_instruction`` per task. The
trainer's ``prompts={task: {column: text}}`` argument prepends them per batch; with
``Pooling(include_prompt=False)`` the instruction tokens shape the text tokens through attention but
are not averaged into the embedding, as INSTRUCTOR trains.
"""

from __future__ import annotations

from collections.abc import Mapping

from datasets import Dataset, DatasetDict
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Pooling

from hf_unified_embed.schema import INSTRUCTION_COLUMNS

#: The prompt key of each instruction: numbered columns (``positive_2``) resolve to their kind.
_PROMPT_KEYS: dict[str, tuple[str, ...]] = {
    "query_instruction": ("query",),
    "document_instruction": ("positive", "negative"),
}


def _single_value(dataset: Dataset, task: str, column: str) -> str:
    values = dataset.unique(column)
    if len(values) != 1:
        raise ValueError(
            f"task {task!r}, field {column!r}: instructions must be uniform per task to become prompts, "
            f"found {len(values)} different values"
        )
    return str(values[0])


def _as_prompt(instruction: str) -> str:
    # sentence-transformers concatenates prompt + text with no separator; "answers:what" would
    # tokenise differently from the instruction alone and blur the prompt boundary.
    return instruction if instruction[-1:].isspace() else instruction + " "


def prompts_from_unified(dataset_dict: DatasetDict | Mapping[str, Dataset]) -> dict[str, dict[str, str]]:
    """The ``prompts`` training argument built from the tasks' instructions.

    Args:
        dataset_dict: Unified tasks keyed by task name (the dataset names the trainer sees).

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
                task_prompts.update(dict.fromkeys(_PROMPT_KEYS[column], _as_prompt(instruction)))
        if task_prompts:
            prompts[task] = task_prompts
    return prompts


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
