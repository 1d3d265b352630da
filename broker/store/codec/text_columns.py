"""The scan's two text columns, laid out as Arrow lays out strings, with no Python object a value.

A batch's message ids are one buffer of UTF-8 bytes and the offsets where each id begins
(``TextColumn``); its topics, of which a log holds a few, are an index a record into the batch's
distinct names (``CodedColumn``). The reconciliation hands both to Arrow as they are
(reconcile/segment_scan.py). Building a Python string a record, and Arrow's column from the list,
was about a tenth of the scan's time (docs/benchmarks.md). The codec does not import Arrow: the
broker, which also reads records with it, has no need of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

# Bytes below it are ASCII, which is UTF-8 whatever is cut where.
_ASCII_END = 0x80


@dataclass(slots=True)
class TextColumn:
    """Strings or None: value ``i`` is ``data[offsets[i]:offsets[i + 1]]`` where ``valid[i]``
    (an absent value spans no bytes). Built only from bytes checked as UTF-8 (``utf8_prefix``)."""

    data: npt.NDArray[np.uint8] = field(default_factory=lambda: np.empty(0, np.uint8))
    offsets: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(1, np.int64))
    valid: npt.NDArray[np.bool_] = field(default_factory=lambda: np.empty(0, np.bool_))

    def __len__(self) -> int:
        return len(self.valid)

    @classmethod
    def of(cls, values: list[str | None]) -> TextColumn:
        encoded = [b"" if v is None else v.encode() for v in values]
        lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
        return cls(
            np.frombuffer(b"".join(encoded), np.uint8).copy(),
            np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            np.asarray([v is not None for v in values], np.bool_),
        )

    def tolist(self) -> list[str | None]:
        raw = self.data.tobytes()
        bounds = self.offsets.tolist()
        return [
            raw[bounds[i] : bounds[i + 1]].decode() if ok else None
            for i, ok in enumerate(self.valid.tolist())
        ]

    def head(self, n: int) -> TextColumn:
        return TextColumn(self.data[: self.offsets[n]], self.offsets[: n + 1], self.valid[:n])

    def concat(self, other: TextColumn) -> TextColumn:
        return TextColumn(
            np.concatenate([self.data, other.data]),
            np.concatenate([self.offsets, other.offsets[1:] + self.offsets[-1]]),
            np.concatenate([self.valid, other.valid]),
        )


def utf8_prefix(data: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]) -> int:
    """How many leading values of ``data`` cut at ``offsets`` are valid UTF-8 each.

    Ids are ASCII in practice: one check of the whole buffer passes them all. Otherwise each
    value is decoded, up to the first that does not decode."""
    n = len(offsets) - 1
    if not len(data) or int(data.max()) < _ASCII_END:
        return n
    raw = data.tobytes()
    bounds = offsets.tolist()
    for i in range(n):
        try:
            raw[bounds[i] : bounds[i + 1]].decode()
        except UnicodeDecodeError:
            return i
    return n


@dataclass(slots=True)
class CodedColumn:
    """Strings of few distinct values: value ``i`` is ``names[codes[i]]``."""

    codes: npt.NDArray[np.int32] = field(default_factory=lambda: np.empty(0, np.int32))
    names: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.codes)

    def tolist(self) -> list[str]:
        names = self.names
        return [names[c] for c in self.codes.tolist()]

    def head(self, n: int) -> CodedColumn:
        return CodedColumn(self.codes[:n], self.names)

    def concat(self, other: CodedColumn) -> CodedColumn:
        if not len(other):
            return self
        return CodedColumn(
            np.concatenate([self.codes, other.codes + len(self.names)]).astype(np.int32),
            [*self.names, *other.names],
        )
