"""The HA channel's wire format (RocketMQ's HA protocol), raw TCP, big-endian.

Slave → master, on connect, after every append and at least every ha_send_heartbeat_interval_ms:

    | 8 | max phy_offset the slave holds (its log's end) |

Master → slave, a transfer frame, or with size 0 a heartbeat (the offset then is where the
master's next frame will start, its log's end when idle):

    | 8 | start phy_offset | 4 | size | size bytes of the master's commitlog |

A frame never crosses a segment end and carries at most ha_transfer_batch_bytes.
"""

from __future__ import annotations

import struct

REPORT = struct.Struct(">q")
FRAME_HEADER = struct.Struct(">qi")


class HAError(Exception):
    """The HA peer broke the protocol or its log does not continue this one's: the connection
    is closed (and, by a slave, made again after a backoff). Retriable."""


def report(max_phy_offset: int) -> bytes:
    return REPORT.pack(max_phy_offset)


def frame(start_phy_offset: int, data: bytes) -> bytes:
    return FRAME_HEADER.pack(start_phy_offset, len(data)) + data
