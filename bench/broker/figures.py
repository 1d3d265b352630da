"""The broker bench's settings, the condition of a peer not reachable, and a measured figure
with the line it prints."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BODY = os.urandom(1024)
TOPIC = "BrokerBenchTopic"
QUEUES = 8
CLIENT_ID_HEADER = "x-mq-client-id"
NATS_URL = "nats://127.0.0.1:4222"
ECHO_SERVICE = "rocketbox.bench.Echo"
ECHO_METHOD = f"/{ECHO_SERVICE}/Echo"
# No acknowledgement at all for this long: the broker (or peer) is stuck; the bench gives up.
STALL_DEADLINE_S = 60.0
RPC_TIMEOUT_S = 30.0
SLOWEST_RATE = 500  # msgs/s: slower than this, a run is stuck rather than slow
FLUSH_MODES = ("ASYNC_FLUSH", "SYNC_FLUSH")
Metadata = tuple[tuple[str, str], ...]


class NatsUnreachable(Exception):  # noqa: N818 - a condition, reported as such
    """No NATS server with JetStream answers on NATS_URL."""


@dataclass
class Versus:
    label: str
    baseline: Figure
    met: Callable[[float], bool] | None  # None: no target, ``target`` is a note
    target: str


@dataclass
class Figure:
    name: str
    count: int
    seconds: float
    unit: str = "msgs/s"
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.count / self.seconds

    @property
    def server_us_per_item(self) -> float:
        """The server's CPU per message (or request): its cost, whatever the client's."""
        return self.server_cpu_s / self.count * 1e6

    def line(self, versus: Versus | None = None) -> str:
        text = f"{self.name:<58} {self.rate:>9,.0f} {self.unit:<6}"
        if versus is not None:
            ratio = self.rate / versus.baseline.rate
            text += f"  {ratio:>5.2f}x {versus.label:<5}"
            if versus.met is not None:
                verdict = "met" if versus.met(ratio) else "NOT MET"
                text += f" (target {versus.target}: {verdict})"
            else:
                text += f" ({versus.target})"
        cpu = f"server {self.server_cpu_s / self.seconds:.2f}" if self.server_cpu_s else ""
        cpu += f"{', ' if cpu else ''}client {self.client_cpu_s / self.seconds:.2f} cores"
        if self.server_cpu_s:
            per = {"msgs/s": "msg"}.get(self.unit, self.unit.removesuffix("/s"))
            cpu += f"; server {self.server_us_per_item:,.0f} µs/{per}"
        text += f"  [{cpu}]"
        if self.failures:
            text += f"\n    {len(self.failures):,} FAILED, e.g. {self.failures[0]}"
        return text
