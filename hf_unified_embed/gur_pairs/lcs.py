"""Weighted longest common substring, GUR's pair rule (GUR §III-B step 3, Figure 2).

A character's weight says how much evidence of shared content it carries: one CJK character is a
word-like unit (1.0), a Latin letter about a third of one (0.3), digits and punctuation little
(0.1), whitespace nothing (0.0, see ``docs/gur.md``). The score of two sentences is the largest
total weight of a substring they share.

Two implementations over integer code arrays (one code point per element):

* :func:`weighted_lcs_sam` — a suffix automaton of the first sentence, then one walk over the
  second: linear time per pair. Weights are non-negative, so among the common substrings ending at
  a position of ``b`` the longest one (which the walk tracks) also weighs the most, and the weighted
  optimum is read off the walk with prefix sums of ``b``'s weights.
* :func:`weighted_lcs_dp` — the textbook O(n·m) dynamic programme, the reference and the baseline
  of ``bench/gur.py``.

:func:`score_pairs` scores many candidate pairs of one document in a single compiled call and
builds each automaton once for all partners of its sentence.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from hf_unified_embed.errors import shown
from hf_unified_embed.utils.stack import require

# Compiled with numba, which only the gur extra installs (with llvmlite, ~200 MB).
numba = require("numba", extra="gur", feature="GUR's pair mining")

__all__ = [
    "CharWeights",
    "codes_of",
    "score_pairs",
    "weighted_lcs",
    "weighted_lcs_dp",
    "weighted_lcs_sam",
]

CodeArray = npt.NDArray[np.int32]
WeightArray = npt.NDArray[np.float64]

# Character classes, indexes into CharWeights.as_array().
_SPACE, _OTHER, _LETTER, _CJK = 0, 1, 2, 3
# Han (with extensions A and the compatibility block), kana and Hangul syllables; Han extensions B+
# live above the BMP and are handled in _category.
_CJK_RANGES = ((0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF), (0xF900, 0xFAFF))


@dataclass(frozen=True)
class CharWeights:
    """Per-class character weights of the weighted LCS (GUR's official code: CJK 1.0, letters 0.3, rest 0.1)."""

    cjk: float = 1.0
    letter: float = 0.3
    other: float = 0.1
    space: float = 0.0

    def __post_init__(self) -> None:
        for name in ("cjk", "letter", "other", "space"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0 and np.isfinite(value)):
                # The suffix-automaton shortcut (longest match = heaviest match) needs weights >= 0.
                raise ValueError(f"CharWeights.{name} must be a finite number >= 0, got {shown(value)}")

    def as_array(self) -> WeightArray:
        return np.array([self.space, self.other, self.letter, self.cjk], dtype=np.float64)

    def of(self, codes: CodeArray) -> WeightArray:
        """The weight of every code point in ``codes``."""
        return self.as_array()[_categories(codes)]


def _category(code: int) -> int:
    if any(low <= code <= high for low, high in _CJK_RANGES) or 0x20000 <= code <= 0x3FFFF:
        return _CJK
    char = chr(code)
    if char.isspace():
        return _SPACE
    if char.isalpha():
        return _LETTER
    return _OTHER


@lru_cache(maxsize=1)
def _bmp_categories() -> npt.NDArray[np.uint8]:
    return np.array([_category(code) for code in range(0x10000)], dtype=np.uint8)


def _categories(codes: CodeArray) -> npt.NDArray[np.uint8]:
    table = _bmp_categories()
    categories = table[np.minimum(codes, 0xFFFF)]
    for index in np.flatnonzero(codes > 0xFFFF):
        categories[index] = _category(int(codes[index]))
    return categories


def codes_of(text: str) -> CodeArray:
    """The code points of ``text`` as an int32 array (UTF-32 decoding, no Python loop)."""
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int32)


@numba.njit(cache=True)
def _hash_slot(state: int, code: int, mask: int) -> int:
    return ((state * 1000003) ^ (code * 2654435761)) & mask


