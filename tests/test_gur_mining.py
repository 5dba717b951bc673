"""GUR pair mining: sentence splitting, the weighted LCS (suffix automaton vs DP), pair rules, the raw-text format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, get_source_format
from hf_unified_embed.gur_pairs import (
    CharWeights,
    Document,
    PairMiningConfig,
    SentenceBounds,
    iter_documents,
    mine_dataset,
    mine_document,
    mine_pairs,
    normalize,
    split_sentences,
    weighted_lcs,
    weighted_lcs_dp,
    weighted_lcs_sam,
)
from hf_unified_embed.gur_pairs.lcs import codes_of, score_pairs
from hf_unified_embed.schema import validate_unified

TOM_AND_JERRY = Document(
    "Tom is chasing Jerry. Jerry is chasing Tom. Spike is chasing Tom. Spike is chasing Jerry.", title=None
)
ALL_PAIRS = PairMiningConfig(window=10, repeat=10)


def pair_sets(document: Document, config: PairMiningConfig = ALL_PAIRS) -> set[frozenset[str]]:
    return {frozenset((p.query, p.positive)) for p in mine_document(document, config)}


def brute_force_lcs(a: str, b: str, weights: CharWeights) -> float:
    """Every common substring, weighed directly: the oracle for both compiled implementations."""
    weight = dict(zip(b, weights.of(codes_of(b)).tolist()))
    best = 0.0
    for i in range(len(a)):
        for j in range(i + 1, len(a) + 1):
            if a[i:j] in b:
                best = max(best, sum(weight[c] for c in a[i:j]))
    return best


# --- sentences -----------------------------------------------------------------------------------


def test_split_latin_keeps_abbreviations_and_numbers_whole() -> None:
    text = 'Tom and Jerry. Pi is 3.14, e.g. roughly! "Really?" she asked.\nA new line'
    assert list(split_sentences(text)) == [
        "Tom and Jerry.",
        "Pi is 3.14, e.g. roughly!",
        '"Really?" she asked.',
        "A new line",
    ]


def test_split_cjk_terminators_without_spaces() -> None:
    assert list(split_sentences("我爱北京。天安门很大！你呢？好；是的")) == [
        "我爱北京。",
        "天安门很大！",
        "你呢？",
        "好；",
        "是的",
    ]


def test_normalize_folds_width_case_and_whitespace() -> None:
    assert normalize("  ＳＰＩＫＥ\tis   Chasing ") == "spike is chasing"
    assert normalize("Spike", lowercase=False) == "Spike"


def test_sentence_bounds_validate() -> None:
    with pytest.raises(ValueError, match="min_length"):
        SentenceBounds(10, 5)


# --- weighted LCS --------------------------------------------------------------------------------


def test_paper_figure2_scores() -> None:
    # "spike is chasing " = 14 letters (0.3) + 3 spaces (0.0); "is chasing" = 9 letters.
    assert weighted_lcs("spike is chasing tom.", "spike is chasing jerry.") == pytest.approx(4.2)
    assert weighted_lcs("tom is chasing jerry.", "jerry is chasing tom.") == pytest.approx(2.7)


def test_cjk_characters_weigh_one() -> None:
    assert weighted_lcs("我爱北京天安门", "北京天安门很大") == pytest.approx(5.0)
    assert weighted_lcs("abc", "") == 0.0
    assert weighted_lcs("", "abc") == 0.0


def test_weights_must_be_non_negative() -> None:
    with pytest.raises(ValueError, match="letter"):
        CharWeights(letter=-0.1)


TEXT = st.text(alphabet="abcAB 1.中文字あ한", max_size=40)


@settings(max_examples=300, deadline=None)
@given(a=TEXT, b=TEXT, letter=st.sampled_from([0.0, 0.3, 1.0]), other=st.sampled_from([0.1, 0.5]))
def test_suffix_automaton_matches_brute_force(a: str, b: str, letter: float, other: float) -> None:
    weights = CharWeights(letter=letter, other=other, space=0.05)
    a_codes, b_codes = codes_of(a), codes_of(b)
    b_weights = weights.of(b_codes)
    expected = brute_force_lcs(a, b, weights)
    assert weighted_lcs_sam(a_codes, b_codes, b_weights) == pytest.approx(expected, abs=1e-9)
    assert weighted_lcs_dp(a_codes, b_codes, b_weights) == pytest.approx(expected, abs=1e-9)


@settings(max_examples=50, deadline=None)
@given(sentences=st.lists(TEXT, min_size=2, max_size=6))
def test_score_pairs_reuses_automata_correctly(sentences: list[str]) -> None:
    codes = [codes_of(s) for s in sentences]
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in codes])]).astype(np.int64)
    flat = np.concatenate(codes).astype(np.int32)
    left, right = np.triu_indices(len(sentences), k=1)
    weights = CharWeights()
    scores = score_pairs(flat, weights.of(flat), offsets, left.astype(np.int64), right.astype(np.int64))
    for k, (i, j) in enumerate(zip(left, right)):
        assert scores[k] == pytest.approx(weighted_lcs(sentences[i], sentences[j], weights), abs=1e-9)


# --- pair rules ----------------------------------------------------------------------------------


def test_paper_figure2_pairs() -> None:
    pairs = pair_sets(TOM_AND_JERRY)
    assert frozenset(("Spike is chasing Tom.", "Spike is chasing Jerry.")) in pairs
    assert frozenset(("Tom is chasing Jerry.", "Jerry is chasing Tom.")) not in pairs


def test_chinese_title_pairs_and_short_threshold() -> None:
    document = Document(
        "北京是中国的首都。北京有很多名胜古迹，比如故宫。故宫是明清两代的皇宫。上海是一个大城市。",
        title="北京的名胜古迹",
    )
    pairs = pair_sets(document)
    assert frozenset(("北京的名胜古迹", "北京有很多名胜古迹，比如故宫。")) in pairs  # title × content, LCS 4
    assert frozenset(("北京有很多名胜古迹，比如故宫。", "故宫是明清两代的皇宫。")) in pairs  # 故宫 = 2, short
    assert not any("上海是一个大城市。" in pair for pair in pairs)
    # The same two shared characters are not enough once both sentences are long (>= 16 characters).
    long_a, long_b = (
        "故宫位于北京中轴线的中心，是世界上现存规模最大的宫殿。",
        "在故宫里面收藏着一百八十多万件珍贵的文物和艺术品。",
    )
    assert weighted_lcs(long_a, long_b) == pytest.approx(2.0)
    assert not pair_sets(Document(f"{long_a}{long_b}"))


def test_repeat_limits_each_sentence_and_takes_heaviest_first() -> None:
    once = mine_document(TOM_AND_JERRY, PairMiningConfig(window=10, repeat=1))
    used = [s for p in once for s in (p.query, p.positive)]
    assert len(used) == len(set(used))
    assert max(p.score for p in once) == pytest.approx(4.3)  # "s chasing jerry." claims its sentences first
    assert len(mine_document(TOM_AND_JERRY, ALL_PAIRS)) > len(once)


def test_window_and_bounds() -> None:
    far = Document("Spike is chasing Tom. Nothing here matches. Rain falls down. Spike is chasing Jerry.")
    assert not pair_sets(far, PairMiningConfig(window=2))
    assert pair_sets(far, PairMiningConfig(window=3))
    assert not pair_sets(far, PairMiningConfig(window=3, bounds=SentenceBounds(5, 20)))


def test_streaming_deduplicates_across_documents_in_any_order() -> None:
    swapped = Document("Spike is chasing Jerry. Spike is chasing Tom.")
    pairs = list(mine_pairs([TOM_AND_JERRY, swapped, TOM_AND_JERRY], ALL_PAIRS))
    assert len(pairs) == len(mine_document(TOM_AND_JERRY, ALL_PAIRS))


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="repeat"):
        PairMiningConfig(repeat=0)
    with pytest.raises(ValueError, match="min_lcs"):
        PairMiningConfig(min_lcs=0)


# --- datasets and the raw-text format ------------------------------------------------------------


def write_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    records = [
        {"title": "Tom and Jerry", "text": TOM_AND_JERRY.text},
        {"text": "北京是中国的首都。北京有很多名胜古迹，比如故宫。故宫是明清两代的皇宫。"},
        {"title": None, "text": "Nothing in common. Totally different words."},
    ] * 3
    path = folder / "docs.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n", encoding="utf-8")
    return path


def test_mine_dataset_rows_follow_the_schema_and_are_deterministic(tmp_path: Path) -> None:
    path = write_corpus(tmp_path / "corpus")
    first = mine_dataset([path], cache_dir=str(tmp_path / "cache1"))
    second = mine_dataset([path], cache_dir=str(tmp_path / "cache2"))
    validate_unified(first)
    assert first.to_list() == second.to_list()
    assert set(first["task_type"]) == {"retrieval"}
    assert len(first) == len(list(mine_pairs(document for _, document in iter_documents([path]))))


@pytest.mark.multiprocess
def test_mine_dataset_num_proc_does_not_change_the_result(tmp_path: Path) -> None:
    path = write_corpus(tmp_path / "corpus")
    single = mine_dataset([path], cache_dir=str(tmp_path / "c1"))
    double = mine_dataset([path], num_proc=2, cache_dir=str(tmp_path / "c2"))
    assert single.to_list() == double.to_list()


def test_raw_text_format_reads_lines_jsonl_and_folders(tmp_path: Path) -> None:
    source = get_source_format("raw-text")
    lines = tmp_path / "docs.txt"
    lines.write_text(TOM_AND_JERRY.text + "\n" + "天安门很大。天安门在北京。\n", encoding="utf-8")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.txt").write_text("Spike is chasing Tom.\nSpike is chasing Jerry.", encoding="utf-8")
    jsonl = write_corpus(tmp_path / "json")
    for files in ([lines], [folder], [jsonl]):
        context = AdapterContext("gur")
        rows = list(source.rows(files, context, {"window": 5}))
        assert rows, files
        for location, row in rows:
            assert str(files[0]) in location
            assert row["task_type"] == "retrieval" and len(row["positives"]) == 1
    assert context.skipped["pair already mined from an earlier document"] > 0


def test_raw_text_errors_name_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine. fine."}\n{"body": "no text field"}\n', encoding="utf-8")
    with pytest.raises(SourceFormatError, match=r"bad\.jsonl:2.*'text'"):
        list(get_source_format("raw-text").rows([path], AdapterContext("gur"), {}))
    with pytest.raises(SourceFormatError, match="unknown option"):
        list(get_source_format("raw-text").rows([path], AdapterContext("gur"), {"windw": 2}))


def test_cli_build_handles_raw_text(tmp_path: Path) -> None:
    from datasets import load_dataset

    from hf_unified_embed.cli.main import main

    corpus = write_corpus(tmp_path / "corpus")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"sources:\n  - name: gur-pairs\n    format: raw-text\n    data_files: {corpus}\n    task_type: retrieval\n",
        encoding="utf-8",
    )
    assert main(["build", str(recipe), "-o", str(tmp_path / "out")]) == 0
    files = sorted((tmp_path / "out").rglob("*.parquet"))
    rows = load_dataset("parquet", data_files=[str(f) for f in files], split="train")
    assert len(rows) > 0 and set(rows["task"]) == {"gur-pairs"}
