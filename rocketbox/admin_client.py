"""The CLI's side of ``rocketbox.admin.v1.BrokerAdmin``: calls with a deadline and failures as one
exception (admin_render.py renders the answers).

Every call has a deadline (``deadline_s``): an unreachable or silent broker is an error after it,
never a hang. Failures are ``AdminCallError``: ``unreachable`` when the broker could not be
reached or did not answer in time (UNAVAILABLE, DEADLINE_EXCEEDED), ``not_served`` when the
endpoint answered UNIMPLEMENTED (an Apache RocketMQ proxy serves only apache.rocketmq.v2, none of
rocketbox's admin services), otherwise the status code and details the broker answered with.
``call_error`` makes one from any gRPC failure, for the NameServer's client too
(cluster_cli.py); admin_errors.py turns it into what the operator reads and the exit code.

With ROCKETBOX_ACCESS_KEY and ROCKETBOX_SECRET_KEY set, every call is signed as RocketMQ's
clients sign (a broker with --auth wants an admin user's, or for a message lookup any user's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from rocketbox_api.admin.v1 import acl_admin_pb2_grpc, broker_admin_pb2_grpc
from rocketbox_api.admin.v1 import broker_admin_pb2 as apb
from rocketbox_api.credentials import CredentialsError, Signer, credentials_from_env

CALL_DEADLINE_S = 10.0
# The broker sends at most 16 MiB in one answer (grpc_receive_message_bytes_max).
RECEIVE_MESSAGE_BYTES_MAX = 32 * 1024 * 1024
TOPIC_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
RESET_TARGETS = ("FIRST", "LAST", "TIMESTAMP")
_UNREACHABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
# The services a failed call was made to, named as the operator reads them.
BROKER_ADMIN_SERVICE = "rocketbox's broker admin service"
NAMESRV_SERVICE = "rocketbox's NameServer service"
R = TypeVar("R")


class AdminCallError(Exception):
    """An admin call that failed; the text says why, for an operator."""

    def __init__(
        self,
        message: str,
        code: grpc.StatusCode | None,
        unreachable: bool,
        endpoint: str = "",
        service: str = BROKER_ADMIN_SERVICE,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.unreachable = unreachable
        self.endpoint = endpoint
        self.service = service

    @property
    def not_served(self) -> bool:
        """The endpoint lacks the service (or this method of it): another kind of server."""
        return self.code is grpc.StatusCode.UNIMPLEMENTED


def call_error(
    e: grpc.RpcError, endpoint: str, deadline_s: float, service: str, role: str
) -> AdminCallError:
    """``e`` (a call to ``service`` at ``endpoint``, the ``role`` in the text: "broker",
    "NameServer") as an AdminCallError."""
    code = e.code()
    details = e.details() or ""
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        why = f"did not answer within {deadline_s:g} s"
    elif code is grpc.StatusCode.UNAVAILABLE:
        why = "is unreachable"
    else:
        why = "answered"
    message = f"{role} {endpoint} {why}: {code.name}: {details}"
    return AdminCallError(message, code, code in _UNREACHABLE_CODES, endpoint, service)


def parse_endpoint(endpoint: str) -> str:
    """HOST:PORT ("[::1]:8081" for IPv6), checked; raises ValueError."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(f"{endpoint!r} is not HOST:PORT")
    return endpoint


