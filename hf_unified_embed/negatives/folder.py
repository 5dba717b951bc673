"""Mine a unified dataset folder into a new one: :func:`mine_negatives_folder` (``hf-unified-embed mine-negatives``)."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from hf_unified_embed.data.hub_layout import load_unified, read_card, source_notes, write_unified
from hf_unified_embed.data.layout_check import unified_tasks
from hf_unified_embed.errors import InputNotFoundError, SourceFormatError
from hf_unified_embed.negatives.candidates import ExternalCorpus
from hf_unified_embed.negatives.hard_negative_config import HardNegativeConfig
from hf_unified_embed.negatives.miner import MiningResult, mine_hard_negatives
from hf_unified_embed.utils.distributed_encode import ONE_PROCESS, EncodingProcesses
from hf_unified_embed.utils.locations import looks_local
from hf_unified_embed.utils.model_loading import load_model
from hf_unified_embed.utils.outputs import StagedOutput, check_output
from hf_unified_embed.utils.readers import decoding_error, first_undecodable_byte

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder, SentenceTransformer


def read_corpus(path: str | Path, *, include_title: bool = True) -> ExternalCorpus:
    """A BEIR corpus (``corpus.jsonl``, or a BEIR folder holding one) or a text file with one document per line.

    BEIR documents become ``"title text"`` when they have a title (as the ``beir`` source format
    builds them, so a positive and its corpus entry are the same text); empty documents are left out.
    """
    source = Path(path).expanduser()
    if source.is_dir():
        source = source / "corpus.jsonl"
    if not source.is_file():
        raise InputNotFoundError(
            f"corpus {source} does not exist (expected corpus.jsonl, a BEIR folder or a .txt file)"
        )
    try:
        if source.suffix.lower() == ".txt":
            texts = pa.array(source.read_text(encoding="utf-8").splitlines(), type=pa.string())
        else:
            # Only title and text are read: ids differ in type between corpora (strings, numbers).
            schema = pa.schema([("title", pa.string()), ("text", pa.string())])
            options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
            table = pa_json.read_json(source, parse_options=options)
            if "text" not in table.column_names:
                raise SourceFormatError(
                    f"no 'text' field; found {table.column_names}",
                    file=source,
                    expected='{"_id", "title", "text"} lines',
                )
            texts = pc.utf8_trim_whitespace(table.column("text").cast(pa.string())).combine_chunks()
            if include_title and "title" in table.column_names:
                titles = pc.utf8_trim_whitespace(
                    pc.fill_null(table.column("title").cast(pa.string()), "")
                ).combine_chunks()
                joined = pc.utf8_trim_whitespace(pc.binary_join_element_wise(titles, texts, " "))
                texts = pc.if_else(pc.greater(pc.utf8_length(titles), 0), joined, texts)
    except UnicodeDecodeError as error:
        raise decoding_error(source, error.encoding) from error
    except pa.ArrowInvalid as error:
        if first_undecodable_byte(source):
            raise decoding_error(source, "utf-8") from error
        raise SourceFormatError(f"cannot be read ({error})", file=source, expected="BEIR corpus JSON lines") from error
    texts = pc.utf8_trim_whitespace(texts.fill_null(""))
    return ExternalCorpus.from_texts(pc.filter(texts, pc.greater(pc.utf8_length(texts), 0)), source=str(path))


def mine_negatives_folder(
    data: str | Path,
    output: str | Path,
    model: SentenceTransformer | str,
    config: HardNegativeConfig | None = None,
    *,
    corpus: str | Path | None = None,
    cross_encoder: CrossEncoder | str | None = None,
    tasks: list[str] | None = None,
    split: str = "train",
    overwrite: bool = False,
    device: str | None = None,
    show_progress_bar: bool | None = None,
    processes: EncodingProcesses = ONE_PROCESS,
) -> tuple[Path, MiningResult]:
    """Mine the retrieval tasks of a unified folder (or Hub repo) ``data`` into the new folder ``output``.

    Every task of ``split`` is written (the unmined ones unchanged) with the input card's sources and
    a ``hard_negatives`` section per mined task (teacher, k, margins, counts dropped); a task without
    ``split`` is not written. :class:`MiningResult` says why each task was not mined (``skipped``) or not
    written (``left_out``). ``output`` is
    staged (:class:`~hf_unified_embed.utils.outputs.StagedOutput`) and checked before any model is loaded: it
    may not be, contain or lie inside ``data``, ``corpus`` or a model folder. Embeddings and every Arrow
    file (datasets' copy of the input too) live in its scratch folder. Models given by name are loaded on
    ``device``: a local path that does not exist is an :class:`~hf_unified_embed.errors.InputNotFoundError`,
    never a Hub lookup (:func:`~hf_unified_embed.utils.model_loading.load_model`).

    With ``processes`` (a launched run) every process calls this function alike and shares the encoding and
    the search (:func:`~hf_unified_embed.negatives.miner.mine_hard_negatives`); the main process alone stages
    and writes ``output``, the others check it as it does (an input error stops every process alike) and keep
    their slices of the embeddings in a temporary folder of their own.

    Returns:
        The output folder and the :class:`MiningResult`.

    Raises:
        OutputError: ``output`` may not be written (see :func:`~hf_unified_embed.utils.outputs.check_output`).
        InputNotFoundError: ``data``, ``corpus`` or a model folder does not exist.
    """
    # The models are inputs too: a mined dataset written into the teacher's folder would change the model.
    named = (
        data,
        corpus,
        model if isinstance(model, str) else None,
        cross_encoder if isinstance(cross_encoder, str) else None,
    )
    inputs = [path for path in named if path is not None and looks_local(path)]
    stage: StagedOutput | None = None
    if processes.is_main:
        stage = StagedOutput(output, overwrite=overwrite, inputs=inputs)
        written = stage.target
    else:
        written = check_output(output, overwrite=overwrite, inputs=inputs)
    with stage or contextlib.nullcontext(), contextlib.ExitStack() as cleanup:
        # The main process's scratch is in the staging folder; the others' is a folder of their own.
        scratch = (
            stage.scratch
            if stage is not None
            else Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix=f"mine-{processes.rank}-")))
        )
        # datasets' Arrow copy of every task lives in the scratch folder, not in the user's datasets cache.
        loaded = load_unified(data, split=split, cache_dir=str(scratch / "cache"))
        external = read_corpus(corpus) if corpus is not None else None
        names: dict[str, Any] = {
            "teacher_name": model if isinstance(model, str) else None,
            "cross_encoder_name": cross_encoder if isinstance(cross_encoder, str) else None,
        }
        from hf_unified_embed.training.bidirectional_transformer import load_sentence_transformer

        teacher = (
            load_model(model, "model", device=device, loader=load_sentence_transformer)
            if isinstance(model, str)
            else model
        )
        reranker = (
            load_model(cross_encoder, "cross_encoder", device=device, cross_encoder=True)
            if isinstance(cross_encoder, str)
            else cross_encoder
        )
        result = mine_hard_negatives(
            loaded,
            teacher,
            config,
            corpus=external,
            cross_encoder=reranker,
            task_names=tasks,
            scratch_dir=scratch,
            show_progress_bar=show_progress_bar,
            processes=processes,
            **names,
        )
        card = read_card(data)
        for task, splits in unified_tasks(card).items():
            if task not in result.tasks:
                result.left_out[task] = f"no {split} split; it has {', '.join(splits)}"
        notes = source_notes(card)
        for task, report in result.reports.items():
            notes.setdefault(task, {})["hard_negatives"] = report.to_notes()
        if stage is not None:
            write_unified(result.tasks, stage.path, notes=notes)
    # The output is in place before any process returns: whoever reads it after the run finds it whole.
    processes.barrier()
    return written, result
