"""Ids looked up bucket by bucket (``id_positions``, how a BEIR folder's links find their corpus and
queries lines) against one ``pyarrow.compute.index_in`` over all the ids: the same position for every id,
-1 for every other string, whatever the ids' bytes, lengths, neighbours or the buckets' number."""

from __future__ import annotations

from itertools import pairwise
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_unified_embed.data.adapters import id_positions
from hf_unified_embed.data.adapters.id_positions import IdPositions, id_buckets

#: Ids as users' files hold them: numbers, prefixes and suffixes, UUID-like, empty, long, any Unicode.
id_text = st.one_of(
    st.text(max_size=30),
    st.integers(0, 10**12).map(str),
    st.builds(
        lambda number, prefix, suffix: f"{prefix}{number}{suffix}",
        st.integers(0, 999),
        st.text(max_size=12),
        st.text(max_size=12),
    ),
    st.text(alphabet="ab", min_size=0, max_size=20),
)


def reference(values: pa.Array, ids: pa.Array) -> list[int]:
    return pc.fill_null(pc.index_in(values, value_set=ids), -1).to_pylist()


def sliced(texts: list[str | None], skip: int) -> pa.Array:
    """``texts`` as a slice of a longer array (its offsets do not start at 0)."""
    return pa.array(["x" * 9] * skip + texts + ["tail"], pa.string()).slice(skip, len(texts))


def chunked(array: pa.Array, cuts: list[int]) -> pa.ChunkedArray:
    """``array`` cut at ``cuts`` (taken within its length; repeated cuts give empty chunks)."""
    bounds = [0, *sorted(cut % (len(array) + 1) for cut in cuts), len(array)]
    return pa.chunked_array([array.slice(low, high - low) for low, high in pairwise(bounds)], pa.string())


@settings(max_examples=200, deadline=None)
@given(
    ids=st.lists(id_text, unique=True, max_size=40),
    others=st.lists(st.one_of(id_text, st.none()), max_size=10),
    picks=st.lists(st.integers(0, 10**6), max_size=60),
    bucket=st.integers(1, 7),
    skips=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    cuts=st.one_of(st.none(), st.lists(st.integers(0, 60), max_size=3)),
    value_cuts=st.one_of(st.none(), st.lists(st.integers(0, 80), max_size=4)),
)
def test_bucketed_lookups_find_what_one_table_finds(
    ids: list[str],
    others: list[str | None],
    picks: list[int],
    bucket: int,
    skips: tuple[int, int],
    cuts: list[int] | None,
    value_cuts: list[int] | None,
) -> None:
    """Ids as one array or, as a file's mapped ranges give them, a chunked array cut anywhere; the ids
    looked up as one array or, as the blocks of links read, a chunked array cut anywhere."""
    values = [ids[pick % len(ids)] for pick in picks] if ids else []
    values += others
    whole, looked_up = sliced(ids, skips[0]), sliced(values, skips[1])
    expected = reference(looked_up, whole)
    universe = whole if cuts is None else chunked(whole, cuts)
    if value_cuts is not None:
        looked_up = chunked(looked_up, value_cuts)
    with patch.object(id_positions, "_ONE_TABLE", 0), patch.object(id_positions, "BUCKET", bucket):
        lookup = IdPositions(universe)
        assert lookup(looked_up).tolist() == expected
        assert lookup(looked_up).tolist() == expected  # the ids' buckets, kept from the first lookup
    assert IdPositions(universe)(looked_up).tolist() == expected  # small files: one table


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(id_text, min_size=1, max_size=30), count=st.integers(1, 5000), skip=st.integers(0, 5))
def test_an_id_has_one_bucket_whatever_array_holds_it(texts: list[str], count: int, skip: int) -> None:
    together = id_buckets(sliced(texts, skip), count)
    alone = [int(id_buckets(pa.array([text], pa.string()), count)[0]) for text in texts]
    assert together.tolist() == alone
    assert (together < count).all()


def test_numbered_ids_spread_over_the_buckets() -> None:
    """A corpus's usual ids (a prefix and a number) fill every bucket within a few percent."""
    sizes = np.bincount(id_buckets(pa.array([f"doc{number}" for number in range(200_000)]), 16), minlength=16)
    assert sizes.min() > 0.9 * sizes.mean() and sizes.max() < 1.1 * sizes.mean()
