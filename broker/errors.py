"""Faults of the broker above the store (the store's own are in store/errors.py).

    BrokerError                     (retriable: bool)
    ├── TopicNotFoundError          the topic does not exist and auto-create is off  (not retriable)
    ├── TopicExistsError            create of a topic that exists                    (not retriable)
    ├── BrokerConfigError           a broker setting out of range                    (not retriable)
    └── BackgroundTaskError         a background task raised: the broker stops       (not retriable)

Protocol-level refusals are not exceptions but ``Status`` codes in the response (grpc_service/),
as the RocketMQ proxy answers them.
"""

from __future__ import annotations

from typing import ClassVar


class BrokerError(Exception):
    retriable: ClassVar[bool] = False


class TopicNotFoundError(BrokerError):
    pass


class TopicExistsError(BrokerError):
    pass


class BrokerConfigError(BrokerError):
    pass


class BackgroundTaskError(BrokerError):
    """Raised from the dead task's exception (``__cause__``); background.py."""
