"""Encoding under a bar that counts texts gives what one ``encode`` call gives; a long CPU suite says how long.

* ``encode_with_progress`` slices the texts longest first into whole batches: for any texts and batch size
  the result equals one call, for every output form ``encode`` has (tensor, array, list);
* ``run_suite`` draws an ``encoding N texts`` bar and its metrics do not change with it;
* before a suite of many texts on a CPU one stderr line gives the texts and the expected duration.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_unified_embed.evaluation import run_suite
from hf_unified_embed.evaluation.suite_run import ESTIMATE_MIN_TEXTS
from hf_unified_embed.utils.encoding_progress import describe_duration, encode_with_progress
from tests._evaluation_helpers import all_kinds_suite, write_evaluation_files


def _fake_encoder(form: str, batch_size: int, calls: list[list[str]]) -> Any:
    """Embeds a text as (length, code of its first character); records each call; checks whole sorted batches."""

    def encode(texts: Sequence[str]) -> Any:
        texts = list(texts)
        calls.append(texts)
        rows = [[float(len(text)), float(ord(text[0])) if text else -1.0] for text in texts]
        if form == "tensor":
            return torch.tensor(rows).reshape(len(rows), 2)
        if form == "array":
            return np.array(rows, dtype=np.float32).reshape(len(rows), 2)
        return [torch.tensor(row) for row in rows]

    return encode


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(st.text(max_size=12), max_size=60),
    batch_size=st.integers(1, 8),
    form=st.sampled_from(["tensor", "array", "list"]),
)
def test_encoding_in_slices_equals_one_call(texts: list[str], batch_size: int, form: str) -> None:
    calls: list[list[str]] = []
    expected = _fake_encoder(form, batch_size, [])(texts)
    got = encode_with_progress(_fake_encoder(form, batch_size, calls), texts, batch_size=batch_size)
    if form == "list":
        assert len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(got, expected))
    else:
        assert type(got) is type(expected) and got.shape == expected.shape
        assert (got == expected).all()
    # Every call but the last is whole batches, and the texts arrive longest first, as encode sorts them.
    assert all(len(call) % batch_size == 0 for call in calls[:-1])
    lengths = [len(text) for call in calls for text in call]
    if len(calls) > 1:
        assert lengths == sorted(lengths, reverse=True)
    assert sorted(text for call in calls for text in call) == sorted(texts)


def test_no_bar_is_one_call() -> None:
    calls: list[list[str]] = []
    encode_with_progress(
        _fake_encoder("tensor", 2, calls), ["a", "bb", "ccc"] * 10, batch_size=2, show_progress_bar=False
    )
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (0.2, "1 s"),
        (40, "40 s"),
        (89.4, "89 s"),
        (95, "2 min"),
        (60 * 42, "42 min"),
        (60 * 135, "2 h 15 min"),
        (7200, "2 h"),
    ],
)
def test_durations_read_as_people_say_them(seconds: float, said: str) -> None:
    assert describe_duration(seconds) == said


def test_suite_shows_a_bar_of_texts_and_keeps_its_metrics(
    tiny_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sentence_transformers import SentenceTransformer

    root = write_evaluation_files(tmp_path)
    suite = all_kinds_suite(root)
    suite["diagnostics"] = False
    suite["batch_size"] = 2
    model = SentenceTransformer(tiny_model_path, device="cpu")
    quiet = run_suite(model, suite, show_progress_bar=False)
    assert "encoding" not in capsys.readouterr().err
    shown = run_suite(model, suite, show_progress_bar=True)
    bars = capsys.readouterr().err
    assert re.search(r"encoding \d+ texts", bars), bars[-2000:]
    for entry in quiet.entries:
        assert shown[entry.name].metrics == pytest.approx(entry.metrics, abs=1e-6), entry.name


def _long_sts_suite(root: Path, pairs: int) -> dict[str, Any]:
    lines = [
        f"{(i % 6) * 1.0:.1f}\tsentence number {i} about topic {i % 7}\tanother text {i} on {i % 5}\n"
        for i in range(pairs)
    ]
    (root / "long.tsv").write_text("".join(lines), encoding="utf-8")
    entry = {"name": "long", "kind": "sts", "source": "semeval-sts", "data_files": "long.tsv"}
    return {"data_root": str(root), "diagnostics": False, "evaluations": [entry]}


def test_a_long_suite_on_cpu_says_how_long_before_it_runs(
    tiny_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(tiny_model_path, device="cpu")
    suite = _long_sts_suite(tmp_path, ESTIMATE_MIN_TEXTS // 2 + 10)  # two distinct sentences a pair
    run_suite(model, suite, show_progress_bar=True)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("evaluate:")]
    assert len(lines) == 1, err[-2000:]
    assert re.fullmatch(r"evaluate: 1 set, 1,0\d\d texts to encode: about \d+ (s|min)\b.*", lines[0]), lines[0]
    # Before the first bar of the run: the line comes first.
    assert err.index("evaluate:") < err.index("encoding ")

    run_suite(model, suite, show_progress_bar=False)  # a caller without bars gets no estimate either
    assert "evaluate:" not in capsys.readouterr().err
    run_suite(model, _long_sts_suite(tmp_path, 50), show_progress_bar=True)  # a short suite: none measured
    assert "evaluate:" not in capsys.readouterr().err
