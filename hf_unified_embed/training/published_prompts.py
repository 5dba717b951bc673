"""The training instructions as the model's own named prompts, so a user of the saved folder gets them.

A model trained with instructions (:mod:`hf_unified_embed.training.prompts`) only embeds as it was trained
when each text gets its task's instruction in front. sentence-transformers keeps named prompts in the
model (``model.prompts``, saved to ``config_sentence_transformers.json``), and ``encode_query`` /
``encode_document`` / ``encode(prompt_name=...)`` put them in front of the texts. So the trained model
carries, for every training task:

==========================  =====================================================================
prompt name                 text
==========================  =====================================================================
``<task>``                  the task's query instruction, exactly as the collator put it in training
``<task>_document``         the task's document instruction, likewise
``query`` / ``document``    those of the *default task* (what ``encode_query`` / ``encode_document`` use)
==========================  =====================================================================

A task without one of its instructions gets the empty prompt under that name (its texts were encoded bare,
and a user calling the name gets the same). The default task is the one a recipe's ``default_prompt_task``
names; without it, the first retrieval task with an instruction, else the first task with one (the
order of the tasks as trained). ``default_prompt_task: false`` names none: ``query`` and ``document`` are
empty, so ``encode_query`` / ``encode_document`` encode bare texts as the base model did — what scored best
on retrieval data unlike the training tasks (docs/quality.md) — and each task's instructions stay a name
away. ``default_prompt_name`` stays unset: a plain ``encode`` puts no prompt in
front, as it did before training, and the STS-style tasks keep their own names.

The prompt text is the collator's, byte for byte: where the tokenizer needs a newline instead of a
trailing space to end on a token boundary (byte-level BPE), the saved prompt ends in that newline too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from datasets import Dataset, DatasetDict

from hf_unified_embed.errors import InputError, shown

#: Added to a task's name to name its document prompt.
DOCUMENT_SUFFIX = "_document"
#: The prompt names ``encode_query`` and ``encode_document`` look up.
QUERY, DOCUMENT = "query", "document"
#: The sentence-transformers file that holds the prompts of a saved model.
CONFIG_FILE = "config_sentence_transformers.json"


def document_prompt_name(task: str) -> str:
    """The name of ``task``'s document prompt: ``<task>_document``."""
    return task + DOCUMENT_SUFFIX


def training_sides(task_prompts: Mapping[str, str]) -> tuple[str, str]:
    """``(query prompt, document prompt)`` of one task's collator prompts (``{"query": ..., "positive": ...}``).

    The collator's ``positive`` / ``negative`` entries are both the document instruction
    (:func:`~hf_unified_embed.training.prompts.prompts_from_unified`); the positive's is the document prompt.
    """
    document = task_prompts.get("positive", task_prompts.get("negative", ""))
    return task_prompts.get("query", ""), document


def default_prompt_task(
    training_prompts: Mapping[str, Mapping[str, str]],
    task_types: Mapping[str, str],
    chosen: str | Literal[False] | None = None,
) -> str | None:
    """The task whose prompts become ``query`` / ``document``: ``chosen``, else the first retrieval task with an
    instruction, else the first task with one (``task_types`` order); ``None`` when no task has an instruction
    or ``chosen`` is ``False`` (no default task).

    Raises:
        InputError: ``chosen`` is not one of the tasks.
    """
    if chosen is False:
        return None
    if chosen is not None:
        if chosen not in task_types:
            raise InputError(f"default_prompt_task: {shown(chosen)} is not a task of this run: {list(task_types)}")
        return chosen
    instructed = [task for task in task_types if any(training_sides(training_prompts.get(task, {})))]
    retrieval = [task for task in instructed if task_types[task] == "retrieval"]
    first = retrieval or instructed
    return first[0] if first else None


def published_prompts(
    training_prompts: Mapping[str, Mapping[str, str]],
    task_types: Mapping[str, str],
    default_task: str | Literal[False] | None = None,
) -> dict[str, str]:
    """The named prompts a model trained with ``training_prompts`` carries (see the module docstring).

    Args:
        training_prompts: the collator's ``{task: {"query": ..., "positive": ..., "negative": ...}}``.
        task_types: ``{task: task_type}`` of every training task, in training order.
        default_task: the task for ``query`` / ``document``; default: see :func:`default_prompt_task`;
            ``False``: none, ``query`` and ``document`` are empty (bare texts).

    Returns:
        ``{"query": ..., "document": ..., task: ..., "<task>_document": ...}``; empty when no task has an
        instruction (the model keeps the prompts it had).

    Raises:
        InputError: ``default_task`` is not a task, or two prompts with different texts would have one name
            (a task named ``query``, or tasks ``a`` and ``a_document``).
    """
    default = default_prompt_task(training_prompts, task_types, default_task)
    if (default is None and default_task is not False) or not any(
        any(training_sides(columns)) for columns in training_prompts.values()
    ):
        return {}
    named: dict[str, tuple[str, str]] = {}  # name -> (text, what claims it)

    def claim(name: str, text: str, what: str) -> None:
        if name in named and named[name][0] != text:
            raise InputError(
                f"prompt name {shown(name)}: {named[name][1]} and {what} would both be saved under it with "
                "different texts; rename one of the tasks"
            )
        named.setdefault(name, (text, what))

    if default is None:
        claim(QUERY, "", "no default task (default_prompt_task: false)")
        claim(DOCUMENT, "", "no default task (default_prompt_task: false)")
    else:
        query, document = training_sides(training_prompts.get(default, {}))
        claim(QUERY, query, f"the query instruction of the default task {shown(default)}")
        claim(DOCUMENT, document, f"the document instruction of the default task {shown(default)}")
    for task in task_types:
        query, document = training_sides(training_prompts.get(task, {}))
        claim(task, query, f"the query instruction of task {shown(task)}")
        claim(document_prompt_name(task), document, f"the document instruction of task {shown(task)}")
    return {name: text for name, (text, _) in named.items()}


