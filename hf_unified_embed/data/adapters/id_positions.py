"""Where each of many string ids stands in a file's ids, looked up bucket by bucket.

pyarrow's ``index_in`` hashes its whole value set on every call. For the 4M passage ids of a 10M-row BEIR
folder that is a table of ~200 MB, built afresh for each block of links, and 1.4 s of each 1.8 s call: a
table that large misses the caches on every insert. :class:`IdPositions` splits a file's ids once into
buckets of about :data:`BUCKET` ids by a hash of their bytes (:func:`id_buckets`), and a lookup splits its
ids the same way and calls ``index_in`` bucket by bucket: one bucket's table (~12 MB) is held at a time
and fits the caches (4M ids among 4M: 1.1 s against 1.6-1.9 s, ~100 MB less; bench/build.py). A file of at
most :data:`_ONE_TABLE` ids is one bucket, looked up with one ``index_in`` as before: below ~1M ids the
table fits the caches anyway, and splitting only costs (400k ids: 0.1 s -> 0.2 s).

Both sides stay in the chunks they came in (a file's mapped ranges, the blocks of links as read): each
bucket's ids are taken chunk by chunk (:func:`_take`), so no lookup joins either side into one copy (4M
ids in 8 blocks among 4M: the lookup's peak 162 -> 77 MB, as fast).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Ids per bucket of a lookup: 250k gave the fastest lookups of 4M ids among 4M (1M: as slow as one table).
BUCKET = 250_000
#: Ids of a file up to which it is one bucket.
_ONE_TABLE = 1_000_000
#: Bytes of an id read into its hash from each of three places: its start, its middle and its end.
_WINDOW = 8
#: Ids hashed at a time: bounds the arrays of the hash (a few bytes an id each) whatever the file's size.
_HASHED = 1 << 18
#: Odd multipliers (of splitmix64 and xxHash) spreading each window's and the length's bits.
_MIX = [np.uint64(value) for value in (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9)]
_LENGTH_MIX = np.uint64(0xBF58476D1CE4E5B9)


def _inside(window: int) -> np.ndarray:
    """For each id length up to :data:`_WINDOW` (longer ones are all inside), the bits of a window that
    hold the id's bytes (little-endian: byte ``j`` is bits ``8j`` to ``8j + 7``)."""
    masks = []
    for length in range(_WINDOW + 1):
        within = _within(window, np.array([length]))[0]
        masks.append(sum(0xFF << 8 * byte for byte in range(_WINDOW) if 0 <= byte + within < length))
    return np.array(masks, dtype=np.uint64)


def _within(window: int, lengths: np.ndarray) -> np.ndarray:
    """Where window 0 (start), 1 (middle) or 2 (end) of each id starts, from the id's first byte."""
    if window == 0:
        return np.zeros_like(lengths)
    return (lengths - _WINDOW) >> 1 if window == 1 else lengths - _WINDOW  # >> 1: floor(x / 2), also below 0


#: By window and id length (at most :data:`_WINDOW`), the bits of the window inside the id.
_INSIDE = [_inside(window) for window in range(3)]


