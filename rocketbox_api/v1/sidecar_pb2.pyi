import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SpoolCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SPOOL_CAUSE_UNSPECIFIED: _ClassVar[SpoolCause]
    SPOOL_CAUSE_THROTTLED: _ClassVar[SpoolCause]
    SPOOL_CAUSE_UNAVAILABLE: _ClassVar[SpoolCause]
    SPOOL_CAUSE_AMBIGUOUS: _ClassVar[SpoolCause]
    SPOOL_CAUSE_FIFO_FENCE: _ClassVar[SpoolCause]
    SPOOL_CAUSE_UNAUTHORIZED: _ClassVar[SpoolCause]
    SPOOL_CAUSE_FORBIDDEN: _ClassVar[SpoolCause]
SPOOL_CAUSE_UNSPECIFIED: SpoolCause
SPOOL_CAUSE_THROTTLED: SpoolCause
SPOOL_CAUSE_UNAVAILABLE: SpoolCause
SPOOL_CAUSE_AMBIGUOUS: SpoolCause
SPOOL_CAUSE_FIFO_FENCE: SpoolCause
SPOOL_CAUSE_UNAUTHORIZED: SpoolCause
SPOOL_CAUSE_FORBIDDEN: SpoolCause

class Message(_message.Message):
    __slots__ = ("topic", "body", "tag", "keys", "message_group", "delivery_time", "user_properties", "message_id", "delivery_timeout")
    class UserPropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_GROUP_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_TIME_FIELD_NUMBER: _ClassVar[int]
    USER_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    body: bytes
    tag: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    message_group: str
    delivery_time: _timestamp_pb2.Timestamp
    user_properties: _containers.ScalarMap[str, str]
    message_id: str
    delivery_timeout: _duration_pb2.Duration
    def __init__(self, topic: _Optional[str] = ..., body: _Optional[bytes] = ..., tag: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., message_group: _Optional[str] = ..., delivery_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., user_properties: _Optional[_Mapping[str, str]] = ..., message_id: _Optional[str] = ..., delivery_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class SendRequest(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: Message
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ...) -> None: ...

class SendResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: SendResult
    def __init__(self, result: _Optional[_Union[SendResult, _Mapping]] = ...) -> None: ...

class SendBatchRequest(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class SendBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SendResult, _Mapping]]] = ...) -> None: ...

class SendStreamRequest(_message.Message):
    __slots__ = ("request_id", "message")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    message: Message
    def __init__(self, request_id: _Optional[int] = ..., message: _Optional[_Union[Message, _Mapping]] = ...) -> None: ...

class SendStreamResponse(_message.Message):
    __slots__ = ("request_id", "result")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    result: SendResult
    def __init__(self, request_id: _Optional[int] = ..., result: _Optional[_Union[SendResult, _Mapping]] = ...) -> None: ...

class SendResult(_message.Message):
    __slots__ = ("message_id", "stored", "spooled", "rejected")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    SPOOLED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    stored: Stored
    spooled: Spooled
    rejected: Rejection
    def __init__(self, message_id: _Optional[str] = ..., stored: _Optional[_Union[Stored, _Mapping]] = ..., spooled: _Optional[_Union[Spooled, _Mapping]] = ..., rejected: _Optional[_Union[Rejection, _Mapping]] = ...) -> None: ...

class Stored(_message.Message):
    __slots__ = ("broker_name", "queue_id", "queue_offset", "durable", "attempts")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    queue_id: int
    queue_offset: int
    durable: bool
    attempts: int
    def __init__(self, broker_name: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., durable: _Optional[bool] = ..., attempts: _Optional[int] = ...) -> None: ...

class Spooled(_message.Message):
    __slots__ = ("cause", "detail", "next_attempt_time", "maybe_stored")
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_TIME_FIELD_NUMBER: _ClassVar[int]
    MAYBE_STORED_FIELD_NUMBER: _ClassVar[int]
    cause: SpoolCause
    detail: str
    next_attempt_time: _timestamp_pb2.Timestamp
    maybe_stored: bool
    def __init__(self, cause: _Optional[_Union[SpoolCause, str]] = ..., detail: _Optional[str] = ..., next_attempt_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., maybe_stored: _Optional[bool] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ("code", "field", "reason", "retry_after")
    CODE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    code: int
    field: str
    reason: str
    retry_after: _duration_pb2.Duration
    def __init__(self, code: _Optional[int] = ..., field: _Optional[str] = ..., reason: _Optional[str] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...
