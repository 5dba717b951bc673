"""GURLoss: hump-geometric span masking, Eq. 1–3 against a float64 transcription, MLM head handling, training."""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer

from hf_unified_embed.losses import GURLoss
from hf_unified_embed.losses.gur import MLM_HEAD_FILE, hump_geometric, sample_span_mask


@pytest.fixture(scope="module")
def tiny_model(tiny_model_path: str) -> SentenceTransformer:
    return SentenceTransformer(tiny_model_path, device="cpu")


def test_hump_geometric_is_eq3() -> None:
    probs = hump_geometric(0.66, 3, 10)
    raw = [0.66 ** abs(k - 3) for k in range(1, 11)]
    assert probs.tolist() == pytest.approx([r / sum(raw) for r in raw])
    assert int(probs.argmax()) + 1 == 3


def test_span_mask_covers_the_ratio_of_real_tokens_only() -> None:
    maskable = torch.zeros(3, 40, dtype=torch.bool)
    maskable[0, 1:39] = True
    maskable[1, 1:11] = True  # a padded row
    maskable[2, 1:3] = True  # a two-token row still gets one masked token
    chosen = sample_span_mask(maskable, 0.15, hump_geometric(0.66, 3, 10), np.random.default_rng(0))
    assert not (chosen & ~maskable).any()
    assert chosen.sum(1).tolist() == [round(0.15 * 38), round(0.15 * 10), 1]


def test_mask_features_excludes_padding_special_and_prompt_tokens(tiny_model: SentenceTransformer) -> None:
    loss = GURLoss(tiny_model, mask_ratio=0.5)
    features = tiny_model.preprocess(["a much longer sentence with many different words in it", "short one"])
    features["prompt_length"] = torch.tensor(3)
    masked, targets = loss.mask_features(features, np.random.default_rng(0))
    predicted = targets != -100
    assert not (predicted & ~features["attention_mask"].bool()).any()
    assert not predicted[:, :3].any()
    assert not torch.isin(features["input_ids"][predicted], loss.special_ids).any()
    assert torch.equal(targets[predicted], features["input_ids"][predicted])
    assert torch.equal(masked["input_ids"][~predicted], features["input_ids"][~predicted])


def test_masked_tokens_follow_the_80_10_10_rule(tiny_model: SentenceTransformer) -> None:
    loss = GURLoss(tiny_model, mask_ratio=0.5)
    features = tiny_model.preprocess(["a much longer sentence with many different words in it"] * 300)
    masked, targets = loss.mask_features(features, np.random.default_rng(0))
    predicted = targets != -100
    replaced = masked["input_ids"][predicted]
    assert (replaced == loss.mask_token_id).float().mean().item() == pytest.approx(0.8, abs=0.03)
    assert (replaced == features["input_ids"][predicted]).float().mean().item() == pytest.approx(0.1, abs=0.03)


def transcribed_contrastive(a: torch.Tensor, b: torch.Tensor, tau: float) -> torch.Tensor:
    """Eq. 2 term by term, averaged over both directions (CLIP)."""
    n = a.size(0)

    def sim(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x @ y) / (x.norm() * y.norm())

    total = torch.zeros((), dtype=torch.float64)
    for i in range(n):
        for first, second in ((a, b), (b, a)):
            denominator = sum(torch.exp(sim(first[i], second[j]) / tau) for j in range(n))
            total = total - torch.log(torch.exp(sim(first[i], second[i]) / tau) / denominator)
    return total / (2 * n)


def test_contrastive_part_matches_eq2_in_float64(tiny_model: SentenceTransformer) -> None:
    loss = GURLoss(tiny_model, temperature=0.1)
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(5, 8, dtype=torch.float64, generator=generator, requires_grad=True)
    b = torch.randn(5, 8, dtype=torch.float64, generator=generator, requires_grad=True)
    ours = loss.compute_loss_from_embeddings([a, b])["contrastive"]
    theirs = transcribed_contrastive(a, b, 0.1)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(torch.autograd.grad(ours, (a, b)), torch.autograd.grad(theirs, (a, b)))


def test_mlm_part_matches_a_transcription_in_float64(tiny_model: SentenceTransformer) -> None:
    loss = GURLoss(tiny_model).double()
    tiny_model.double()
    try:
        head = loss.mlm_head
        embeddings = tiny_model[0].auto_model.get_input_embeddings().weight
        hidden = torch.randn(6, embeddings.size(1), dtype=torch.float64, requires_grad=True)
        targets = torch.randint(0, embeddings.size(0), (6,))
        ours = loss.masked_lm_loss(hidden, targets)
        transformed = F.layer_norm(
            F.gelu(hidden @ head.dense.weight.T + head.dense.bias),
            (hidden.size(1),),
            head.layer_norm.weight,
            head.layer_norm.bias,
            head.layer_norm.eps,
        )
        logits = transformed @ embeddings.T + head.bias  # decoder tied to the input embeddings
        theirs = -torch.stack([logits[i].log_softmax(-1)[targets[i]] for i in range(6)]).mean()
        torch.testing.assert_close(ours, theirs)
        parameters = (hidden, head.dense.weight, embeddings)
        torch.testing.assert_close(torch.autograd.grad(ours, parameters), torch.autograd.grad(theirs, parameters))
    finally:
        tiny_model.float()


