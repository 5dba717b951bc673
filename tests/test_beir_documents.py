"""The parts of a BEIR join share its parsed corpus (``beir_documents``): each byte range is parsed once, by
whichever part claims it; the others read it; two real processes side by side get what one whole read gets;
a range that failed or whose reader died is an error, never a wait without end."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.data.adapters import beir_documents
from hf_unified_embed.data.adapters.beir_documents import read_documents
from hf_unified_embed.data.source_formats import SourceFormatError


def write_corpus(path: Path, count: int, broken: int | None = None) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for index in range(count):
            record = {"_id": f"d{index}", "title": f"T{index % 3}" if index % 2 else "", "text": f"text {index} é"}
            if index == broken:
                del record["_id"]
            handle.write(json.dumps(record) + "\n")
    return path


def contents(path: Path, scratch: Path, **options: object) -> tuple[list[str], list[str]]:
    documents = read_documents(path, True, scratch, **options)  # type: ignore[arg-type]
    backwards = np.arange(len(documents))[::-1]  # across the ranges, against their order
    return documents.ids.to_pylist(), documents.take(backwards).to_pylist()


def _read_part(path: str, scratch: str, shared: str, index: int, count: int, queue: multiprocessing.Queue) -> None:
    queue.put((index, contents(Path(path), Path(scratch), shared=Path(shared), part=(index, count))))


@pytest.mark.parametrize("count", [2, 3])
def test_parts_in_processes_side_by_side_read_what_one_whole_read_reads(tmp_path: Path, count: int) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl", 5000)
    (tmp_path / "whole").mkdir()
    expected = contents(corpus, tmp_path / "whole")
    shared = tmp_path / "shared"
    shared.mkdir()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    processes = []
    for index in range(count):
        (tmp_path / f"own{index}").mkdir()
        process = context.Process(
            target=_read_part, args=(str(corpus), str(tmp_path / f"own{index}"), str(shared), index, count, queue)
        )
        process.start()
        processes.append(process)
    results = dict(queue.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert all(results[index] == expected for index in range(count))
    # One claim and one parsed folder per range, whichever part parsed it.
    assert len(list(shared.glob("*.claim"))) == count
    assert len([path for path in shared.iterdir() if path.is_dir()]) == count
    assert not list(shared.glob("*.partial")) and not list(shared.glob("*.failed"))


def test_parts_one_after_another_reuse_the_ranges(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl", 300)
    (tmp_path / "whole").mkdir()
    expected = contents(corpus, tmp_path / "whole")
    shared = tmp_path / "shared"
    shared.mkdir()
    for index in range(3):
        (tmp_path / f"own{index}").mkdir()
        assert contents(corpus, tmp_path / f"own{index}", shared=shared, part=(index, 3)) == expected
    assert len(list(shared.glob("*.claim"))) == 3  # the first part parsed all three ranges


# Texts (never blank: the corpus refuses those) around the 12 bytes a string view holds inline, with
# multi-byte characters, and texts that end the file (fewer than 12 bytes after their start).
_TEXTS = st.lists(
    st.text(st.sampled_from("ab \u00e9\u20ac\U0001f600"), max_size=20).map(lambda text: f"<{text}>"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=_TEXTS,
    count=st.integers(1, 3),
    window=st.sampled_from([64, 2**30]),
    draws=st.lists(st.integers(0, 10**6), max_size=60),
)
def test_take_gives_the_texts_at_any_positions(
    texts: list[str], count: int, window: int, draws: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``take`` (string views over the mapped ranges, cast to strings) against the texts themselves: any
    positions, repeated and out of order, over one range or several, and a range seen through several
    windows (64 bytes here, so texts start in one window and end in the next)."""
    monkeypatch.setattr(beir_documents, "_WINDOW", window)
    positions = np.array([draw % len(texts) for draw in draws], dtype=np.int64)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        corpus = root / "corpus.jsonl"
        corpus.write_text(
            "".join(json.dumps({"_id": f"d{index}", "text": text}) + "\n" for index, text in enumerate(texts)),
            encoding="utf-8",
        )
        (root / "own").mkdir()
        (root / "shared").mkdir()
        options = {"shared": root / "shared", "part": (0, count)} if count > 1 else {}
        documents = read_documents(corpus, False, root / "own", **options)  # type: ignore[arg-type]
        taken = documents.take(positions)
        assert taken.type == "string"
        assert taken.to_pylist() == [texts[position] for position in positions]


def test_a_range_that_fails_fails_every_part(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl", 400, broken=350)  # in the second of two ranges
    shared = tmp_path / "shared"
    shared.mkdir()
    for index in range(2):
        (tmp_path / f"own{index}").mkdir()
        with pytest.raises(SourceFormatError):
            read_documents(corpus, True, tmp_path / f"own{index}", shared=shared, part=(index, 2))
    assert len(list(shared.glob("*.failed"))) == 1


def test_a_range_whose_reader_died_is_an_error_not_a_wait(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl", 400)
    shared = tmp_path / "shared"
    shared.mkdir()
    (tmp_path / "own").mkdir()
    read_documents(corpus, True, tmp_path / "own", shared=shared, part=(0, 2))  # parses both ranges
    claimed = next(path for path in shared.glob("*-1-of-2.claim"))
    folder = shared / claimed.name.removesuffix(".claim")
    folder.rename(shared / "gone")  # as if the range was claimed and never parsed
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    claimed.write_text(dead.stdout.strip())
    (tmp_path / "own2").mkdir()
    with pytest.raises(RuntimeError, match="ended without a result"):
        read_documents(corpus, True, tmp_path / "own2", shared=shared, part=(1, 2))
