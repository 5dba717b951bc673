"""Instructions as per-task prompts, and pooling that really leaves the instruction tokens out."""

from __future__ import annotations

import pytest
import torch
from datasets import DatasetDict
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Normalize

from hf_unified_embed.training import exclude_instructions_from_pooling, prompts_from_unified
from tests._training_helpers import unified_dataset, unified_row


def test_prompts_per_task_and_kind_skip_empty_instructions() -> None:
    tasks = DatasetDict(
        qa=unified_dataset(
            [
                unified_row(
                    "qa", f"q{i}", ["p"], query_instruction="Represent the question:", document_instruction="Doc: "
                )
                for i in range(3)
            ]
        ),
        sts=unified_dataset([unified_row("sts", "a", ["b"], task_type="sts", positive_scores=[0.5])]),
        only_query=unified_dataset([unified_row("only_query", "a", ["b"], query_instruction="Q: ")]),
    )
    assert prompts_from_unified(tasks) == {
        "qa": {"query": "Represent the question: ", "positive": "Doc: ", "negative": "Doc: "},
        "only_query": {"query": "Q: "},
    }


def test_instructions_that_differ_within_a_task_are_refused() -> None:
    rows = [unified_row("qa", "q", ["p"], query_instruction=text) for text in ("A: ", "B: ")]
    with pytest.raises(ValueError, match=r"task 'qa', field 'query_instruction'.*2 different values"):
        prompts_from_unified({"qa": unified_dataset(rows)})


def test_pooling_excludes_instruction_tokens(tiny_model_path: str) -> None:
    model = exclude_instructions_from_pooling(SentenceTransformer(tiny_model_path))
    transformer, tokenizer = model[0], model.tokenizer
    prompt, text = "Represent the question for retrieving answers: ", "who wrote the origin of species"

    embedding = model.encode(text, prompt=prompt, convert_to_tensor=True)

    full = tokenizer(prompt + text, return_tensors="pt")
    text_ids = tokenizer(text)["input_ids"][1:]  # the text's tokens and the closing [SEP], without [CLS]
    assert full["input_ids"][0, -len(text_ids) :].tolist() == text_ids  # the prompt boundary is clean
    with torch.no_grad():
        tokens = transformer({key: value for key, value in full.items()})["token_embeddings"][0]
    manual = tokens[-len(text_ids) :].mean(dim=0)
    torch.testing.assert_close(embedding, manual, atol=1e-5, rtol=1e-5)

    # The instruction still conditions the text tokens through attention, and pooling it would differ.
    with torch.no_grad():
        assert not torch.allclose(embedding, model.encode(text, convert_to_tensor=True), atol=1e-4)
        model.set_pooling_include_prompt(True)
        assert not torch.allclose(embedding, model.encode(text, prompt=prompt, convert_to_tensor=True), atol=1e-4)


def test_the_setting_is_saved_with_the_model(tiny_model_path: str, tmp_path) -> None:
    exclude_instructions_from_pooling(SentenceTransformer(tiny_model_path)).save(str(tmp_path))
    assert SentenceTransformer(str(tmp_path))[1].include_prompt is False


def test_a_model_without_pooling_is_refused() -> None:
    with pytest.raises(ValueError, match="no Pooling module"):
        exclude_instructions_from_pooling(SentenceTransformer(modules=[Normalize()]))
