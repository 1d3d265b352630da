"""Config and progress sync from a master to its slaves (RocketMQ's SlaveSynchronize).

Every slave_sync_interval_ms a slave asks its master, over the HA connection (protocol.py), for
its topic configs, group configs (consume model included) and consume progress (pop progress,
config/consumer_offsets.json, and pull offsets, config/pull_offsets.json), and takes them:
topics and groups exactly as the master has them, progress moved forward to the master's and
never back, so that a message acked on the master before it died is not delivered again by the
slave, and one acked on the slave while the master was away stays acked there. A master also
sends them unasked after each of its topic or group changes, ahead of the log bytes that follow
(``watch``, ha_connection.py).

With authentication, the master's users and rules too (config/acl.json, secrets encrypted): a
slave serving consumers while its master is away must know them. The brokers of a group share
the ACL key (the chart mounts one Secret in all); a slave whose key cannot read its master's
table keeps its own and says so (rate-limited).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from broker.auth.acl_store import AclFileError, AclStore
from broker.consumer_offset import ConsumerOffsetManager
from broker.group_config import GroupConfig, GroupConfigManager
from broker.pop_progress import PopProgress
from broker.topic_config import TopicConfig, TopicConfigManager, TopicMessageType
from rocketbox_api.rate_limited_log import RateLimitedLog

LOG = logging.getLogger(__name__)


class SlaveSynchronize:
    def __init__(
        self,
        topics: TopicConfigManager,
        groups: GroupConfigManager,
        pop_progress: PopProgress,
        pull_offsets: ConsumerOffsetManager,
        acl: AclStore | None = None,
    ) -> None:
        self._acl = acl
        self._acl_refused = RateLimitedLog(LOG, logging.WARNING)
        self._topics = topics
        self._groups = groups
        self._pop_progress = pop_progress
        self._pull_offsets = pull_offsets

    def watch(self, listener: Callable[[], None]) -> None:
        """A master calls ``listener`` after every topic or group change, before any put can
        use it: its HA connections then send a snapshot before more log bytes."""
        self._topics.add_listener(listener)
        self._groups.add_listener(listener)

    def snapshot(self) -> bytes:
        """A master's answer: its configs and progress as JSON."""
        data = {
            "topics": [tc.to_json() for tc in self._topics.list()],
            "groups": [
                [
                    gc.group_name,
                    gc.consume_message_orderly,
                    gc.retry_max_times,
                    gc.consume_broadcast_enable,
                ]
                for gc in self._groups.list()
            ],
            "pop_progress": self._pop_progress.saved(),
            "pull_offsets": self._pull_offsets.saved(),
        }
        if self._acl is not None:
            data["acl"] = self._acl.snapshot()
        return json.dumps(data, separators=(",", ":")).encode()

    def apply(self, payload: bytes) -> None:
        """A slave takes its master's snapshot. ValueError when it is not one."""
        try:
            data: dict[str, Any] = json.loads(payload)
            topics = [
                TopicConfig(
                    t["topic_name"], int(t["queue_nums"]), TopicMessageType(t["message_type"])
                )
                for t in data["topics"]
            ]
            # A fourth field, the consume model, came later: a snapshot without it is clustering.
            groups = [
                GroupConfig(str(g[0]), bool(g[1]), int(g[2]), len(g) > 3 and bool(g[3]))
                for g in data["groups"]
            ]
            pop_progress = dict(data["pop_progress"])
            pull_offsets = dict(data["pull_offsets"])
        except (KeyError, TypeError, IndexError, json.JSONDecodeError) as e:
            raise ValueError(f"not a config snapshot: {e!r}") from e
        self._topics.replace_all(topics)
        self._groups.replace_all(groups)
        self._pop_progress.sync_from(pop_progress)
        self._pull_offsets.sync_from(pull_offsets)
        if self._acl is not None and isinstance(data.get("acl"), dict):
            try:
                if self._acl.replace(data["acl"]):
                    LOG.info(
                        "took the master's users and rules (%d users)", len(self._acl.acl.users)
                    )
            except AclFileError as e:
                self._acl_refused.log("kept this slave's own users: the master's: %s", e)
        LOG.debug("synced %s topics and %s groups from the master", len(topics), len(groups))
