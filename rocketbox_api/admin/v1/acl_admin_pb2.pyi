from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_UNSPECIFIED: _ClassVar[Decision]
    DECISION_ALLOW: _ClassVar[Decision]
    DECISION_DENY: _ClassVar[Decision]
DECISION_UNSPECIFIED: Decision
DECISION_ALLOW: Decision
DECISION_DENY: Decision

class CreateUserRequest(_message.Message):
    __slots__ = ("access_key", "secret_key", "admin", "update")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_KEY_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    UPDATE_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    secret_key: str
    admin: bool
    update: bool
    def __init__(self, access_key: _Optional[str] = ..., secret_key: _Optional[str] = ..., admin: _Optional[bool] = ..., update: _Optional[bool] = ...) -> None: ...

class CreateUserResponse(_message.Message):
    __slots__ = ("created",)
    CREATED_FIELD_NUMBER: _ClassVar[int]
    created: bool
    def __init__(self, created: _Optional[bool] = ...) -> None: ...

class DeleteUserRequest(_message.Message):
    __slots__ = ("access_key",)
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    def __init__(self, access_key: _Optional[str] = ...) -> None: ...

class DeleteUserResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UserView(_message.Message):
    __slots__ = ("access_key", "admin", "rule_count")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    RULE_COUNT_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    admin: bool
    rule_count: int
    def __init__(self, access_key: _Optional[str] = ..., admin: _Optional[bool] = ..., rule_count: _Optional[int] = ...) -> None: ...

class ListUsersResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[UserView]
    def __init__(self, users: _Optional[_Iterable[_Union[UserView, _Mapping]]] = ...) -> None: ...

class GrantRequest(_message.Message):
    __slots__ = ("access_key", "resource", "actions", "decision")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    resource: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    decision: Decision
    def __init__(self, access_key: _Optional[str] = ..., resource: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., decision: _Optional[_Union[Decision, str]] = ...) -> None: ...

class GrantResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RevokeRequest(_message.Message):
    __slots__ = ("access_key", "resource", "actions")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    resource: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, access_key: _Optional[str] = ..., resource: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ...) -> None: ...

class RevokeResponse(_message.Message):
    __slots__ = ("rules_changed",)
    RULES_CHANGED_FIELD_NUMBER: _ClassVar[int]
    rules_changed: int
    def __init__(self, rules_changed: _Optional[int] = ...) -> None: ...

class ListRulesRequest(_message.Message):
    __slots__ = ("access_key",)
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    def __init__(self, access_key: _Optional[str] = ...) -> None: ...

class RuleView(_message.Message):
    __slots__ = ("access_key", "resource", "actions", "decision")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    resource: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    decision: Decision
    def __init__(self, access_key: _Optional[str] = ..., resource: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., decision: _Optional[_Union[Decision, str]] = ...) -> None: ...

class ListRulesResponse(_message.Message):
    __slots__ = ("rules",)
    RULES_FIELD_NUMBER: _ClassVar[int]
    rules: _containers.RepeatedCompositeFieldContainer[RuleView]
    def __init__(self, rules: _Optional[_Iterable[_Union[RuleView, _Mapping]]] = ...) -> None: ...
