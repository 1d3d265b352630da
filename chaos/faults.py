"""What the network between the sidecar and the broker can do to them, as chaos/fault_proxy.py
applies it to every open connection and every new one:

- ``Fault.none()``: bytes forwarded as they come.
- ``Fault.latency(latency_ms, jitter_ms)``: each chunk is delivered ``latency_ms`` ± a uniform
  ``jitter_ms`` (seeded) after it was read, never before the chunk read before it: jitter delays,
  it does not reorder a TCP stream.
- ``Fault.reset()``: every open connection is reset (RST, both sides), and every new one at
  once.
- ``Fault.blackhole()``: connections are accepted and read, nothing is forwarded and nothing
  answered; a connection accepted meanwhile never reaches the target, and is reset when the
  blackhole lifts, so that its client reconnects.
- ``Fault.half_open()``: client → target still forwarded, target → client dropped; connections
  stay open.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

LATENCY_MS_MAX = 60_000


class FaultKind(enum.Enum):
    NONE = "none"
    LATENCY = "latency"
    RESET = "reset"
    BLACKHOLE = "blackhole"
    HALF_OPEN = "half_open"


class Direction(enum.Enum):
    UP = "client to target"
    DOWN = "target to client"


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    latency_ms: int = 0
    jitter_ms: int = 0

    @classmethod
    def none(cls) -> Fault:
        return cls(FaultKind.NONE)

    @classmethod
    def latency(cls, latency_ms: int, jitter_ms: int = 0) -> Fault:
        for field, value in (("latency_ms", latency_ms), ("jitter_ms", jitter_ms)):
            if not 0 <= value <= LATENCY_MS_MAX:
                raise ValueError(f"{field} must be within 0..{LATENCY_MS_MAX}, not {value}")
        return cls(FaultKind.LATENCY, latency_ms, jitter_ms)

    @classmethod
    def reset(cls) -> Fault:
        return cls(FaultKind.RESET)

    @classmethod
    def blackhole(cls) -> Fault:
        return cls(FaultKind.BLACKHOLE)

    @classmethod
    def half_open(cls) -> Fault:
        return cls(FaultKind.HALF_OPEN)

    def drops(self, direction: Direction) -> bool:
        return self.kind is FaultKind.BLACKHOLE or (
            self.kind is FaultKind.HALF_OPEN and direction is Direction.DOWN
        )
