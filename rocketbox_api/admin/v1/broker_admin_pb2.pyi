from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MessageType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_TYPE_UNSPECIFIED: _ClassVar[MessageType]
    MESSAGE_TYPE_NORMAL: _ClassVar[MessageType]
    MESSAGE_TYPE_FIFO: _ClassVar[MessageType]
    MESSAGE_TYPE_DELAY: _ClassVar[MessageType]
    MESSAGE_TYPE_TRANSACTION: _ClassVar[MessageType]
    MESSAGE_TYPE_MIXED: _ClassVar[MessageType]

class ClientType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLIENT_TYPE_UNSPECIFIED: _ClassVar[ClientType]
    CLIENT_TYPE_PUSH_CONSUMER: _ClassVar[ClientType]
    CLIENT_TYPE_SIMPLE_CONSUMER: _ClassVar[ClientType]
    CLIENT_TYPE_PULL_CONSUMER: _ClassVar[ClientType]

class ResetTarget(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESET_TARGET_UNSPECIFIED: _ClassVar[ResetTarget]
    RESET_TARGET_FIRST: _ClassVar[ResetTarget]
    RESET_TARGET_LAST: _ClassVar[ResetTarget]
    RESET_TARGET_TIMESTAMP: _ClassVar[ResetTarget]
MESSAGE_TYPE_UNSPECIFIED: MessageType
MESSAGE_TYPE_NORMAL: MessageType
MESSAGE_TYPE_FIFO: MessageType
MESSAGE_TYPE_DELAY: MessageType
MESSAGE_TYPE_TRANSACTION: MessageType
MESSAGE_TYPE_MIXED: MessageType
CLIENT_TYPE_UNSPECIFIED: ClientType
CLIENT_TYPE_PUSH_CONSUMER: ClientType
CLIENT_TYPE_SIMPLE_CONSUMER: ClientType
CLIENT_TYPE_PULL_CONSUMER: ClientType
RESET_TARGET_UNSPECIFIED: ResetTarget
RESET_TARGET_FIRST: ResetTarget
RESET_TARGET_LAST: ResetTarget
RESET_TARGET_TIMESTAMP: ResetTarget

class Topic(_message.Message):
    __slots__ = ("name", "queue_nums", "message_type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    queue_nums: int
    message_type: MessageType
    def __init__(self, name: _Optional[str] = ..., queue_nums: _Optional[int] = ..., message_type: _Optional[_Union[MessageType, str]] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic", "queue_nums", "message_type")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_nums: int
    message_type: MessageType
    def __init__(self, topic: _Optional[str] = ..., queue_nums: _Optional[int] = ..., message_type: _Optional[_Union[MessageType, str]] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[Topic]
    def __init__(self, topics: _Optional[_Iterable[_Union[Topic, _Mapping]]] = ...) -> None: ...

class DescribeTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueueOffsets(_message.Message):
    __slots__ = ("queue_id", "min_queue_offset", "max_queue_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_queue_offset: int
    max_queue_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., min_queue_offset: _Optional[int] = ..., max_queue_offset: _Optional[int] = ...) -> None: ...

class DescribeTopicResponse(_message.Message):
    __slots__ = ("topic", "queues", "flow_control_forced")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    FLOW_CONTROL_FORCED_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsets]
    flow_control_forced: bool
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[QueueOffsets, _Mapping]]] = ..., flow_control_forced: _Optional[bool] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ...) -> None: ...