class IdPositions:
    """The position of each looked-up id in ``ids`` (unique strings: a corpus's or queries' ``_id``s).

    The buckets of ``ids`` are found on the first lookup and kept (4 bytes an id), so a file's ids are
    hashed into buckets once however many blocks of links are looked up in them.
    """

    def __init__(self, ids: pa.Array | pa.ChunkedArray) -> None:
        self.count = 1 if len(ids) <= _ONE_TABLE else max(1, -(-len(ids) // BUCKET))
        # ``index_in`` takes one array: a file of one table is joined (a copy of at most _ONE_TABLE ids),
        # buckets are taken from the chunks where they lie (a mapped file's ids stay in the page cache).
        self.ids = _one_array(ids) if self.count == 1 else ids
        self._members: list[np.ndarray] | None = None

    def __call__(self, values: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The position in ``ids`` of each of ``values`` (int32; -1 where absent): blocks of links as they
        were read (a chunked array) are looked up where they lie, never joined into one copy."""
        if self.count == 1:
            return _index_in(values, self.ids)
        if self._members is None:
            buckets = id_buckets(self.ids, self.count)
            self._members = [np.flatnonzero(buckets == number).astype(np.int32) for number in range(self.count)]
        positions = np.full(len(values), -1, dtype=np.int32)
        buckets = id_buckets(values, self.count)
        for number, members in enumerate(self._members):
            # A pass over the buckets per bucket, not a sort: no array of 8 bytes a value is held.
            which = np.flatnonzero(buckets == number)
            if len(which) and len(members):
                local = _index_in(_take(values, which), _take(self.ids, members))
                found = local >= 0
                positions[which[found]] = members[local[found]]
        return positions


def id_buckets(ids: pa.Array | pa.ChunkedArray, count: int) -> np.ndarray:
    """A bucket in ``range(count)`` for each of ``ids`` (``string``), from its length and three windows of
    its bytes: equal ids share a bucket, whatever array they are in.

    Ids usually differ at their end (numbers) or all over (hashes, UUIDs), or in the middle of a shared
    prefix and suffix: a window in each place spreads them all. Ids alike in all three only crowd a bucket,
    which costs memory (its table is larger), never a wrong position.
    """
    if isinstance(ids, pa.ChunkedArray):
        return np.concatenate([np.zeros(0, dtype=np.uint16), *(id_buckets(chunk, count) for chunk in ids.chunks)])
    if len(ids) == 0:
        return np.zeros(0, dtype=np.uint16)
    offsets = np.frombuffer(ids.buffers()[1], dtype=np.int32, count=len(ids) + 1, offset=4 * ids.offset)
    data_buffer = ids.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, dtype=np.uint8)
    buckets = np.empty(len(ids), dtype=np.uint16)
    for first in range(0, len(ids), _HASHED):
        bounds = offsets[first : first + _HASHED + 1].astype(np.int64)
        low, high = int(bounds[0]), int(bounds[-1])
        # The ids' bytes with a window's width of zeros on each side, so every window lies inside.
        padded = np.zeros(high - low + 2 * _WINDOW, dtype=np.uint8)
        padded[_WINDOW : _WINDOW + high - low] = data[low:high]
        # Every 8 bytes of them as an integer (unaligned, no copy): one gather reads a window of each id.
        words = np.ndarray(shape=(len(padded) - _WINDOW + 1,), dtype="<u8", buffer=padded, strides=(1,))
        starts, lengths = bounds[:-1] - low + _WINDOW, np.diff(bounds)
        short = np.minimum(lengths, _WINDOW)
        hashed = lengths.astype(np.uint64) * _LENGTH_MIX
        for window, mix in enumerate(_MIX):
            hashed ^= (words[starts + _within(window, lengths)] & _INSIDE[window][short]) * mix
        # Mixed so that every bit of the windows reaches the high bits the bucket is taken from.
        hashed ^= hashed >> np.uint64(31)
        hashed *= _MIX[1]
        hashed ^= hashed >> np.uint64(29)
        # The high 32 bits scaled to range(count): a multiply and a shift, where % divides.
        buckets[first : first + _HASHED] = ((hashed >> np.uint64(32)) * np.uint64(count)) >> np.uint64(32)
    return buckets


def _one_array(ids: pa.Array | pa.ChunkedArray) -> pa.Array:
    return ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids


def _take(strings: pa.Array | pa.ChunkedArray, rows: np.ndarray) -> pa.Array:
    """``strings`` at ``rows`` (ascending), taken chunk by chunk: pyarrow's ``take`` on a chunked array
    first joins every chunk into one copy (4M ids: ~45 MB, for each bucket of each lookup)."""
    if not isinstance(strings, pa.ChunkedArray):
        return strings.take(pa.array(rows))
    ends = np.cumsum([len(chunk) for chunk in strings.chunks])
    cuts = np.searchsorted(rows, ends)
    pieces, first, start = [], 0, 0
    for chunk, end, cut in zip(strings.chunks, ends, cuts):
        if cut > first:
            pieces.append(chunk.take(pa.array(rows[first:cut] - start)))
        first, start = cut, end
    return pa.concat_arrays(pieces) if pieces else pa.array([], strings.type)


def _index_in(values: pa.Array | pa.ChunkedArray, ids: pa.Array) -> np.ndarray:
    positions = pc.fill_null(pc.index_in(values, value_set=ids), -1)
    return positions.to_numpy(zero_copy_only=False).astype(np.int32)
