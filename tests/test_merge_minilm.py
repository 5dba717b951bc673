"""Real-model merges: MiniLM fine-tuned a few steps on STS-B and on WikiQA, merged and compared."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from hf_unified_embed.merge import merge_models

pytestmark = pytest.mark.real_model

SENTENCES = ["A man is playing a flute.", "how are glacier caves formed?", "Stocks fell sharply on Monday."]


def _stsb_pairs(data: Path, count: int) -> tuple[list[str], list[str], torch.Tensor]:
    rows = list(
        csv.reader(
            (data / "sts/stsbenchmark/sts-train.csv").open(encoding="utf-8"), delimiter="\t", quoting=csv.QUOTE_NONE
        )
    )[:count]
    return [r[5] for r in rows], [r[6] for r in rows], torch.tensor([float(r[4]) / 5 for r in rows])


def _wikiqa_pairs(data: Path, count: int) -> tuple[list[str], list[str]]:
    rows = csv.DictReader(
        (data / "ir/wikiqa/train.tsv").open(encoding="utf-8"), delimiter="\t", quoting=csv.QUOTE_NONE
    )
    positives = [(r["Question"], r["Sentence"]) for r in rows if r["Label"] == "1"][:count]
    return [q for q, _ in positives], [a for _, a in positives]


def _fine_tune(minilm_path: str, target: Path, task: str, data: Path, steps: int = 2) -> Path:
    """A couple of AdamW steps: CoSENT on STS-B pairs or in-batch-negatives InfoNCE on WikiQA pairs."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss, MultipleNegativesRankingLoss

    torch.manual_seed(0)
    model = SentenceTransformer(minilm_path, device="cpu")
    model.max_seq_length = 32  # short inputs keep the steps cheap; the weights still move
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if task == "sts":
        left, right, labels = _stsb_pairs(data, 8 * steps)
        loss = CoSENTLoss(model)
    else:
        left, right = _wikiqa_pairs(data, 8 * steps)
        labels = torch.zeros(len(left))
        loss = MultipleNegativesRankingLoss(model)
    for step in range(steps):
        batch = slice(8 * step, 8 * (step + 1))
        features = [model.preprocess(left[batch]), model.preprocess(right[batch])]
        loss(features, labels[batch]).backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save(str(target))
    return target


@pytest.fixture(scope="module")
def fine_tuned(minilm_path: str, shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("minilm-runs")
    return _fine_tune(minilm_path, root / "sts", "sts", shared_data), _fine_tune(
        minilm_path, root / "ir", "ir", shared_data
    )


def test_merged_minilm_equals_directly_averaged_state_dict(fine_tuned: tuple[Path, Path], tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    out = merge_models(list(fine_tuned), "soup", tmp_path / "soup", show_progress=False)
    merged = SentenceTransformer(str(out), device="cpu")
    states = [SentenceTransformer(str(path), device="cpu").state_dict() for path in fine_tuned]
    assert any(not torch.equal(states[0][k], states[1][k]) for k in states[0]), "the fine-tunes should differ"
    direct = SentenceTransformer(str(fine_tuned[0]), device="cpu")
    direct.load_state_dict({k: (v + states[1][k]) / 2 if v.is_floating_point() else v for k, v in states[0].items()})
    expected = direct.encode(SENTENCES, convert_to_tensor=True)
    torch.testing.assert_close(merged.encode(SENTENCES, convert_to_tensor=True), expected, atol=1e-6, rtol=0)


def test_same_result_as_sentence_transformers_merge(fine_tuned: tuple[Path, Path], tmp_path: Path) -> None:
    pytest.importorskip("mergekit")  # the dev extra installs mergekit>=0.1.5, which sentence-transformers needs
    from sentence_transformers import SentenceTransformer

    ours = SentenceTransformer(
        str(merge_models(list(fine_tuned), "soup", tmp_path / "soup", show_progress=False)), device="cpu"
    )
    theirs = SentenceTransformer.merge([str(path) for path in fine_tuned], method="linear", device="cpu")
    our_state, their_state = ours.state_dict(), theirs.state_dict()
    assert our_state.keys() == their_state.keys()
    for name in our_state:
        torch.testing.assert_close(our_state[name], their_state[name], atol=1e-6, rtol=0)
    torch.testing.assert_close(
        ours.encode(SENTENCES, convert_to_tensor=True),
        theirs.encode(SENTENCES, convert_to_tensor=True),
        atol=1e-6,
        rtol=0,
    )