class StoredMessage(_message.Message):
    __slots__ = ("message_id", "topic", "queue_id", "queue_offset", "phy_offset", "store_size_bytes", "store_timestamp_ms", "born_timestamp_ms", "born_host", "store_host", "tag", "keys", "message_group", "delivery_timestamp_ms", "user_properties", "system_properties", "reconsume_times", "body")
    class UserPropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class SystemPropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PHY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORE_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_GROUP_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    USER_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    topic: str
    queue_id: int
    queue_offset: int
    phy_offset: int
    store_size_bytes: int
    store_timestamp_ms: int
    born_timestamp_ms: int
    born_host: str
    store_host: str
    tag: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    message_group: str
    delivery_timestamp_ms: int
    user_properties: _containers.ScalarMap[str, str]
    system_properties: _containers.ScalarMap[str, str]
    reconsume_times: int
    body: bytes
    def __init__(self, message_id: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., phy_offset: _Optional[int] = ..., store_size_bytes: _Optional[int] = ..., store_timestamp_ms: _Optional[int] = ..., born_timestamp_ms: _Optional[int] = ..., born_host: _Optional[str] = ..., store_host: _Optional[str] = ..., tag: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., message_group: _Optional[str] = ..., delivery_timestamp_ms: _Optional[int] = ..., user_properties: _Optional[_Mapping[str, str]] = ..., system_properties: _Optional[_Mapping[str, str]] = ..., reconsume_times: _Optional[int] = ..., body: _Optional[bytes] = ...) -> None: ...

