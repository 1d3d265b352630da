"""How far a consumer group has come in a topic, queue by queue: the admin's DescribeGroup and
the broker's consumer-lag gauge read the same figures from here. A broadcast group's progress is
its members', each under its own key (broadcast_members.py)."""

from __future__ import annotations

from dataclasses import dataclass

from broker.broadcast_members import progress_key
from broker.group_config import GroupConfig
from broker.pop_message import PopMessageService
from broker.store.message_store import DefaultMessageStore
from broker.topic_config import TopicConfigManager


@dataclass(frozen=True, slots=True)
class QueueProgress:
    queue_id: int
    min_queue_offset: int
    max_queue_offset: int
    consume_offset: int
    # Messages stored and not yet consumed by the group.
    lag: int
    inflight_count: int


def topic_progress(
    store: DefaultMessageStore, topics: TopicConfigManager, pop: PopMessageService, group: str,
    topic: str,
) -> list[QueueProgress]:  # fmt: skip
    tc = topics.find(topic)
    # A deleted topic the group consumed: its queues as long as they are stored.
    stored = store.consume_queue_store
    queue_ids = range(tc.queue_nums) if tc is not None else stored.queue_ids(topic)
    out = []
    for queue_id in queue_ids:
        low = store.get_min_offset_in_queue(topic, queue_id)
        high = store.get_max_offset_in_queue(topic, queue_id)
        consume_offset = pop.progress.consume_offset(group, topic, queue_id)
        out.append(
            QueueProgress(
                queue_id=queue_id,
                min_queue_offset=low,
                max_queue_offset=high,
                consume_offset=consume_offset,
                # What retention removed below min_queue_offset can never be consumed.
                lag=max(0, high - max(consume_offset, low)),
                inflight_count=pop.progress.inflight_count(group, topic, queue_id),
            )
        )
    return out


def progress_keys(pop: PopMessageService, gc: GroupConfig) -> list[str]:
    """Whose progress the group has: its own, or (broadcast) each member's."""
    if not gc.consume_broadcast_enable:
        return [gc.group_name]
    members = pop.progress.members.members(gc.group_name)
    return [progress_key(gc.group_name, m.id) for m in members]
