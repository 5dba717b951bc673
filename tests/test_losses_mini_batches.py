"""How the gradient-cached mode cuts batches: token budgets over length-sorted rows, and ``"auto"`` sizes.

The equality of every cached loss with its uncached self (rows and token budget, with and without dropout)
is in ``test_losses_cached.py``; gathering across two processes in ``test_losses_distributed.py``.
"""

from __future__ import annotations

import logging
from collections import namedtuple
from itertools import pairwise
from typing import Any

import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss

import hf_unified_embed.losses.gradcache.auto_mini_batch as auto_module
from hf_unified_embed.errors import HfUnifiedEmbedError, LossOptionError
from hf_unified_embed.losses import CoDiEmbSTSLoss, GURLoss, MultiPositiveInfoNCELoss, PearsonLoss
from hf_unified_embed.losses.gradcache.auto_mini_batch import PEAK_OVER_SAVED, AutoMiniBatch
from hf_unified_embed.losses.gradcache.minibatches import plan_minibatches
from tests.test_losses_cached import PAIRS, RETRIEVAL, STS_LABELS, assert_same, features_of, run

BUDGET = 2**20  # bytes: about 200 tokens of the tiny BERT's activations, so several mini-batches


@pytest.fixture
def tiny_model(tiny_model_path: str) -> SentenceTransformer:
    torch.manual_seed(0)
    return SentenceTransformer(tiny_model_path, device="cpu")


def lengths(features: list[dict[str, Any]]) -> list[list[int]]:
    """Per column, every row's real token count (the tokenizer pads on the right)."""
    return [column["attention_mask"].sum(dim=1).tolist() for column in features]


@pytest.mark.parametrize("budget", [30, 60, 120])
def test_token_budget_cuts_length_sorted_rows_within_the_budget(tiny_model: SentenceTransformer, budget: int) -> None:
    features = features_of(tiny_model, RETRIEVAL)
    per_column = lengths(features)
    plan = plan_minibatches(features, None, budget)
    seen: list[int] = []
    previous_longest = 0
    for index in range(len(plan)):
        rows = plan.batch_rows(index).tolist()
        seen += rows
        # Padded tokens of the mini-batch, summed over the columns: within the budget unless it is one row.
        padded = len(rows) * sum(max(column[row] for row in rows) for column in per_column)
        assert padded == plan.tokens[index]
        assert padded <= budget or len(rows) == 1
        # Embedded shortest first; each column trimmed to its longest row.
        longest = max(sum(column[row] for column in per_column) for row in rows)
        assert longest >= previous_longest
        previous_longest = longest
        for column, sliced, column_lengths in zip(features, plan.features(features, index), per_column):
            width = max(column_lengths[row] for row in rows)
            assert torch.equal(sliced["input_ids"], column["input_ids"][rows, :width])
            assert torch.equal(sliced["attention_mask"], column["attention_mask"][rows, :width])
    assert sorted(seen) == list(range(len(RETRIEVAL[0])))
    # Cut greedily (the cut runs longest first, the reverse of the embedding order): no mini-batch could
    # have taken the first row of the one cut after it.
    for index in range(1, len(plan)):
        rows = [*plan.batch_rows(index).tolist(), plan.batch_rows(index - 1).tolist()[0]]
        assert len(rows) * sum(max(column[row] for row in rows) for column in per_column) > budget


def test_a_row_longer_than_the_budget_is_a_mini_batch_of_its_own(tiny_model: SentenceTransformer) -> None:
    features = features_of(tiny_model, PAIRS)
    plan = plan_minibatches(features, None, 1)
    assert len(plan) == len(PAIRS[0]) and all(end - begin == 1 for begin, end in plan.ranges)


def test_rows_are_sorted_by_length_for_a_row_count_too(tiny_model: SentenceTransformer) -> None:
    features = features_of(tiny_model, PAIRS)
    totals = [sum(row) for row in zip(*lengths(features))]
    plan = plan_minibatches(features, 3, None)
    assert [end - begin for begin, end in plan.ranges] == [2, 3, 3]  # the remainder first, the longest rows last
    minibatches = [[totals[row] for row in plan.batch_rows(index).tolist()] for index in range(len(plan))]
    assert all(max(shorter) <= min(longer) for shorter, longer in pairwise(minibatches))
    order = [row for index in range(len(plan)) for row in plan.batch_rows(index).tolist()]
    # The concatenated mini-batch rows go back to batch order.
    restore = plan.batch_order()
    assert restore is not None
    assert torch.equal(torch.tensor(order)[restore], torch.arange(len(totals)))


