"""Connected clients, keyed by ``x-mq-client-id`` (the proxy's ClientActivity/ChannelManager).

Each client's last Settings, the user its Telemetry stream was opened by (with authentication)
and the stream itself live here. Other parts of the broker (transaction check-back) push commands
to a client through its stream's bounded outbound queue; a transaction is checked back only with
producers that ``publish_gate`` lets publish on its topic at that moment (stream_access.py sets
it from the ACL; without authentication every producer may). ``end`` closes a stream with a gRPC
status (a user deleted or a right revoked). A client is forgotten when its stream ends or it says
NotifyClientTermination. What a client can repeat at will (commands dropped because it does not
read them, streams replaced) is logged through a RateLimitedLog, not once per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.auth.acl import User
from rocketbox_api.rate_limited_log import RateLimitedLog

LOG = logging.getLogger(__name__)
_DROPPED_LOG = RateLimitedLog(LOG, logging.WARNING)
_REPLACED_LOG = RateLimitedLog(LOG, logging.INFO)


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The gRPC status the broker ends a client's Telemetry stream with."""

    code: grpc.StatusCode
    details: str


@dataclass(slots=True)
class ClientSession:
    client_id: str
    outbound: asyncio.Queue[spb.TelemetryCommand]
    # Who opened the stream; None without authentication.
    user: User | None = None
    settings: pb.Settings | None = None
    last_seen_monotonic: float = field(default_factory=time.monotonic)
    dropped_commands: int = 0
    # Set (with ``end``) when the broker ends the stream.
    ending: asyncio.Event = field(default_factory=asyncio.Event)
    end: StreamEnd | None = None

    @property
    def client_type(self) -> int:
        return int(self.settings.client_type) if self.settings is not None else 0

    @property
    def publishing_topics(self) -> frozenset[str]:
        if self.settings is None or not self.settings.HasField("publishing"):
            return frozenset()
        return frozenset(r.name for r in self.settings.publishing.topics)

    def push(self, command: spb.TelemetryCommand) -> bool:
        """Queue a command for the client; False (and counted) when its queue is full."""
        try:
            self.outbound.put_nowait(command)
        except asyncio.QueueFull:
            self.dropped_commands += 1
            _DROPPED_LOG.log(
                "telemetry queue of client %s is full; command dropped", self.client_id
            )
            return False
        return True


def _any_producer(_session: ClientSession, _topic: str) -> bool:
    return True


class ClientRegistry:
    def __init__(self, outbound_max: int) -> None:
        self._outbound_max = outbound_max
        self._sessions: dict[str, ClientSession] = {}
        # Whether a session may publish on a topic now (the module docstring).
        self.publish_gate: Callable[[ClientSession, str], bool] = _any_producer

    def open(self, client_id: str, user: User | None = None) -> ClientSession:
        session = ClientSession(client_id, asyncio.Queue(maxsize=self._outbound_max), user)
        previous = self._sessions.get(client_id)
        if previous is not None:
            _REPLACED_LOG.log(
                "client %s opened a new telemetry stream; the old one is replaced", client_id
            )
        self._sessions[client_id] = session
        return session

    def close(self, session: ClientSession) -> None:
        if self._sessions.get(session.client_id) is session:
            del self._sessions[session.client_id]

    def end(self, session: ClientSession, end: StreamEnd) -> None:
        """Ends the session's stream with ``end`` (its handler aborts the call) and forgets it
        at once, so nothing more is pushed to it."""
        if session.end is None:
            session.end = end
            session.ending.set()
        self.close(session)

    def sessions(self) -> Iterator[ClientSession]:
        """The open sessions, as a list taken now: ending one while iterating is safe."""
        return iter(list(self._sessions.values()))

    def forget(self, client_id: str) -> None:
        self._sessions.pop(client_id, None)

    def touch(self, client_id: str) -> None:
        session = self._sessions.get(client_id)
        if session is not None:
            session.last_seen_monotonic = time.monotonic()

    def get(self, client_id: str) -> ClientSession | None:
        return self._sessions.get(client_id)

    def producers_of(self, topic: str) -> list[ClientSession]:
        """Live producers whose Settings list ``topic`` and that ``publish_gate`` lets publish
        on it now, most recently seen first."""
        found = [
            s
            for s in self._sessions.values()
            if s.client_type == pb.PRODUCER
            and topic in s.publishing_topics
            and self.publish_gate(s, topic)
        ]
        return sorted(found, key=lambda s: s.last_seen_monotonic, reverse=True)

    def consumers_of(self, group: str) -> list[ClientSession]:
        """Connected consumers whose Settings name ``group``, by client id."""
        found = [
            s
            for s in self._sessions.values()
            if s.settings is not None
            and s.settings.HasField("subscription")
            and s.settings.subscription.group.name == group
        ]
        return sorted(found, key=lambda s: s.client_id)

    def __len__(self) -> int:
        return len(self._sessions)
