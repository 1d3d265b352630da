"""``rocketbox.admin.v1.BrokerAdmin``'s answers rendered for people (``format_*``: text) or
scripts (``*_to_dict``: JSON), for the broker's admin commands (broker_admin_cli.py).
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

from rocketbox.wording import plural
from rocketbox_api.admin.v1 import broker_admin_pb2 as apb

# A body longer than this is cut in the text output (JSON always carries all of it).
BODY_PREVIEW_BYTES_MAX = 1024


def message_type_name(value: int) -> str:
    return apb.MessageType.Name(value).removeprefix("MESSAGE_TYPE_")


def topic_to_dict(topic: apb.Topic) -> dict[str, Any]:
    return {
        "name": topic.name,
        "queue_nums": topic.queue_nums,
        "message_type": message_type_name(topic.message_type),
    }


def describe_to_dict(answer: apb.DescribeTopicResponse) -> dict[str, Any]:
    return {
        **topic_to_dict(answer.topic),
        "flow_control_forced": answer.flow_control_forced,
        "queues": [
            {
                "queue_id": q.queue_id,
                "min_queue_offset": q.min_queue_offset,
                "max_queue_offset": q.max_queue_offset,
            }
            for q in answer.queues
        ],
    }


def stored_message_to_dict(m: apb.StoredMessage) -> dict[str, Any]:
    try:
        body_text: str | None = m.body.decode("utf-8")
    except UnicodeDecodeError:
        body_text = None
    return {
        "message_id": m.message_id,
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "phy_offset": m.phy_offset,
        "store_size_bytes": m.store_size_bytes,
        "store_timestamp_ms": m.store_timestamp_ms,
        "born_timestamp_ms": m.born_timestamp_ms,
        "born_host": m.born_host,
        "store_host": m.store_host,
        "tag": m.tag if m.HasField("tag") else None,
        "keys": list(m.keys),
        "message_group": m.message_group if m.HasField("message_group") else None,
        "delivery_timestamp_ms": (
            m.delivery_timestamp_ms if m.HasField("delivery_timestamp_ms") else None
        ),
        "user_properties": dict(m.user_properties),
        "system_properties": dict(m.system_properties),
        "reconsume_times": m.reconsume_times,
        "body_base64": base64.b64encode(m.body).decode("ascii"),
        "body_text": body_text,  # None: the body is not UTF-8
    }


def messages_to_dict(messages: list[apb.StoredMessage], truncated: bool) -> dict[str, Any]:
    return {"messages": [stored_message_to_dict(m) for m in messages], "truncated": truncated}


def flow_control_to_dict(answer: apb.SetFlowControlResponse) -> dict[str, Any]:
    return {"broker_wide": answer.broker_wide, "topics": list(answer.topics)}


def group_to_dict(group: apb.Group) -> dict[str, Any]:
    return {
        "name": group.name,
        "orderly": group.orderly,
        "retry_max_times": group.retry_max_times,
        "broadcast": group.broadcast,
    }


def client_type_name(value: int) -> str:
    return apb.ClientType.Name(value).removeprefix("CLIENT_TYPE_")


def group_progress_to_dict(progress: apb.GroupTopicProgress) -> dict[str, Any]:
    return {
        "topic": progress.topic,
        "queues": [
            {
                "queue_id": q.queue_id,
                "min_queue_offset": q.min_queue_offset,
                "max_queue_offset": q.max_queue_offset,
                "consume_offset": q.consume_offset,
                "lag": q.lag,
                "inflight_count": q.inflight_count,
            }
            for q in progress.queues
        ],
    }


def describe_group_to_dict(answer: apb.DescribeGroupResponse) -> dict[str, Any]:
    return {
        **group_to_dict(answer.group),
        "members": [
            {"client_id": m.client_id, "client_type": client_type_name(m.client_type)}
            for m in answer.members
        ],
        "topics": [group_progress_to_dict(t) for t in answer.topics],
        "dlq_topic": answer.dlq_topic,
        "dlq_message_count": answer.dlq_message_count,
        "broadcast_members": members_to_dicts(list(answer.broadcast_members)),
    }


def members_to_dicts(members: list[apb.BroadcastMember]) -> list[dict[str, Any]]:
    return [
        {
            "member_id": m.member_id,
            "client_id": m.client_id,
            "host": m.host,
            "last_seen_ms": m.last_seen_ms,
            "left": m.left,
            "topics": [group_progress_to_dict(t) for t in m.topics],
        }
        for m in members
    ]


# -- answers as text -------------------------------------------------------------------------------
def format_time_ms(ms: int) -> str:
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_topics(topics: list[apb.Topic]) -> str:
    if not topics:
        return "no topics"
    width = max(len("TOPIC"), *(len(t.name) for t in topics))
    lines = [f"{'TOPIC':<{width}}  QUEUES  TYPE"]
    lines += [
        f"{t.name:<{width}}  {t.queue_nums:>6}  {message_type_name(t.message_type)}" for t in topics
    ]
    return "\n".join(lines)


def format_describe(answer: apb.DescribeTopicResponse) -> str:
    t = answer.topic
    lines = [
        f"topic {t.name}: {plural(t.queue_nums, 'queue')}, {message_type_name(t.message_type)}",
        f"flow control forced: {'yes' if answer.flow_control_forced else 'no'}",
        "QUEUE  MIN_QUEUE_OFFSET  MAX_QUEUE_OFFSET",
    ]
    lines += [
        f"{q.queue_id:>5}  {q.min_queue_offset:>16}  {q.max_queue_offset:>16}"
        for q in answer.queues
    ]
    return "\n".join(lines)


def _format_properties(props: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(props.items())) or "-"


def _format_body(body: bytes) -> str:
    preview = body[:BODY_PREVIEW_BYTES_MAX]
    try:
        shown = repr(preview.decode("utf-8"))
    except UnicodeDecodeError:
        shown = f"0x{preview.hex()}"
    cut = "..." if len(body) > len(preview) else ""
    return f"{shown}{cut} ({plural(len(body), 'byte')})"


def format_message(m: apb.StoredMessage) -> str:
    rows = [
        ("topic", m.topic),
        ("queue", f"{m.queue_id}, queue offset {m.queue_offset}"),
        ("phy_offset", f"{m.phy_offset} ({plural(m.store_size_bytes, 'byte')})"),
        ("stored", f"{format_time_ms(m.store_timestamp_ms)} by {m.store_host}"),
        ("born", f"{format_time_ms(m.born_timestamp_ms)} at {m.born_host}"),
        ("tag", m.tag if m.HasField("tag") else "-"),
        ("keys", " ".join(m.keys) or "-"),
    ]
    if m.HasField("message_group"):
        rows.append(("message group", m.message_group))
    if m.HasField("delivery_timestamp_ms"):
        rows.append(("delivery time", format_time_ms(m.delivery_timestamp_ms)))
    rows += [
        ("user properties", _format_properties(dict(m.user_properties))),
        ("system properties", _format_properties(dict(m.system_properties))),
        ("reconsume times", str(m.reconsume_times)),
        ("body", _format_body(m.body)),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join([f"message {m.message_id}"] + [f"  {n:<{width}}  {v}" for n, v in rows])


def format_messages(messages: list[apb.StoredMessage], truncated: bool) -> str:
    if not messages:
        return "no messages"
    text = "\n\n".join(format_message(m) for m in messages)
    if truncated:
        text += "\n\n(truncated: more matched than the broker sends in one answer)"
    return text


def format_flow_control(answer: apb.SetFlowControlResponse) -> str:
    topics = ", ".join(answer.topics) or "none"
    return (
        f"forced flow control: broker-wide {'on' if answer.broker_wide else 'off'}; "
        f"topics: {topics}"
    )


def _format_group_settings(group: apb.Group) -> str:
    kind = "orderly" if group.orderly else "concurrent"
    model = ", broadcasting" if group.broadcast else ""
    return f"{kind}, retry_max_times {group.retry_max_times}{model}"


def format_groups(groups: list[apb.Group]) -> str:
    if not groups:
        return "no groups"
    width = max(len("GROUP"), *(len(g.name) for g in groups))
    lines = [f"{'GROUP':<{width}}  ORDERLY  RETRY_MAX_TIMES  MODEL"]
    lines += [
        f"{g.name:<{width}}  {'yes' if g.orderly else 'no':<7}  {g.retry_max_times:>15}  "
        f"{'broadcasting' if g.broadcast else 'clustering'}"
        for g in groups
    ]
    return "\n".join(lines)


_PROGRESS_COLUMNS = (
    ("QUEUE", 5),
    ("MIN_QUEUE_OFFSET", 16),
    ("MAX_QUEUE_OFFSET", 16),
    ("CONSUME_OFFSET", 16),
    ("LAG", 12),
    ("IN_FLIGHT", 9),
)


def format_group_progress(progress: apb.GroupTopicProgress) -> str:
    lag = sum(q.lag for q in progress.queues)
    inflight = sum(q.inflight_count for q in progress.queues)
    lines = [
        f"topic {progress.topic}: lag {lag}, in flight {inflight}",
        "  ".join(f"{name:>{width}}" for name, width in _PROGRESS_COLUMNS),
    ]
    for q in progress.queues:
        values = (
            q.queue_id,
            q.min_queue_offset,
            q.max_queue_offset,
            q.consume_offset,
            q.lag,
            q.inflight_count,
        )
        cells = zip(values, (width for _, width in _PROGRESS_COLUMNS), strict=True)
        lines.append("  ".join(f"{value:>{width}}" for value, width in cells))
    return "\n".join(lines)


def format_describe_group(answer: apb.DescribeGroupResponse) -> str:
    g = answer.group
    lines = [f"group {g.name}: {_format_group_settings(g)}"]
    if answer.members:
        lines.append(f"members ({len(answer.members)}):")
        lines += [f"  {m.client_id} ({client_type_name(m.client_type)})" for m in answer.members]
    else:
        lines.append("members: none connected")
    dlq_messages = plural(answer.dlq_message_count, "message")
    lines.append(f"dead-letter queue {answer.dlq_topic}: {dlq_messages}")
    if answer.group.broadcast:
        lines.append(format_broadcast_members(list(answer.broadcast_members)))
    elif not answer.topics:
        lines.append("no topics consumed yet")
    for progress in answer.topics:
        lines += ["", format_group_progress(progress)]
    return "\n".join(lines)


def format_broadcast_members(members: list[apb.BroadcastMember]) -> str:
    """A broadcast group's members, each with its own progress."""
    if not members:
        return "broadcast members: none yet"
    lines = [f"broadcast members ({len(members)}):"]
    for m in members:
        state = "left" if m.left else "active"
        lines += [
            "",
            f"member {m.member_id}: client {m.client_id} ({state}, last seen "
            f"{format_time_ms(m.last_seen_ms)})",
        ]
        if not m.topics:
            lines.append("no topics consumed yet")
        lines += [format_group_progress(t) for t in m.topics]
    return "\n".join(lines)


def format_created_group(group: apb.Group) -> str:
    return f"created group {group.name}: {_format_group_settings(group)}"