def test_flattened_inputs_are_cut_in_batch_order_by_real_tokens() -> None:
    # DataCollatorWithFlattening's layout: one packed sequence, rows delimited by cu_seq_lens_q.
    row_lengths = [5, 3, 7, 2, 4]
    bounds = torch.tensor([0, *torch.tensor(row_lengths).cumsum(0).tolist()])
    column = {"input_ids": torch.arange(sum(row_lengths))[None], "cu_seq_lens_q": bounds, "max_length_q": 7}
    plan = plan_minibatches([column], None, 9)
    assert plan.order is None and plan.ranges == ((0, 2), (2, 4), (4, 5))
    assert plan.tokens == (8, 9, 4)
    assert plan.features([column], 1)[0]["input_ids"].tolist() == [[8, 9, 10, 11, 12, 13, 14, 15, 16]]


def test_token_budget_needs_token_counts() -> None:
    with pytest.raises(ValueError, match="attention_mask nor cu_seq_lens_q"):
        plan_minibatches([{"input_ids": torch.ones(4, 3, dtype=torch.long)}], None, 8)
    plan = plan_minibatches([{"input_ids": torch.ones(4, 3, dtype=torch.long)}], 3, None)
    assert plan.ranges == ((0, 3), (3, 4)) and plan.order is None


def test_the_replay_embeds_exactly_the_first_pass_mini_batches(tiny_model: SentenceTransformer) -> None:
    tiny_model.train()
    loss = MultiPositiveInfoNCELoss(tiny_model, mini_batch_num_tokens=60)
    calls: list[tuple[list[int], list[torch.Tensor], bool]] = []
    embed = loss.embed

    def recording(features: list[dict[str, Any]], context: Any, rows: Any) -> Any:
        calls.append((rows.tolist(), [column["input_ids"] for column in features], torch.is_grad_enabled()))
        return embed(features, context, rows)

    loss.embed = recording  # type: ignore[method-assign]
    output = loss(features_of(tiny_model, RETRIEVAL), None)
    first_pass = list(calls)
    # No graph but for the last (largest) mini-batch, which is kept for the backward pass.
    assert [grad for _, _, grad in first_pass] == [False] * (len(first_pass) - 1) + [True]
    calls.clear()
    output.backward()
    assert len(first_pass) > 2 and len(calls) == len(first_pass) - 1
    for (rows, ids, _), (replayed_rows, replayed_ids, grad) in zip(first_pass, calls):
        assert grad and rows == replayed_rows
        assert all(torch.equal(a, b) for a, b in zip(ids, replayed_ids))


def test_one_mini_batch_costs_one_forward_pass(tiny_model: SentenceTransformer) -> None:
    calls: list[bool] = []
    tiny_model.register_forward_hook(lambda *_: calls.append(torch.is_grad_enabled()))
    loss = MultiPositiveInfoNCELoss(tiny_model, mini_batch_num_tokens=10_000)
    loss(features_of(tiny_model, RETRIEVAL), None).backward()
    # The query column, then the merged document columns: one forward pass each (with the graph, kept for
    # the backward pass), none recomputed: the uncached loss's cost.
    assert calls == [True, True]


def test_embedding_gradients_end_dense(tiny_model: SentenceTransformer) -> None:
    # Every backward pass but the last sends sparse embedding gradients on the CPU; the last one is dense.
    loss = MultiPositiveInfoNCELoss(tiny_model, mini_batch_num_tokens=40)
    loss(features_of(tiny_model, RETRIEVAL), None).backward()
    embeddings = tiny_model[0].auto_model.embeddings
    for layer in (embeddings.word_embeddings, embeddings.position_embeddings, embeddings.token_type_embeddings):
        assert layer.weight.grad is not None and layer.weight.grad.layout == torch.strided
        assert not layer.sparse


@pytest.mark.parametrize("columns", [2, 3])
def test_token_budget_equals_sentence_transformers_cached_loss(tiny_model: SentenceTransformer, columns: int) -> None:
    # sentence-transformers' cached MNRL with its own token budget (real tokens per column, batch order) on
    # the same batch: the same loss and gradients, whatever the two cuts.
    tiny_model.eval()
    texts = RETRIEVAL[:columns]
    theirs = run(
        CachedMultipleNegativesRankingLoss(tiny_model, scale=20.0, mini_batch_num_tokens=40),
        tiny_model,
        texts,
        None,
        0,
    )
    ours = run(
        MultiPositiveInfoNCELoss(tiny_model, temperature=0.05, mini_batch_num_tokens=40), tiny_model, texts, None, 0
    )
    assert_same(ours, theirs)


