"""An instruction must leave room for the text (issue 37, item 4).

Before: a task whose query instruction was 35 tokens with ``max_seq_length: 32`` trained with exit 0 and
every query embedded to the same vector; ``train --check`` accepted a document instruction of 1M words.
Now ``train`` / ``train --check`` (through the collator's prompts) and ``mine-negatives`` refuse an
instruction that leaves fewer than ``max(8, max_seq_length // 4)`` tokens, naming task, field, tokens and
``max_seq_length``; ``validate`` warns on long instructions.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from hf_unified_embed.cli.main import main
from hf_unified_embed.errors import InputError
from hf_unified_embed.training.instruction_fit import check_instruction_room

WORDS = [
    "represent",
    "the",
    "question",
    "for",
    "retrieving",
    "supporting",
    "passages",
    "about",
    "history",
    "science",
    "and",
    "art",
]


@pytest.fixture(scope="module")
def tokenizer(minilm_path: str) -> object:
    return AutoTokenizer.from_pretrained(minilm_path)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.integers(0, 60), max_seq_length=st.integers(8, 96), seed=st.integers(0, 1000))
def test_refused_exactly_when_the_instruction_leaves_too_little_room(
    tokenizer: object, words: int, max_seq_length: int, seed: int
) -> None:
    instruction = " ".join(WORDS[(seed + i) % len(WORDS)] for i in range(words)) + ": "
    tokens = len(tokenizer(instruction)["input_ids"])  # type: ignore[operator]  # the reference: every token
    needed = max(8, max_seq_length // 4)
    refused = max_seq_length - tokens < needed
    if refused:
        with pytest.raises(InputError) as error:
            check_instruction_room(tokenizer, instruction, max_seq_length, "task 't', field 'query_instruction'")
        message = str(error.value)
        assert message.startswith("task 't', field 'query_instruction': the instruction takes ")
        assert f"max_seq_length {max_seq_length}" in message and "\n" not in message
        assert (f"takes {tokens} tokens" in message) or ("takes at least" in message and tokens >= max_seq_length)
    else:
        check_instruction_room(tokenizer, instruction, max_seq_length, "task 't', field 'query_instruction'")


def test_a_million_word_instruction_is_refused_in_well_under_a_second(tokenizer: object) -> None:
    start = time.monotonic()
    with pytest.raises(InputError, match=r"takes at least \d+ tokens of max_seq_length 128"):
        check_instruction_room(tokenizer, "word " * 1_000_000, 128, "task 't', field 'document_instruction'")
    assert time.monotonic() - start < 1.0


def _folder(tmp_path: Path, query_instruction: str, document_instruction: str = "") -> Path:
    rows = [{"query": f"question {i} about topic {i}", "positives": [f"answer {i} about topic {i}"]} for i in range(8)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    source = {
        "name": "qa",
        "format": "unified",
        "data_files": "rows.jsonl",
        "task_type": "retrieval",
        "query_instruction": query_instruction,
        "document_instruction": document_instruction,
    }
    (tmp_path / "build.yaml").write_text(yaml.safe_dump({"sources": [source]}))
    assert _run(["build", str(tmp_path / "build.yaml"), "-o", str(tmp_path / "unified")])[0] == 0
    return tmp_path / "unified"


def _run(argv: list[str]) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, [line for line in err.getvalue().split("\n") if line.strip() and "\r" not in line]  # bars aside


@pytest.mark.parametrize("check", [True, False])
def test_train_refuses_an_instruction_that_erases_the_queries(
    tmp_path: Path, tiny_model_path: str, check: bool
) -> None:
    # 35 tokens with MiniLM's WordPiece, the case: at max_seq_length 32 nothing of the query is left.
    instruction = (
        "Represent this question about world history, politics and culture of the ancient mediterranean "
        "for retrieving the encyclopedia passages that answer it well and completely: "
    )
    unified = _folder(tmp_path, instruction)
    recipe = {
        "base_model": tiny_model_path,
        "data": {"path": str(unified)},
        "losses": {"retrieval": "MultiPositiveInfoNCELoss"},
        "max_seq_length": 32,
        "training_args": {"max_steps": 1, "per_device_train_batch_size": 4},
        "output_dir": str(tmp_path / "model"),
    }
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(recipe))
    code, lines = _run(["train", str(tmp_path / "train.yaml"), *(["--check"] if check else [])])
    assert code == 2 and len(lines) == 1, lines
    assert "task 'qa', field 'query_instruction': the instruction takes" in lines[0]
    assert "of max_seq_length 32" in lines[0]
    assert not (tmp_path / "model").exists()


def test_mine_negatives_refuses_it_before_embedding(tmp_path: Path, tiny_model_path: str) -> None:
    unified = _folder(tmp_path, "query: ", "word " * 300)
    code, lines = _run(["mine-negatives", str(unified), "-o", str(tmp_path / "mined"), "--model", tiny_model_path])
    assert code == 2 and len(lines) == 1, lines
    assert "field 'document_instruction': the instruction takes at least" in lines[0]
    assert not (tmp_path / "mined").exists()


def test_validate_warns_on_a_long_instruction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    unified = _folder(tmp_path, "word " * 100)
    capsys.readouterr()
    assert main(["validate", str(unified)]) == 0
    err = capsys.readouterr().err
    assert "warning: task 'qa' (train), field 'query_instruction': the instruction has 100 words" in err


def _suite(tmp_path: Path, unified: Path, evaluator: dict[str, str]) -> Path:
    entry = {"name": "ret", "kind": "retrieval", "unified": str(unified), "task": "qa", "split": "train"}
    (tmp_path / "suite.yaml").write_text(
        yaml.safe_dump({"name": "s", "evaluations": [{**entry, "evaluator": evaluator}]})
    )
    return tmp_path / "suite.yaml"


@pytest.mark.parametrize("option", ["query_prompt", "corpus_prompt"])
def test_evaluate_refuses_a_suite_prompt_that_leaves_no_room(
    tmp_path: Path, tiny_model_path: str, option: str
) -> None:
    """Before: a suite prompt longer than max_seq_length was scored (every text the same vector), exit 0."""
    suite = _suite(tmp_path, _folder(tmp_path, "query: "), {option: "word " * 1_000_000})
    code, lines = _run(["evaluate", tiny_model_path, str(suite), "--no-diagnostics", "-o", str(tmp_path / "out")])
    assert code == 2 and len(lines) == 1, lines
    assert f"entry 'ret', field 'evaluator.{option}': the instruction takes at least" in lines[0]
    assert not (tmp_path / "out").exists()


def test_train_check_refuses_the_suite_prompt_before_training(tmp_path: Path, tiny_model_path: str) -> None:
    unified = _folder(tmp_path, "query: ")
    recipe = {
        "base_model": tiny_model_path,
        "data": {"path": str(unified)},
        "losses": {"retrieval": "MultiPositiveInfoNCELoss"},
        "max_seq_length": 32,
        "evaluation": str(_suite(tmp_path, unified, {"query_prompt": "word " * 30})),
        "training_args": {"max_steps": 1, "per_device_train_batch_size": 4},
        "output_dir": str(tmp_path / "model"),
    }
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(recipe))
    code, lines = _run(["train", str(tmp_path / "train.yaml"), "--check"])
    assert code == 2 and len(lines) == 1, lines
    assert (
        "evaluation: entry 'ret', field 'evaluator.query_prompt': the instruction takes at least 32 tokens" in lines[0]
    )
    assert "of max_seq_length 32" in lines[0]


def test_a_long_instruction_is_cut_in_the_dataset_and_model_cards(tmp_path: Path) -> None:
    """Before: a 1M-word instruction (5 MB) was copied whole into the dataset card's task table (a 5 MB card)."""
    from types import SimpleNamespace

    from hf_unified_embed.data import load_unified
    from hf_unified_embed.recipe.model_card import card_data

    unified = _folder(tmp_path, "query: ", "word " * 1_000_000)
    card = (unified / "README.md").read_text()
    assert len(card) < 20_000
    assert "… (5,000,000 characters; the rest is left out of the card)" in card
    recipe = SimpleNamespace(data=SimpleNamespace(path=str(unified)), model_name=None, hub=None, base_model_id=None)
    tasks = load_unified(unified)
    (summary,) = card_data(recipe, tasks).unified_tasks  # type: ignore[arg-type]
    assert summary["document_instruction"].endswith("… (5,000,000 characters; the rest is left out of the card)")
    assert len(summary["document_instruction"]) < 600
