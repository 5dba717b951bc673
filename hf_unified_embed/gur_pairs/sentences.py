"""Sentence splitting and normalisation for pair mining (GUR §III-B steps 1–2).

Latin text ends a sentence at ``.``, ``!`` or ``?`` (with any closing quotes or brackets) followed by
whitespace and a character that is not a lower-case letter, so "e.g. this" and "3.14" stay whole.
CJK text ends one at 。！？； (and their half-width forms ｡), with or without a following space.
Line breaks always end a sentence.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["SentenceBounds", "clean", "normalize", "split_sentences"]

_CLOSERS = "\"'”’)\\]」』）》】"
_CJK_END = re.compile(rf"[。！？；｡]+[{_CLOSERS}]*\s*")
_LATIN_END = re.compile(rf"[.!?]+[{_CLOSERS}]*\s+")
_LINE_END = re.compile(r"\s*\n\s*")
_SPACES = re.compile(r"\s+")


def clean(text: str) -> str:
    """Whitespace runs collapsed to one space and stripped: the text written to the dataset."""
    return _SPACES.sub(" ", text).strip()


def normalize(text: str, lowercase: bool = True) -> str:
    """The comparison key of a sentence: NFKC (full-width forms folded), case-folded, whitespace cleaned."""
    text = unicodedata.normalize("NFKC", text)
    return clean(text.casefold() if lowercase else text)


def _boundaries(text: str) -> list[int]:
    ends = {match.end() for match in _CJK_END.finditer(text)}
    ends.update(match.end() for match in _LINE_END.finditer(text))
    # A Latin terminator only ends a sentence when the next word does not start in lower case.
    ends.update(m.end() for m in _LATIN_END.finditer(text) if m.end() < len(text) and not text[m.end()].islower())
    return sorted(ends)


def split_sentences(text: str) -> Iterator[str]:
    """The cleaned, non-empty sentences of ``text`` in order, terminators kept."""
    start = 0
    for end in [*_boundaries(text), len(text)]:
        sentence = clean(text[start:end])
        if sentence:
            yield sentence
        start = end


@dataclass(frozen=True)
class SentenceBounds:
    """Length bounds (in characters of the cleaned sentence) for a sentence to take part in pairs."""

    min_length: int = 5
    max_length: int = 512

    def __post_init__(self) -> None:
        if not 1 <= self.min_length <= self.max_length:
            raise ValueError(
                f"sentence bounds need 1 <= min_length <= max_length, got {self.min_length}..{self.max_length}"
            )

    def accepts(self, sentence: str) -> bool:
        return self.min_length <= len(sentence) <= self.max_length
