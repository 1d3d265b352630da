"""What a stand-in proxy is started with: its topics, its consumer groups and its limits.

The names and defaults are Apache RocketMQ 5's: a topic's ``message.type`` attribute
(TopicMessageType), the broker's ``autoCreateSubscriptionGroup`` (on by default), the proxy's
``maxMessageSize`` (4 MiB), its receive limits (``minInvisibleTimeMillsForRecv`` 10 s,
``maxInvisibleTimeMills`` 12 h, long polling clamped to 5-20 s) and the producer's back-off it
hands out in Settings. Each is written once, here.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from rocketmq.grpc_protocol import definition_pb2

BROKER_NAMES = ("broker-a", "broker-b")
QUEUES_PER_BROKER_DEFAULT = 4
QUEUES_PER_BROKER_MAX = 64
BODY_BYTES_MAX = 4 * 1024 * 1024
INVISIBLE_DURATION_MIN_MS = 10_000
INVISIBLE_DURATION_MAX_MS = 12 * 3600 * 1000
# What the proxy uses instead of the requested invisible duration for an auto_renew receive.
AUTO_RENEW_SLICE_MS = 60_000
LONG_POLLING_MIN_MS = 5_000
LONG_POLLING_MAX_MS = 20_000
RECEIVE_BATCH_MAX = 32
DELIVERY_AHEAD_MAX_MS = 24 * 3600 * 1000
# SubscriptionGroupConfig's retryMaxTimes: a message is delivered at most this plus one times.
RETRY_MAX_TIMES = 16
# The proxy's name rule for topics and groups (GrpcValidator), and its length limits.
NAME_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_NAME_BYTES_MAX = 127
GROUP_NAME_BYTES_MAX = 120
# A running stand-in answers every send TOO_MANY_REQUESTS while this file is in its data dir.
FLOW_CONTROL_FILE = "flow-control"


class TopicMessageType(enum.Enum):
    """A topic's ``message.type`` attribute, and the message types its route accepts."""

    UNSPECIFIED = "UNSPECIFIED"
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"

    def accepted(self) -> list[int]:
        """``MessageQueue.accept_message_types`` of the topic's route."""
        if self is TopicMessageType.MIXED:
            return [
                definition_pb2.NORMAL,
                definition_pb2.FIFO,
                definition_pb2.DELAY,
                definition_pb2.TRANSACTION,
            ]
        if self is TopicMessageType.UNSPECIFIED:
            return [definition_pb2.MESSAGE_TYPE_UNSPECIFIED]
        return [definition_pb2.MessageType.Value(self.value)]

    def takes(self, message_type: int) -> bool:
        return self is TopicMessageType.MIXED or message_type in self.accepted()


@dataclass(frozen=True)
class Topic:
    """A topic of the stand-in: ``queues`` on each of its two brokers."""

    name: str
    message_type: TopicMessageType = TopicMessageType.NORMAL
    queues: int = QUEUES_PER_BROKER_DEFAULT

    def __post_init__(self) -> None:
        if not NAME_PATTERN.match(self.name) or len(self.name.encode()) > TOPIC_NAME_BYTES_MAX:
            raise ValueError(
                f"topic {self.name!r}: a name of [%|a-zA-Z0-9_-], at most "
                f"{TOPIC_NAME_BYTES_MAX} bytes"
            )
        if not 1 <= self.queues <= QUEUES_PER_BROKER_MAX:
            raise ValueError(
                f"topic {self.name!r}: queues must be within 1..{QUEUES_PER_BROKER_MAX}"
            )

    @classmethod
    def parse(cls, spec: str) -> Topic:
        """``NAME[:TYPE[:QUEUES]]``, TYPE one of TopicMessageType (default NORMAL)."""
        name, _, rest = spec.partition(":")
        type_name, _, queues = rest.partition(":")
        try:
            message_type = TopicMessageType(type_name.upper() or "NORMAL")
        except ValueError:
            names = ", ".join(t.value for t in TopicMessageType)
            raise ValueError(f"--topic {spec!r}: TYPE must be one of {names}") from None
        if queues and not queues.isdigit():
            raise ValueError(f"--topic {spec!r}: QUEUES must be a whole number")
        return cls(name, message_type, int(queues) if queues else QUEUES_PER_BROKER_DEFAULT)

    def spec(self) -> str:
        return f"{self.name}:{self.message_type.value}:{self.queues}"


@dataclass(frozen=True)
class ProxyConfig:
    topics: tuple[Topic, ...]
    # Groups that exist from the start; others exist once used when auto_create_group is on.
    groups: tuple[str, ...] = ()
    auto_create_group: bool = True
    flow_control: bool = False
    invisible_duration_min_ms: int = INVISIBLE_DURATION_MIN_MS
    long_polling_min_ms: int = LONG_POLLING_MIN_MS
    long_polling_max_ms: int = LONG_POLLING_MAX_MS
    brokers: tuple[str, ...] = field(default=BROKER_NAMES)

    def __post_init__(self) -> None:
        names = [t.name for t in self.topics]
        if len(set(names)) != len(names):
            raise ValueError(f"topics: each name once, not {names}")
        if not 0 < self.long_polling_min_ms <= self.long_polling_max_ms:
            raise ValueError("long polling: 0 < long_polling_min_ms <= long_polling_max_ms")
        if self.invisible_duration_min_ms < 0:
            raise ValueError("invisible_duration_min_ms must be >= 0")

    def topic(self, name: str) -> Topic | None:
        for t in self.topics:
            if t.name == name:
                return t
        return None

    def args(self) -> list[str]:
        """The command line of ``python -m tests.rocketmq_proxy`` for this configuration."""
        args = [arg for t in self.topics for arg in ("--topic", t.spec())]
        args += [arg for g in self.groups for arg in ("--group", g)]
        args.append("--auto-create-group" if self.auto_create_group else "--no-auto-create-group")
        if self.flow_control:
            args.append("--flow-control")
        args += [
            f"--invisible-duration-min-ms={self.invisible_duration_min_ms}",
            f"--long-polling-min-ms={self.long_polling_min_ms}",
            f"--long-polling-max-ms={self.long_polling_max_ms}",
        ]
        return args