class GetMessageRequest(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class GetMessageResponse(_message.Message):
    __slots__ = ("messages", "truncated")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[StoredMessage]
    truncated: bool
    def __init__(self, messages: _Optional[_Iterable[_Union[StoredMessage, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class QueryMessageRequest(_message.Message):
    __slots__ = ("topic", "key", "max_num")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    max_num: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., max_num: _Optional[int] = ...) -> None: ...

class QueryMessageResponse(_message.Message):
    __slots__ = ("messages", "truncated")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[StoredMessage]
    truncated: bool
    def __init__(self, messages: _Optional[_Iterable[_Union[StoredMessage, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class SetFlowControlRequest(_message.Message):
    __slots__ = ("on", "topic")
    ON_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    on: bool
    topic: str
    def __init__(self, on: _Optional[bool] = ..., topic: _Optional[str] = ...) -> None: ...

class SetFlowControlResponse(_message.Message):
    __slots__ = ("broker_wide", "topics")
    BROKER_WIDE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    broker_wide: bool
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, broker_wide: _Optional[bool] = ..., topics: _Optional[_Iterable[str]] = ...) -> None: ...

class Group(_message.Message):
    __slots__ = ("name", "orderly", "retry_max_times", "broadcast")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ORDERLY_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_TIMES_FIELD_NUMBER: _ClassVar[int]
    BROADCAST_FIELD_NUMBER: _ClassVar[int]
    name: str
    orderly: bool
    retry_max_times: int
    broadcast: bool
    def __init__(self, name: _Optional[str] = ..., orderly: _Optional[bool] = ..., retry_max_times: _Optional[int] = ..., broadcast: _Optional[bool] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[Group]
    def __init__(self, groups: _Optional[_Iterable[_Union[Group, _Mapping]]] = ...) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class GroupMember(_message.Message):
    __slots__ = ("client_id", "client_type")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    client_type: ClientType
    def __init__(self, client_id: _Optional[str] = ..., client_type: _Optional[_Union[ClientType, str]] = ...) -> None: ...

class GroupQueueProgress(_message.Message):
    __slots__ = ("queue_id", "min_queue_offset", "max_queue_offset", "consume_offset", "lag", "inflight_count")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONSUME_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_COUNT_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_queue_offset: int
    max_queue_offset: int
    consume_offset: int
    lag: int
    inflight_count: int
    def __init__(self, queue_id: _Optional[int] = ..., min_queue_offset: _Optional[int] = ..., max_queue_offset: _Optional[int] = ..., consume_offset: _Optional[int] = ..., lag: _Optional[int] = ..., inflight_count: _Optional[int] = ...) -> None: ...

class GroupTopicProgress(_message.Message):
    __slots__ = ("topic", "queues")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queues: _containers.RepeatedCompositeFieldContainer[GroupQueueProgress]
    def __init__(self, topic: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[GroupQueueProgress, _Mapping]]] = ...) -> None: ...

class DescribeGroupResponse(_message.Message):
    __slots__ = ("group", "members", "topics", "dlq_topic", "dlq_message_count", "broadcast_members")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    DLQ_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DLQ_MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    BROADCAST_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group: Group
    members: _containers.RepeatedCompositeFieldContainer[GroupMember]
    topics: _containers.RepeatedCompositeFieldContainer[GroupTopicProgress]
    dlq_topic: str
    dlq_message_count: int
    broadcast_members: _containers.RepeatedCompositeFieldContainer[BroadcastMember]
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ..., members: _Optional[_Iterable[_Union[GroupMember, _Mapping]]] = ..., topics: _Optional[_Iterable[_Union[GroupTopicProgress, _Mapping]]] = ..., dlq_topic: _Optional[str] = ..., dlq_message_count: _Optional[int] = ..., broadcast_members: _Optional[_Iterable[_Union[BroadcastMember, _Mapping]]] = ...) -> None: ...

class BroadcastMember(_message.Message):
    __slots__ = ("member_id", "client_id", "host", "last_seen_ms", "left", "topics")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_MS_FIELD_NUMBER: _ClassVar[int]
    LEFT_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    member_id: int
    client_id: str
    host: str
    last_seen_ms: int
    left: bool
    topics: _containers.RepeatedCompositeFieldContainer[GroupTopicProgress]
    def __init__(self, member_id: _Optional[int] = ..., client_id: _Optional[str] = ..., host: _Optional[str] = ..., last_seen_ms: _Optional[int] = ..., left: _Optional[bool] = ..., topics: _Optional[_Iterable[_Union[GroupTopicProgress, _Mapping]]] = ...) -> None: ...

class CreateGroupRequest(_message.Message):
    __slots__ = ("group", "orderly", "retry_max_times", "broadcast")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ORDERLY_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_TIMES_FIELD_NUMBER: _ClassVar[int]
    BROADCAST_FIELD_NUMBER: _ClassVar[int]
    group: str
    orderly: bool
    retry_max_times: int
    broadcast: bool
    def __init__(self, group: _Optional[str] = ..., orderly: _Optional[bool] = ..., retry_max_times: _Optional[int] = ..., broadcast: _Optional[bool] = ...) -> None: ...

class CreateGroupResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class ResetOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "to", "timestamp_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    to: ResetTarget
    timestamp_ms: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., to: _Optional[_Union[ResetTarget, str]] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class ResetOffsetResponse(_message.Message):
    __slots__ = ("progress", "broadcast_members")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    BROADCAST_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    progress: GroupTopicProgress
    broadcast_members: _containers.RepeatedCompositeFieldContainer[BroadcastMember]
    def __init__(self, progress: _Optional[_Union[GroupTopicProgress, _Mapping]] = ..., broadcast_members: _Optional[_Iterable[_Union[BroadcastMember, _Mapping]]] = ...) -> None: ...

class GetHAStateRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HASlave(_message.Message):
    __slots__ = ("address", "ack_offset", "lag_bytes")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ACK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    address: str
    ack_offset: int
    lag_bytes: int
    def __init__(self, address: _Optional[str] = ..., ack_offset: _Optional[int] = ..., lag_bytes: _Optional[int] = ...) -> None: ...

class GetHAStateResponse(_message.Message):
    __slots__ = ("role", "max_phy_offset", "ha_address", "slaves", "master_ha_address", "master_connected", "behind_master_bytes")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MAX_PHY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SLAVES_FIELD_NUMBER: _ClassVar[int]
    MASTER_HA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MASTER_CONNECTED_FIELD_NUMBER: _ClassVar[int]
    BEHIND_MASTER_BYTES_FIELD_NUMBER: _ClassVar[int]
    role: str
    max_phy_offset: int
    ha_address: str
    slaves: _containers.RepeatedCompositeFieldContainer[HASlave]
    master_ha_address: str
    master_connected: bool
    behind_master_bytes: int
    def __init__(self, role: _Optional[str] = ..., max_phy_offset: _Optional[int] = ..., ha_address: _Optional[str] = ..., slaves: _Optional[_Iterable[_Union[HASlave, _Mapping]]] = ..., master_ha_address: _Optional[str] = ..., master_connected: _Optional[bool] = ..., behind_master_bytes: _Optional[int] = ...) -> None: ...
