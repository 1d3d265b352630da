"""The sidecar's one wall clock: message times, outbox times and the ledger are epoch ms."""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)