def test_options_are_checked(tiny_model: SentenceTransformer) -> None:
    for option in ("mini_batch_size", "mini_batch_num_tokens"):
        for wrong in (0, -3, 2.5, True, "big", "AUTO"):
            with pytest.raises(LossOptionError, match=f"PearsonLoss: {option} must be .*got {wrong!r}"):
                PearsonLoss(tiny_model, **{option: wrong})
    with pytest.raises(LossOptionError, match="not both"):
        PearsonLoss(tiny_model, mini_batch_size=4, mini_batch_num_tokens=64)
    with pytest.raises(LossOptionError, match="not both"):
        PearsonLoss(tiny_model, mini_batch_size="auto", mini_batch_num_tokens="auto")
    with pytest.raises(LossOptionError, match="set one of them to 'auto'"):
        PearsonLoss(tiny_model, mini_batch_size=4, mini_batch_memory_budget=BUDGET)
    for wrong in (0, -1, 1.5):
        with pytest.raises(LossOptionError, match="positive number of bytes"):
            PearsonLoss(tiny_model, mini_batch_size="auto", mini_batch_memory_budget=wrong)  # type: ignore[arg-type]
    assert issubclass(LossOptionError, HfUnifiedEmbedError) and issubclass(LossOptionError, ValueError)
    loss = PearsonLoss(tiny_model, mini_batch_num_tokens=64)
    assert loss.uses_gradient_cache
    assert loss.get_config_dict() == {"mini_batch_size": None, "mini_batch_num_tokens": 64}


