"""The codec's CRC-32: zlib-ng's, the same checksum as zlib's and Java's ``java.util.zip.CRC32``
(what RocketMQ writes), computed with the CPU's carry-less multiply (PCLMULQDQ/VPCLMULQDQ) where
it has one.

Every record's CRC is computed once when it is written and once each time a log is verified
(recovery, the reconciliation's scan). zlib's CRC, without that instruction, is several times
slower, and it was a large share of the reconciliation's scan (docs/benchmarks.md).
"""

from __future__ import annotations

from zlib_ng.zlib_ng import crc32

__all__ = ["crc32"]