@numba.njit(cache=True)
def _build_automaton(a):  # type: ignore[no-untyped-def]
    """Suffix automaton of ``a``: (length, link, slot_state, slot_code, slot_edge, edge_target, mask).

    Transitions live in an open-addressing hash table keyed by (state, code), so the alphabet can be
    all of Unicode; each state also keeps a linked list of its edges, which cloning copies.
    """
    n = a.shape[0]
    max_states = 2 * n + 1
    max_edges = 3 * n + 4
    length = np.zeros(max_states, dtype=np.int32)
    link = np.full(max_states, -1, dtype=np.int32)
    first_edge = np.full(max_states, -1, dtype=np.int32)
    edge_code = np.empty(max_edges, dtype=np.int32)
    edge_target = np.empty(max_edges, dtype=np.int32)
    edge_next = np.empty(max_edges, dtype=np.int32)
    capacity = 1
    while capacity < 2 * max_edges:
        capacity *= 2
    mask = capacity - 1
    slot_state = np.full(capacity, -1, dtype=np.int32)
    slot_code = np.empty(capacity, dtype=np.int32)
    slot_edge = np.empty(capacity, dtype=np.int32)
    n_edges = 0
    n_states = 1
    last = 0

    for i in range(n):
        code = a[i]
        current = n_states
        n_states += 1
        length[current] = length[last] + 1
        p = last
        # Walk suffix links adding the transition p --code--> current where it is missing.
        while p != -1:
            slot = _hash_slot(p, code, mask)
            found = -1
            while slot_state[slot] != -1:
                if slot_state[slot] == p and slot_code[slot] == code:
                    found = slot_edge[slot]
                    break
                slot = (slot + 1) & mask
            if found != -1:
                break
            edge_code[n_edges] = code
            edge_target[n_edges] = current
            edge_next[n_edges] = first_edge[p]
            first_edge[p] = n_edges
            slot_state[slot] = p
            slot_code[slot] = code
            slot_edge[slot] = n_edges
            n_edges += 1
            p = link[p]
        if p == -1:
            link[current] = 0
        else:
            slot = _hash_slot(p, code, mask)
            while not (slot_state[slot] == p and slot_code[slot] == code):
                slot = (slot + 1) & mask
            q = edge_target[slot_edge[slot]]
            if length[p] + 1 == length[q]:
                link[current] = q
            else:
                clone = n_states
                n_states += 1
                length[clone] = length[p] + 1
                link[clone] = link[q]
                edge = first_edge[q]
                while edge != -1:
                    c = edge_code[edge]
                    edge_code[n_edges] = c
                    edge_target[n_edges] = edge_target[edge]
                    edge_next[n_edges] = first_edge[clone]
                    first_edge[clone] = n_edges
                    s = _hash_slot(clone, c, mask)
                    while slot_state[s] != -1:
                        s = (s + 1) & mask
                    slot_state[s] = clone
                    slot_code[s] = c
                    slot_edge[s] = n_edges
                    n_edges += 1
                    edge = edge_next[edge]
                # Redirect p's ancestors' transitions on `code` from q to the clone.
                while p != -1:
                    s = _hash_slot(p, code, mask)
                    found = -1
                    while slot_state[s] != -1:
                        if slot_state[s] == p and slot_code[s] == code:
                            found = slot_edge[s]
                            break
                        s = (s + 1) & mask
                    if found == -1 or edge_target[found] != q:
                        break
                    edge_target[found] = clone
                    p = link[p]
                link[q] = clone
                link[current] = clone
        last = current
    return length, link, slot_state, slot_code, slot_edge, edge_target, mask


@numba.njit(cache=True)
def _walk(automaton, b, b_weights):  # type: ignore[no-untyped-def]
    length, link, slot_state, slot_code, slot_edge, edge_target, mask = automaton
    # Walk b through the automaton, tracking the longest suffix of b[:j+1] that occurs in a.
    prefix = np.zeros(b.shape[0] + 1, dtype=np.float64)
    for j in range(b.shape[0]):
        prefix[j + 1] = prefix[j] + b_weights[j]
    state = 0
    matched = 0
    best = 0.0
    for j in range(b.shape[0]):
        code = b[j]
        while True:
            s = _hash_slot(state, code, mask)
            target = -1
            while slot_state[s] != -1:
                if slot_state[s] == state and slot_code[s] == code:
                    target = edge_target[slot_edge[s]]
                    break
                s = (s + 1) & mask
            if target != -1:
                state = target
                matched += 1
                break
            if state == 0:
                matched = 0
                break
            state = link[state]
            matched = length[state]
        if matched > 0:
            weight = prefix[j + 1] - prefix[j + 1 - matched]
            if weight > best:
                best = weight
    return best


@numba.njit(cache=True)
def weighted_lcs_sam(a: CodeArray, b: CodeArray, b_weights: WeightArray) -> float:
    """Weighted LCS of ``a`` and ``b`` with a suffix automaton of ``a``: O(|a| + |b|) expected."""
    if a.shape[0] == 0 or b.shape[0] == 0:
        return 0.0
    return _walk(_build_automaton(a), b, b_weights)


@numba.njit(cache=True)
def weighted_lcs_dp(a: CodeArray, b: CodeArray, b_weights: WeightArray) -> float:
    """Weighted LCS by the O(|a|·|b|) dynamic programme over common-suffix weights."""
    best = 0.0
    previous = np.zeros(b.shape[0] + 1, dtype=np.float64)
    current = np.zeros(b.shape[0] + 1, dtype=np.float64)
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            if a[i] == b[j]:
                current[j + 1] = previous[j] + b_weights[j]
                if current[j + 1] > best:
                    best = current[j + 1]
            else:
                current[j + 1] = 0.0
        previous, current = current, previous
    return best


@numba.njit(cache=True)
def score_pairs(
    codes: CodeArray,
    weights: WeightArray,
    offsets: npt.NDArray[np.int64],
    left: npt.NDArray[np.int64],
    right: npt.NDArray[np.int64],
) -> WeightArray:
    """Weighted LCS of sentences ``left[k]`` and ``right[k]`` for every candidate ``k``.

    Sentence ``s`` is ``codes[offsets[s]:offsets[s + 1]]`` (weights aligned with codes). Candidates
    sharing a ``left`` sentence should be adjacent: the automaton of ``left`` is built per run of
    equal values (building it is the larger half of the work).
    """
    scores = np.empty(left.shape[0], dtype=np.float64)
    k = 0
    while k < left.shape[0]:
        end = k
        while end < left.shape[0] and left[end] == left[k]:
            end += 1
        a = codes[offsets[left[k]] : offsets[left[k] + 1]]
        if a.shape[0] == 0:
            scores[k:end] = 0.0
        else:
            automaton = _build_automaton(a)
            for index in range(k, end):
                start, stop = offsets[right[index]], offsets[right[index] + 1]
                scores[index] = _walk(automaton, codes[start:stop], weights[start:stop]) if stop > start else 0.0
        k = end
    return scores


def weighted_lcs(a: str, b: str, weights: CharWeights | None = None) -> float:
    """The weighted longest common substring of two strings (compared as given; see ``normalize``)."""
    b_codes = codes_of(b)
    return float(weighted_lcs_sam(codes_of(a), b_codes, (weights or CharWeights()).of(b_codes)))