def test_auto_is_deterministic_logged_and_kept(
    tiny_model: SentenceTransformer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    features = features_of(tiny_model, RETRIEVAL)
    choices = []
    for _ in range(2):
        loss = MultiPositiveInfoNCELoss(tiny_model, mini_batch_num_tokens="auto", mini_batch_memory_budget=BUDGET)
        with caplog.at_level(logging.INFO, logger="hf_unified_embed.losses.gradcache.auto_mini_batch"):
            loss([dict(column) for column in features], None).backward()
        choices.append(loss.auto_mini_batch)
    first = choices[0]
    assert first == choices[1]  # the same budget, the same measurement and choice
    assert first is not None and first.mini_batch_size is None and first.memory_budget == BUDGET
    tokens = int(BUDGET / (first.bytes_per_token * PEAK_OVER_SAVED))
    assert first.mini_batch_num_tokens == tokens
    assert len(plan_minibatches(features, None, tokens)) > 1
    messages = [record.getMessage() for record in caplog.records]
    assert messages.count(f"MultiPositiveInfoNCELoss: {first.describe()}") == 2
    assert f"chose {tokens} tokens per mini-batch" in messages[0]
    assert loss.get_config_dict()["mini_batch_chosen"] == tokens

    # Kept for the rest of the run: a later batch, of other lengths, is not measured again.
    def no_second_probe(*args: Any) -> None:
        raise AssertionError("measured again")

    monkeypatch.setattr(auto_module, "_bytes_per_token", no_second_probe)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hf_unified_embed.losses.gradcache.auto_mini_batch"):
        loss(features_of(tiny_model, [column[:5] for column in RETRIEVAL]), None).backward()
    assert loss.auto_mini_batch is choices[1] and not caplog.records


def test_auto_trains_exactly_like_its_choice_given_by_hand(tiny_model: SentenceTransformer) -> None:
    # With dropout on: the probe forks the random state, so the run draws the same masks as with the chosen
    # budget given by hand; and the loss and gradients equal the uncached ones without dropout.
    tiny_model.train()
    auto = MultiPositiveInfoNCELoss(tiny_model, mini_batch_num_tokens="auto", mini_batch_memory_budget=BUDGET)
    automatic = run(auto, tiny_model, RETRIEVAL, None, seed=7)
    assert auto.auto_mini_batch is not None
    chosen = auto.auto_mini_batch.mini_batch_num_tokens
    by_hand = run(MultiPositiveInfoNCELoss(tiny_model, mini_batch_num_tokens=chosen), tiny_model, RETRIEVAL, None, 7)
    for name, value in by_hand[0].items():
        assert torch.equal(automatic[0][name], value)
    for name, gradient in by_hand[1].items():
        assert torch.equal(automatic[1][name], gradient), name

    tiny_model.eval()
    for option in ("mini_batch_size", "mini_batch_num_tokens"):
        cached = MultiPositiveInfoNCELoss(tiny_model, **{option: "auto", "mini_batch_memory_budget": BUDGET})
        assert_same(
            run(cached, tiny_model, RETRIEVAL, None, 0),
            run(MultiPositiveInfoNCELoss(tiny_model), tiny_model, RETRIEVAL, None, 0),
        )


def test_auto_rows_fit_rows_of_the_longest_length(tiny_model: SentenceTransformer) -> None:
    # Rows are sized for every column at max_seq_length, the longest any later batch can bring.
    features = features_of(tiny_model, PAIRS)
    chosen: list[AutoMiniBatch] = []
    for budget in (BUDGET // 8, BUDGET, 8 * BUDGET):
        loss = CoDiEmbSTSLoss(tiny_model, mini_batch_size="auto", mini_batch_memory_budget=budget)
        loss([dict(column) for column in features], torch.tensor(STS_LABELS))
        assert loss.auto_mini_batch is not None
        chosen.append(loss.auto_mini_batch)
    for choice in chosen:
        assert choice.mini_batch_num_tokens is None
        row_tokens = 2 * tiny_model.max_seq_length
        expected = int(choice.memory_budget / (choice.bytes_per_token * PEAK_OVER_SAVED)) // row_tokens
        assert choice.mini_batch_size == max(1, expected)
    assert (
        chosen[0].mini_batch_size == 1
        and chosen[0].mini_batch_size <= chosen[1].mini_batch_size < chosen[2].mini_batch_size
    )  # type: ignore[operator]


def test_auto_measures_what_the_mini_batch_saves_for_backward(tiny_model: SentenceTransformer) -> None:
    # The probe's bytes per token on the longest row, times a whole mini-batch's padded tokens, predicts the
    # bytes autograd saves when that mini-batch is embedded (counted here over the whole forward pass).
    features = features_of(tiny_model, PAIRS)
    loss = GURLoss(tiny_model, mini_batch_size="auto", mini_batch_memory_budget=BUDGET)
    masked, targets = loss._masked_columns(features)
    per_token = auto_module._bytes_per_token(loss, masked, targets)
    plan = plan_minibatches(masked, 4, None)
    index = len(plan) - 1
    for index in range(len(plan)):
        saved = auto_module._saved_activation_bytes(
            loss, plan.features(masked, index), targets, plan.batch_rows(index)
        )
        assert 0.8 * saved <= per_token * plan.tokens[index] <= 1.25 * saved, (index, saved, per_token)


def test_auto_default_budget_is_the_free_memory(
    tiny_model: SentenceTransformer, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = namedtuple("memory", "available")
    trainable = sum(p.numel() * p.element_size() for p in tiny_model.parameters())
    monkeypatch.setattr(auto_module.psutil, "virtual_memory", lambda: memory(100 * 2**20 + 3 * trainable))
    loss = MultiPositiveInfoNCELoss(tiny_model, mini_batch_num_tokens="auto")
    loss(features_of(tiny_model, RETRIEVAL), None)
    assert loss.auto_mini_batch is not None
    assert loss.auto_mini_batch.memory_budget == int(0.8 * 100 * 2**20)
    assert "available RAM" in loss.auto_mini_batch.budget_source
    assert "mini_batch_memory_budget" not in loss.get_config_dict()

    monkeypatch.setattr(auto_module.psutil, "virtual_memory", lambda: memory(trainable))
    with pytest.raises(LossOptionError, match="give mini_batch_memory_budget"):
        MultiPositiveInfoNCELoss(tiny_model, mini_batch_size="auto")(features_of(tiny_model, RETRIEVAL), None)


def test_auto_without_a_memory_source_asks_for_a_budget(tiny_model: SentenceTransformer) -> None:
    # A device whose free memory cannot be read (here: the meta device) needs mini_batch_memory_budget.
    loss = MultiPositiveInfoNCELoss(tiny_model, mini_batch_num_tokens="auto")
    with pytest.raises(LossOptionError, match="cannot read the free memory of a 'meta' device"):
        auto_module._default_budget(loss, torch.device("meta"))