def test_forward_returns_both_parts_and_backpropagates(tiny_model: SentenceTransformer) -> None:
    loss = GURLoss(tiny_model, mlm_weight=0.5)
    first = tiny_model.preprocess(["Spike is chasing Tom.", "北京是中国的首都。", "a b c d e f g"])
    second = tiny_model.preprocess(["Spike is chasing Jerry across the garden.", "北京有很多名胜古迹。", "c d e"])
    torch.manual_seed(0)
    parts = loss([first, second], None)
    assert set(parts) == {"mlm", "contrastive"}
    torch.manual_seed(0)
    again = loss([first, second], None)
    torch.testing.assert_close(parts["mlm"], again["mlm"])  # masking follows torch's seed
    sum(parts.values()).backward()
    assert loss.mlm_head.dense.weight.grad is not None
    assert tiny_model[0].auto_model.get_input_embeddings().weight.grad is not None
    with pytest.raises(ValueError, match="exactly 2 input columns"):
        loss([first], None)


def test_head_starts_from_a_pretrained_mlm_head(tmp_path: Path, minilm_path: str) -> None:
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    pretrained = BertForMaskedLM(config)
    pretrained.save_pretrained(tmp_path / "mlm")
    tokenizer.save_pretrained(tmp_path / "mlm")
    transformer = Transformer(str(tmp_path / "mlm"))
    model = SentenceTransformer(modules=[transformer, Pooling(16, "mean")], device="cpu")
    loss = GURLoss(model)
    torch.testing.assert_close(loss.mlm_head.dense.weight, pretrained.cls.predictions.transform.dense.weight)
    torch.testing.assert_close(loss.mlm_head.bias, pretrained.cls.predictions.bias)


def test_without_a_pretrained_head_it_warns_and_save_mlm_head_round_trips(
    tiny_model_path: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = SentenceTransformer(tiny_model_path, device="cpu")
    with caplog.at_level(logging.WARNING, logger="hf_unified_embed.losses.gur"):
        loss = GURLoss(model)
    assert "no pretrained MLM head" in caplog.text
    model.save(str(tmp_path / "saved"))
    assert not (tmp_path / "saved" / MLM_HEAD_FILE).exists()  # not saved with the model by default
    assert loss.save_mlm_head(tmp_path / "saved") == tmp_path / "saved" / MLM_HEAD_FILE
    reloaded = GURLoss(SentenceTransformer(str(tmp_path / "saved"), device="cpu"))
    torch.testing.assert_close(reloaded.mlm_head.dense.weight, loss.mlm_head.dense.weight)
    assert "mlm_head" not in dict(SentenceTransformer(str(tmp_path / "saved")).named_modules())


def test_config_and_citation(tiny_model: SentenceTransformer) -> None:
    loss = GURLoss(tiny_model)
    assert loss.get_config_dict() == {
        "mlm_weight": 1.0,
        "temperature": 0.1,
        "mask_ratio": 0.15,
        "span_p": 0.66,
        "span_mode": 3,
        "max_span": 10,
        "mask_false_negatives": True,
        "mini_batch_size": None,
    }
    assert "Generate to Understand for Representation" in loss.citation
    with pytest.raises(ValueError, match="span_mode"):
        GURLoss(tiny_model, span_mode=11)


def wikiqa_documents(shared_data: Path, limit: int) -> list:
    """WikiQA candidate sentences grouped by question: each group is a summary of one Wikipedia page."""
    from hf_unified_embed.gur_pairs import Document

    groups: dict[str, list[str]] = {}
    with open(shared_data / "ir" / "wikiqa" / "train.tsv", encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            if row["Sentence"]:
                groups.setdefault(row["Question"], []).append(row["Sentence"].strip())
    return [Document("\n".join(sentences), location=question) for question, sentences in list(groups.items())[:limit]]


@pytest.mark.real_model
def test_trainer_run_on_minilm_lowers_both_parts(minilm_path: str, shared_data: Path, tmp_path: Path) -> None:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    from hf_unified_embed.gur_pairs import PairMiningConfig, mine_pairs

    pairs = list(mine_pairs(wikiqa_documents(shared_data, 600), PairMiningConfig(window=4)))
    assert len(pairs) >= 200
    dataset = Dataset.from_dict({"anchor": [p.query for p in pairs], "positive": [p.positive for p in pairs]})
    model = SentenceTransformer(minilm_path, device="cpu")
    model.max_seq_length = 32
    loss = GURLoss(model)
    probe = dataset.select(range(32))

    def probe_loss() -> dict[str, float]:
        torch.manual_seed(1234)
        with torch.no_grad():
            parts = loss([model.preprocess(probe["anchor"]), model.preprocess(probe["positive"])], None)
        return {name: value.item() for name, value in parts.items()}

    before = probe_loss()
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=20,
        per_device_train_batch_size=16,
        learning_rate=2e-4,
        warmup_steps=2,
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        seed=0,
        use_cpu=True,
    )
    SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss).train()
    after = probe_loss()
    assert after["mlm"] < before["mlm"]
    assert after["contrastive"] < before["contrastive"]
    assert all(math.isfinite(v) for v in after.values())
