"""Topic and consumer-group names: the one rule that the sidecar's intake, the broker's gRPC and
admin edges, its topic and group tables and its store apply.

RocketMQ's rule: a name is characters of ``%a-zA-Z0-9_-`` (the clients' regex,
docs/rocketmq-protocol.md §5.4; '%' starts the broker's own names, ``%RETRY%<group>`` and
``%DLQ%<group>``), a topic at most TOPIC_LENGTH_MAX characters and a group at most GROUP_LENGTH_MAX
(the proxy's limits).

The store alone also accepts '|' (STORED_TOPIC_PATTERN, with the store's own
``topic_length_max``). RocketMQ's own broker and store check topics with TopicValidator, whose
charset is ``^[%|a-zA-Z0-9_-]+$``: wider than the clients'. The store follows that wider rule
because it is the rule of the data it reads back, not of what clients may send: recovery skips a
consume-queue directory whose name the rule refuses, so a store holding a topic with a '|' (a
namespaced ``ns|Topic`` written under RocketMQ's rule) would lose its queues silently under the
narrower one. Nothing with a '|' comes in through our edges, which all apply the clients' rule.

This is a leaf module (no imports from broker or sidecar): both sides import it (docs/design.md §9).
"""

from __future__ import annotations

import re

TOPIC_LENGTH_MAX = 127
GROUP_LENGTH_MAX = 120
# The clients' charset, as a regex character class body (also quoted in error messages).
NAME_CHARACTERS = "%a-zA-Z0-9_-"
# RocketMQ's TopicValidator charset, which the store accepts (see the module docstring).
STORED_TOPIC_CHARACTERS = "%|a-zA-Z0-9_-"
NAME_PATTERN = re.compile(f"[{NAME_CHARACTERS}]+")
STORED_TOPIC_PATTERN = re.compile(f"[{STORED_TOPIC_CHARACTERS}]+")


# A namespaced topic or group is stored as NAMESPACE%NAME (RocketMQ's proxy's rule); the
# broker's edge (broker/grpc_service/namespaces.py) adds it, and the sidecar and the CLI name
# what the broker's admin service and the reconciliation see.
NAMESPACE_SEPARATOR = "%"


def namespaced(namespace: str, name: str) -> str:
    """``name`` as the broker stores it in ``namespace`` ("": not namespaced)."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


def is_topic_name(name: str) -> bool:
    """A topic name a client may use (system prefixes are the caller's to refuse)."""
    return len(name) <= TOPIC_LENGTH_MAX and NAME_PATTERN.fullmatch(name) is not None


def is_group_name(name: str) -> bool:
    return len(name) <= GROUP_LENGTH_MAX and NAME_PATTERN.fullmatch(name) is not None
