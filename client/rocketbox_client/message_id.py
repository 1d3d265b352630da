"""Message ids the client stamps, once, before a message's first attempt.

The layout is RocketMQ's "V1" id (34 uppercase hex characters, as the sidecar stamps them)::

    01 | node (8 random bytes, per process) | seconds since 2021-01-01T00:00Z (4) | counter (4)

RocketMQ puts the MAC address and the pid where this puts random bytes. An app and its sidecar
share the pod's network namespace (one MAC), and in containers both are often pid 1: with MAC and
pid, their counters, both starting at 0 in the same second, would give the same ids. Random bytes
(64 bits per process) make a clash between two processes as likely as guessing them. A forked
child draws its own.

Every retry of a message (the client's UNAVAILABLE retries, the batching sender's) carries its
stamped id: the sidecar and the broker store it as the message's UNIQ_KEY, and consumers and the
reconciliation deduplicate by it.
"""

from __future__ import annotations

import itertools
import os
import secrets
import time

from rocketbox_client.message import Message

EPOCH_2021_S = 1_609_459_200
NODE_BYTES = 8
MESSAGE_ID_LENGTH = 34


class MessageIdGenerator:
    def __init__(self) -> None:
        self._draw()
        os.register_at_fork(after_in_child=self._draw)

    def _draw(self) -> None:
        self._prefix = "01" + secrets.token_hex(NODE_BYTES).upper()
        self._counter = itertools.count()

    def next_id(self) -> str:
        seconds = max(0, int(time.time()) - EPOCH_2021_S) & 0xFFFFFFFF
        # No lock: next() of an itertools.count is atomic.
        sequence = next(self._counter) & 0xFFFFFFFF
        return f"{self._prefix}{seconds:08X}{sequence:08X}"


# One per process: ids are unique by its counter, whatever the number of clients.
GENERATOR = MessageIdGenerator()


def stamp(message: Message) -> str:
    """The id a message is sent under: its own (even a blank one, which the sidecar rejects
    naming the field), or a new one."""
    return GENERATOR.next_id() if message.message_id is None else message.message_id
