from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BrokerRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BROKER_ROLE_UNSPECIFIED: _ClassVar[BrokerRole]
    BROKER_ROLE_ASYNC_MASTER: _ClassVar[BrokerRole]
    BROKER_ROLE_SYNC_MASTER: _ClassVar[BrokerRole]
    BROKER_ROLE_SLAVE: _ClassVar[BrokerRole]

class Permission(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERMISSION_UNSPECIFIED: _ClassVar[Permission]
    PERMISSION_READ: _ClassVar[Permission]
    PERMISSION_WRITE: _ClassVar[Permission]
    PERMISSION_READ_WRITE: _ClassVar[Permission]

class MessageType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_TYPE_UNSPECIFIED: _ClassVar[MessageType]
    MESSAGE_TYPE_NORMAL: _ClassVar[MessageType]
    MESSAGE_TYPE_FIFO: _ClassVar[MessageType]
    MESSAGE_TYPE_DELAY: _ClassVar[MessageType]
    MESSAGE_TYPE_TRANSACTION: _ClassVar[MessageType]
    MESSAGE_TYPE_MIXED: _ClassVar[MessageType]
BROKER_ROLE_UNSPECIFIED: BrokerRole
BROKER_ROLE_ASYNC_MASTER: BrokerRole
BROKER_ROLE_SYNC_MASTER: BrokerRole
BROKER_ROLE_SLAVE: BrokerRole
PERMISSION_UNSPECIFIED: Permission
PERMISSION_READ: Permission
PERMISSION_WRITE: Permission
PERMISSION_READ_WRITE: Permission
MESSAGE_TYPE_UNSPECIFIED: MessageType
MESSAGE_TYPE_NORMAL: MessageType
MESSAGE_TYPE_FIFO: MessageType
MESSAGE_TYPE_DELAY: MessageType
MESSAGE_TYPE_TRANSACTION: MessageType
MESSAGE_TYPE_MIXED: MessageType

class TopicConfig(_message.Message):
    __slots__ = ("topic_name", "queue_nums", "perm", "message_type")
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    queue_nums: int
    perm: Permission
    message_type: MessageType
    def __init__(self, topic_name: _Optional[str] = ..., queue_nums: _Optional[int] = ..., perm: _Optional[_Union[Permission, str]] = ..., message_type: _Optional[_Union[MessageType, str]] = ...) -> None: ...

class DataVersion(_message.Message):
    __slots__ = ("timestamp_ms", "counter")
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    timestamp_ms: int
    counter: int
    def __init__(self, timestamp_ms: _Optional[int] = ..., counter: _Optional[int] = ...) -> None: ...

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "broker_addr", "ha_server_addr", "role", "topics", "max_phy_offset", "data_version")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_SERVER_ADDR_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MAX_PHY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str
    role: BrokerRole
    topics: _containers.RepeatedCompositeFieldContainer[TopicConfig]
    max_phy_offset: int
    data_version: DataVersion
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_addr: _Optional[str] = ..., ha_server_addr: _Optional[str] = ..., role: _Optional[_Union[BrokerRole, str]] = ..., topics: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ..., max_phy_offset: _Optional[int] = ..., data_version: _Optional[_Union[DataVersion, _Mapping]] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("master_addr", "ha_server_addr")
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_SERVER_ADDR_FIELD_NUMBER: _ClassVar[int]
    master_addr: str
    ha_server_addr: str
    def __init__(self, master_addr: _Optional[str] = ..., ha_server_addr: _Optional[str] = ...) -> None: ...

class UnregisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "broker_addr")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_addr: _Optional[str] = ...) -> None: ...

class UnregisterBrokerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetRouteInfoByTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueueData(_message.Message):
    __slots__ = ("broker_name", "queue_nums", "perm", "message_type")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    queue_nums: int
    perm: Permission
    message_type: MessageType
    def __init__(self, broker_name: _Optional[str] = ..., queue_nums: _Optional[int] = ..., perm: _Optional[_Union[Permission, str]] = ..., message_type: _Optional[_Union[MessageType, str]] = ...) -> None: ...

class BrokerData(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_addrs")
    class BrokerAddrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDRS_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_addrs: _containers.ScalarMap[int, str]
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_addrs: _Optional[_Mapping[int, str]] = ...) -> None: ...

class GetRouteInfoByTopicResponse(_message.Message):
    __slots__ = ("queue_datas", "broker_datas")
    QUEUE_DATAS_FIELD_NUMBER: _ClassVar[int]
    BROKER_DATAS_FIELD_NUMBER: _ClassVar[int]
    queue_datas: _containers.RepeatedCompositeFieldContainer[QueueData]
    broker_datas: _containers.RepeatedCompositeFieldContainer[BrokerData]
    def __init__(self, queue_datas: _Optional[_Iterable[_Union[QueueData, _Mapping]]] = ..., broker_datas: _Optional[_Iterable[_Union[BrokerData, _Mapping]]] = ...) -> None: ...

class GetBrokerClusterInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerInfo(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "broker_addr", "ha_server_addr", "role", "max_phy_offset", "last_update_timestamp_ms", "data_version")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_SERVER_ADDR_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MAX_PHY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str
    role: BrokerRole
    max_phy_offset: int
    last_update_timestamp_ms: int
    data_version: DataVersion
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_addr: _Optional[str] = ..., ha_server_addr: _Optional[str] = ..., role: _Optional[_Union[BrokerRole, str]] = ..., max_phy_offset: _Optional[int] = ..., last_update_timestamp_ms: _Optional[int] = ..., data_version: _Optional[_Union[DataVersion, _Mapping]] = ...) -> None: ...

class GetBrokerClusterInfoResponse(_message.Message):
    __slots__ = ("brokers", "now_ms")
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerInfo]
    now_ms: int
    def __init__(self, brokers: _Optional[_Iterable[_Union[BrokerInfo, _Mapping]]] = ..., now_ms: _Optional[int] = ...) -> None: ...