def task_types_of(dataset_dict: DatasetDict | Mapping[str, Dataset]) -> dict[str, str]:
    """``{task: task_type}`` of unified tasks, in their order."""
    from hf_unified_embed.training.layout import task_type_of

    return {task: task_type_of(dataset, task) for task, dataset in dataset_dict.items()}


def publish_prompts(
    model: Any,
    dataset_dict: DatasetDict | Mapping[str, Dataset],
    training_prompts: Mapping[str, Any] | str,
    default_task: str | Literal[False] | None = None,
) -> dict[str, str]:
    """Give ``model`` the named prompts of :func:`published_prompts`, so ``model.save`` writes them.

    The model's earlier prompts (a base model's own ``query: `` …) no longer describe what it was trained
    with and are replaced; ``default_prompt_name`` is cleared with them, so a plain ``encode`` stays bare.
    Nothing changes when no task has an instruction.

    Args:
        model: the ``SentenceTransformer`` being trained.
        dataset_dict: the unified training tasks (their ``task_type`` picks the default task).
        training_prompts: the collator's prompts (``UnifiedDataCollator.prompts``: ``{task: {column: text}}``).
        default_task: the task for ``query`` / ``document`` (a recipe's ``default_prompt_task``; ``False``:
            none, bare texts).

    Returns:
        The prompts set (empty: none set).

    Raises:
        TypeError: ``training_prompts`` is not per task (one prompt for every task and column names no task).
    """
    if isinstance(training_prompts, str) or not all(
        isinstance(columns, Mapping) for columns in training_prompts.values()
    ):
        raise TypeError(
            f"the prompts must be given per task, {{task: {{column: text}}}}, got {shown(training_prompts)}"
        )
    per_task = {str(task): dict(columns) for task, columns in training_prompts.items()}
    prompts = published_prompts(per_task, task_types_of(dataset_dict), default_task)
    if prompts:
        model.prompts = dict(prompts)
        model.default_prompt_name = None
    return prompts


def saved_prompts(model_or_folder: Any) -> dict[str, str]:
    """The named prompts of a ``SentenceTransformer`` or of a saved model folder (``{}`` when it has none)."""
    if isinstance(model_or_folder, (str, Path)):
        path = Path(model_or_folder) / CONFIG_FILE
        if not path.is_file():
            return {}
        prompts = json.loads(path.read_text(encoding="utf-8")).get("prompts") or {}
    else:
        prompts = getattr(model_or_folder, "prompts", None) or {}
    return {str(name): str(text) for name, text in prompts.items()}


def prompt_table(model_or_folder: Any) -> list[dict[str, str]]:
    """The model's prompts as a model card shows them: one row per prompt, ``query`` and ``document`` first.

    Args:
        model_or_folder: a ``SentenceTransformer`` or a saved model folder.

    Returns:
        Rows ``{"name", "prompt", "task", "side", "call", "purpose"}`` (all strings): the prompt name, its
        exact text, the training task it comes from (``""`` when unknown), ``"query"`` or ``"document"``,
        the call a user writes (``model.encode_query(texts)``, ``model.encode(texts, prompt_name="wikiqa")``)
        and what it is for. Empty when every prompt is empty (a model trained without instructions).
    """
    prompts = saved_prompts(model_or_folder)
    if not any(prompts.values()):
        return []
    tasks = [name for name in prompts if name not in (QUERY, DOCUMENT) and _document_of(name, prompts) is None]
    bare = not prompts.get(QUERY) and not prompts.get(DOCUMENT)  # default_prompt_task: false
    default = (
        ""
        if bare
        else next(
            (
                task
                for task in tasks
                if prompts[task] == prompts.get(QUERY, "")
                and prompts.get(document_prompt_name(task), "") == prompts.get(DOCUMENT, "")
            ),
            "",
        )
    )
    rows: list[dict[str, str]] = []
    for name, text in prompts.items():
        if name in (QUERY, DOCUMENT):
            side, task = name, default
            call = f"model.encode_{name}(texts)"
            texts = "queries" if name == QUERY else "documents"
            purpose = f"{texts} of {task} (the default of encode_{name})" if task else f"the default of encode_{name}"
            if bare:
                purpose = (
                    f"{texts} without an instruction, as the base model encoded them (the default of encode_{name})"
                )
        else:
            stem = _document_of(name, prompts)
            side, task = ("query", name) if stem is None else ("document", stem)
            call = f'model.encode(texts, prompt_name="{name}")'
            purpose = f"{'queries' if side == 'query' else 'documents'} of {task}"
        rows.append({"name": name, "prompt": text, "task": task, "side": side, "call": call, "purpose": purpose})
    order = {QUERY: 0, DOCUMENT: 1}
    return sorted(rows, key=lambda row: order.get(row["name"], 2))


def _document_of(name: str, prompts: Mapping[str, str]) -> str | None:
    """The task whose document prompt ``name`` is, or ``None`` (a query prompt or a default)."""
    stem = name.removesuffix(DOCUMENT_SUFFIX)
    return stem if stem != name and stem in prompts else None