class AdminClient:
    """One channel to one broker. Use as a context manager: the channel is closed on exit."""

    def __init__(self, endpoint: str, deadline_s: float = CALL_DEADLINE_S) -> None:
        self.endpoint = parse_endpoint(endpoint)
        try:
            credentials = credentials_from_env()
        except CredentialsError as e:
            raise AdminCallError(str(e), None, unreachable=False, endpoint=endpoint) from None
        self._signer = Signer(credentials)
        self._deadline_s = deadline_s
        self._channel = grpc.insecure_channel(
            endpoint, options=[("grpc.max_receive_message_length", RECEIVE_MESSAGE_BYTES_MAX)]
        )
        self._stub = broker_admin_pb2_grpc.BrokerAdminStub(self._channel)
        self.acl_stub = acl_admin_pb2_grpc.AclAdminServiceStub(self._channel)

    @property
    def deadline_s(self) -> float:
        return self._deadline_s

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._channel.close()

    def create_topic(
        self, topic: str, queue_nums: int | None, message_type: str
    ) -> apb.CreateTopicResponse:
        request = apb.CreateTopicRequest(topic=topic, message_type=f"MESSAGE_TYPE_{message_type}")
        if queue_nums is not None:
            request.queue_nums = queue_nums
        return self.call(self._stub.CreateTopic, request, apb.CreateTopicResponse)

    def list_topics(self) -> apb.ListTopicsResponse:
        return self.call(self._stub.ListTopics, apb.ListTopicsRequest(), apb.ListTopicsResponse)

    def describe_topic(self, topic: str) -> apb.DescribeTopicResponse:
        return self.call(
            self._stub.DescribeTopic,
            apb.DescribeTopicRequest(topic=topic),
            apb.DescribeTopicResponse,
        )

    def delete_topic(self, topic: str) -> apb.DeleteTopicResponse:
        return self.call(
            self._stub.DeleteTopic, apb.DeleteTopicRequest(topic=topic), apb.DeleteTopicResponse
        )

    def get_message(self, message_id: str) -> apb.GetMessageResponse:
        return self.call(
            self._stub.GetMessage,
            apb.GetMessageRequest(message_id=message_id),
            apb.GetMessageResponse,
        )

    def query_message(self, topic: str, key: str, max_num: int) -> apb.QueryMessageResponse:
        request = apb.QueryMessageRequest(topic=topic, key=key, max_num=max_num)
        return self.call(self._stub.QueryMessage, request, apb.QueryMessageResponse)

    def set_flow_control(self, on: bool, topic: str | None) -> apb.SetFlowControlResponse:
        request = apb.SetFlowControlRequest(on=on)
        if topic is not None:
            request.topic = topic
        return self.call(self._stub.SetFlowControl, request, apb.SetFlowControlResponse)

    def list_groups(self) -> apb.ListGroupsResponse:
        return self.call(self._stub.ListGroups, apb.ListGroupsRequest(), apb.ListGroupsResponse)

    def describe_group(self, group: str) -> apb.DescribeGroupResponse:
        return self.call(
            self._stub.DescribeGroup,
            apb.DescribeGroupRequest(group=group),
            apb.DescribeGroupResponse,
        )

    def create_group(
        self, group: str, orderly: bool, retry_max_times: int | None, broadcast: bool = False
    ) -> apb.CreateGroupResponse:
        request = apb.CreateGroupRequest(group=group, orderly=orderly, broadcast=broadcast)
        if retry_max_times is not None:
            request.retry_max_times = retry_max_times
        return self.call(self._stub.CreateGroup, request, apb.CreateGroupResponse)

    def delete_group(self, group: str) -> apb.DeleteGroupResponse:
        return self.call(
            self._stub.DeleteGroup, apb.DeleteGroupRequest(group=group), apb.DeleteGroupResponse
        )

    def reset_offset(
        self, group: str, topic: str, to: str, timestamp_ms: int | None
    ) -> apb.ResetOffsetResponse:
        """``to``: one of RESET_TARGETS; ``timestamp_ms`` with TIMESTAMP."""
        request = apb.ResetOffsetRequest(group=group, topic=topic, to=f"RESET_TARGET_{to}")
        if timestamp_ms is not None:
            request.timestamp_ms = timestamp_ms
        return self.call(self._stub.ResetOffset, request, apb.ResetOffsetResponse)

    def call(self, rpc: Callable[..., Any], request: Any, response_type: type[R]) -> R:
        """``rpc`` (a method of one of the stubs) with the deadline and the credentials."""
        metadata = self._signer.metadata()
        try:
            response = rpc(request, timeout=self._deadline_s, metadata=metadata)
        except grpc.RpcError as e:
            raise call_error(
                e, self.endpoint, self._deadline_s, BROKER_ADMIN_SERVICE, "broker"
            ) from e
        assert isinstance(response, response_type), type(response)
        return response


# -- answers as JSON-ready dicts ---------------------------------------------------------------
