import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EntrySelection(_message.Message):
    __slots__ = ("message_ids", "all", "after_seq")
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    all: bool
    after_seq: int
    def __init__(self, message_ids: _Optional[_Iterable[str]] = ..., all: _Optional[bool] = ..., after_seq: _Optional[int] = ...) -> None: ...

class EntryChange(_message.Message):
    __slots__ = ("changed", "selected", "next_after_seq")
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    SELECTED_FIELD_NUMBER: _ClassVar[int]
    NEXT_AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    changed: int
    selected: int
    next_after_seq: int
    def __init__(self, changed: _Optional[int] = ..., selected: _Optional[int] = ..., next_after_seq: _Optional[int] = ...) -> None: ...

class RetryNowRequest(_message.Message):
    __slots__ = ("selection",)
    SELECTION_FIELD_NUMBER: _ClassVar[int]
    selection: EntrySelection
    def __init__(self, selection: _Optional[_Union[EntrySelection, _Mapping]] = ...) -> None: ...

class RetryNowResponse(_message.Message):
    __slots__ = ("change",)
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    change: EntryChange
    def __init__(self, change: _Optional[_Union[EntryChange, _Mapping]] = ...) -> None: ...

class RequeueRequest(_message.Message):
    __slots__ = ("selection",)
    SELECTION_FIELD_NUMBER: _ClassVar[int]
    selection: EntrySelection
    def __init__(self, selection: _Optional[_Union[EntrySelection, _Mapping]] = ...) -> None: ...

class RequeueResponse(_message.Message):
    __slots__ = ("change",)
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    change: EntryChange
    def __init__(self, change: _Optional[_Union[EntryChange, _Mapping]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("read_time", "pending", "in_flight", "delivered", "dead", "body_bytes", "oldest_pending_create_time", "next_due_time", "scanned", "depth", "depth_rows_left_out", "attempts")
    READ_TIME_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    DEAD_FIELD_NUMBER: _ClassVar[int]
    BODY_BYTES_FIELD_NUMBER: _ClassVar[int]
    OLDEST_PENDING_CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    NEXT_DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    SCANNED_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    DEPTH_ROWS_LEFT_OUT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    read_time: _timestamp_pb2.Timestamp
    pending: int
    in_flight: int
    delivered: int
    dead: int
    body_bytes: int
    oldest_pending_create_time: _timestamp_pb2.Timestamp
    next_due_time: _timestamp_pb2.Timestamp
    scanned: int
    depth: _containers.RepeatedCompositeFieldContainer[DepthRow]
    depth_rows_left_out: int
    attempts: _containers.RepeatedCompositeFieldContainer[AttemptsHistogram]
    def __init__(self, read_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., pending: _Optional[int] = ..., in_flight: _Optional[int] = ..., delivered: _Optional[int] = ..., dead: _Optional[int] = ..., body_bytes: _Optional[int] = ..., oldest_pending_create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., scanned: _Optional[int] = ..., depth: _Optional[_Iterable[_Union[DepthRow, _Mapping]]] = ..., depth_rows_left_out: _Optional[int] = ..., attempts: _Optional[_Iterable[_Union[AttemptsHistogram, _Mapping]]] = ...) -> None: ...

class DepthRow(_message.Message):
    __slots__ = ("state", "topic", "cause", "entries", "body_bytes")
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    BODY_BYTES_FIELD_NUMBER: _ClassVar[int]
    state: str
    topic: str
    cause: str
    entries: int
    body_bytes: int
    def __init__(self, state: _Optional[str] = ..., topic: _Optional[str] = ..., cause: _Optional[str] = ..., entries: _Optional[int] = ..., body_bytes: _Optional[int] = ...) -> None: ...

class AttemptsHistogram(_message.Message):
    __slots__ = ("state", "buckets")
    STATE_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    state: str
    buckets: _containers.RepeatedCompositeFieldContainer[AttemptsBucket]
    def __init__(self, state: _Optional[str] = ..., buckets: _Optional[_Iterable[_Union[AttemptsBucket, _Mapping]]] = ...) -> None: ...

class AttemptsBucket(_message.Message):
    __slots__ = ("label", "entries")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    label: str
    entries: int
    def __init__(self, label: _Optional[str] = ..., entries: _Optional[int] = ...) -> None: ...
