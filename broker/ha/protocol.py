"""The HA channel's wire format (RocketMQ's HA protocol), raw TCP, big-endian.

Slave → master, on connect, after every append and at least every ha_send_heartbeat_interval_ms:

    | 8 | max phy_offset the slave holds (its log's end) |

Master → slave, a transfer frame, or with size 0 a heartbeat (the offset then is where the
master's next frame will start, its log's end when idle):

    | 8 | start phy_offset | 4 | size | size bytes of the master's commitlog |

A frame never crosses a segment end and carries at most ha_transfer_batch_bytes.

Config sync (RocketMQ's SlaveSynchronize) rides the same connection: a slave's report of -1
(CONFIG_REQUEST) asks for its master's topic and group configs and consume progress, which the
master answers with a frame at offset -1 (CONFIG_FRAME) holding them as JSON
(broker/ha/slave_synchronize.py), at most HA_CONFIG_BYTES_MAX. One connection, one address: a
slave given only its master's HA address syncs without knowing its gRPC one, and configs never
overtake the log bytes they describe.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Collection
from typing import Any

REPORT = struct.Struct(">q")
FRAME_HEADER = struct.Struct(">qi")
CONFIG_REQUEST = -1
CONFIG_FRAME = -1
HA_CONFIG_BYTES_MAX = 64 * 1024 * 1024


class HAError(Exception):
    """The HA peer broke the protocol or its log does not continue this one's: the connection
    is closed (and, by a slave, made again after a backoff). Retriable."""


async def cancel_and_wait(tasks: Collection[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait until they are done. Their waits keep a cancel
    (rocketbox_api/deadlines.py), so one cancel ends each."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def report(max_phy_offset: int) -> bytes:
    return REPORT.pack(max_phy_offset)


def frame(start_phy_offset: int, data: bytes) -> bytes:
    return FRAME_HEADER.pack(start_phy_offset, len(data)) + data
