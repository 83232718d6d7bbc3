"""How many copies of each prompt the dataset has shown so far (`iter_rows` numbers repeated
prompts with it), in a packed table (issue 26: a million-prompt run reads its dataset while it
runs; a dict from prompt hash to count held ~110 bytes a prompt for the whole run, this ~20-40).

A prompt's hash (`agent.store.keys.prompt_hash`, 20 hex digits) is stored as its 10 bytes in an
open-addressing table (linear probing, at most half full); a prompt seen more than once has its
count in a dict (repeats are few). Exact: two hashes are equal only when all 10 bytes are.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

from agent.store.keys import copy_key

_WIDTH = 10  # bytes of a prompt hash
_EMPTY = bytes(_WIDTH)  # no hash is all zeros in practice; one that is is counted in `_zero`


class CopyCounter:
    def __init__(self, slots: int = 1 << 16) -> None:
        self._table = bytearray(slots * _WIDTH)
        self._slots, self._used = slots, 0
        self._repeats: dict[bytes, int] = {}  # hash -> copies, for hashes seen twice or more
        self._zero = 0

    def see(self, digest: str) -> int:
        """How many copies of `digest` came before this one (0 for the first); counts this one."""
        packed = bytes.fromhex(digest)
        if len(packed) != _WIDTH:
            raise ValueError(f"not a prompt hash: {digest!r}")
        if packed == _EMPTY:
            self._zero += 1
            return self._zero - 1
        if self._insert(packed):
            return 0
        copies = self._repeats.get(packed, 1)
        self._repeats[packed] = copies + 1
        return copies

    def _insert(self, packed: bytes) -> bool:
        """Add `packed`; False when it was already there."""
        table, slots = self._table, self._slots
        slot = int.from_bytes(packed[:8], "little") % slots
        while True:
            at = slot * _WIDTH
            held = table[at : at + _WIDTH]
            if held == packed:
                return False
            if held == _EMPTY:
                table[at : at + _WIDTH] = packed
                self._used += 1
                if 2 * self._used > slots:
                    self._grow()
                return True
            slot = (slot + 1) % slots

    def _grow(self) -> None:
        old, width = self._table, _WIDTH
        self._slots *= 2
        self._table, self._used = bytearray(self._slots * width), 0
        for at in range(0, len(old), width):
            held = bytes(old[at : at + width])
            if held != _EMPTY:
                self._insert(held)


class RowKeys:
    """Each valid row's key (`prompt_hash:copy`), in order, packed: a hash's 10 bytes and a
    copy number per row. The scan keeps them so that the run's plan needs no second read of
    the dataset (at a million rows a pass costs seconds). `row_of` finds a key's row through
    a table of row numbers built on first use (4 to 8 bytes a row)."""

    def __init__(self) -> None:
        self._hashes = bytearray()
        self._copies = array("l")
        self._rows: array[int] | None = None  # open addressing by hash: row numbers, -1 empty

    def append(self, digest: str, copy: int) -> None:
        self._hashes += bytes.fromhex(digest)
        self._copies.append(copy)
        self._rows = None

    def __len__(self) -> int:
        return len(self._copies)

    def packed(self) -> tuple[bytes, bytes]:
        """The hashes and the copy numbers, as bytes (`unpacked` makes them keys again)."""
        return bytes(self._hashes), self._copies.tobytes()

    @classmethod
    def unpacked(cls, hashes: bytes, copies: bytes) -> RowKeys:
        keys = cls()
        keys._hashes = bytearray(hashes)
        keys._copies.frombytes(copies)
        if len(keys._hashes) != _WIDTH * len(keys._copies):
            raise ValueError("packed row keys of different lengths")
        return keys

    def key(self, row: int) -> str:
        return copy_key(self._hashes[row * _WIDTH : (row + 1) * _WIDTH].hex(), self._copies[row])

    def row_of(self, key: str) -> int:
        """The row whose key is `key`, or -1 when no row's is."""
        digest, colon, copy = key.partition(":")
        if not colon or len(digest) != 2 * _WIDTH or not (copy.isascii() and copy.isdigit()):
            return -1
        try:
            packed = bytes.fromhex(digest)
        except ValueError:
            return -1
        number = int(copy)
        if copy_key(packed.hex(), number) != key:  # not as `copy_key` writes it: no row's key
            return -1
        rows = self._rows if self._rows is not None else self._table()
        hashes, copies, mask = self._hashes, self._copies, len(rows) - 1
        slot = int.from_bytes(packed[:8], "little") & mask
        while (row := rows[slot]) >= 0:
            if copies[row] == number and hashes[row * _WIDTH : (row + 1) * _WIDTH] == packed:
                return row
            slot = (slot + 1) & mask
        return -1

    def _table(self) -> array[int]:
        """The rows by hash, at most half full (the copies of a prompt share a start slot)."""
        hashes, width = self._hashes, _WIDTH
        size = 1 << max(4, (2 * len(self._copies)).bit_length())
        rows, mask = array("i", [-1]) * size, size - 1
        for row in range(len(self._copies)):
            slot = int.from_bytes(hashes[row * width : row * width + 8], "little") & mask
            while rows[slot] >= 0:
                slot = (slot + 1) & mask
            rows[slot] = row
        self._rows = rows
        return rows

    def iter_keys(self) -> Iterator[str]:
        """Each key in row order."""
        hashes = self._hashes
        for at, copy in enumerate(self._copies):
            yield copy_key(hashes[at * _WIDTH : (at + 1) * _WIDTH].hex(), copy)
