"""Message ids in RocketMQ's "V1" format, stamped once at intake.

17 bytes printed as 34 uppercase hex characters::

    01 | MAC (6) | low 16 bits of the pid (2) | seconds since 2021-01-01T00:00Z (4) | counter (4)

The same id goes with the message on every retry and resend and is stored by the broker as its
``UNIQ_KEY``: it is what "was this message already stored?" and the reconciliation join on. Ids
are unique per process by the counter, across processes by the MAC and pid (and, past a restart
that reuses a pid, by the clock).
"""

from __future__ import annotations

import itertools
import os
import time
import uuid

EPOCH_2021_S = 1_609_459_200
MESSAGE_ID_LENGTH = 34


class MessageIdGenerator:
    def __init__(self) -> None:
        mac = uuid.getnode().to_bytes(6, "big")
        pid = (os.getpid() & 0xFFFF).to_bytes(2, "big")
        self._prefix = "01" + (mac + pid).hex().upper()
        # next() on itertools.count is one C call, atomic under the GIL: no lock needed across
        # threads, and none paid per message.
        self._counter = itertools.count()

    def next_id(self) -> str:
        seconds = max(0, int(time.time()) - EPOCH_2021_S) & 0xFFFFFFFF
        sequence = next(self._counter) & 0xFFFFFFFF
        return f"{self._prefix}{seconds:08X}{sequence:08X}"
