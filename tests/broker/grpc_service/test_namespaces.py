"""Namespaced names (broker/grpc_service/namespaces.py): a name is stored as NAMESPACE%NAME and
the broker's own as %RETRY%NAMESPACE%GROUP / %DLQ%NAMESPACE%GROUP; a request's every Resource is
rewritten, and an answer's rewritten back with its namespace; wrapping twice changes nothing; a
namespace outside its charset or length is refused naming where it came from."""

from __future__ import annotations

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.grpc_service.namespaces import unwrap, unwrap_name, validate_namespace, wrap, wrap_name
from broker.grpc_service.protocol import Code, ProtocolError


@pytest.mark.parametrize(
    ("name", "stored"),
    [
        ("Orders", "shop%Orders"),
        ("%RETRY%billing", "%RETRY%shop%billing"),
        ("%DLQ%billing", "%DLQ%shop%billing"),
        ("shop%Orders", "shop%Orders"),
        ("", ""),
    ],
)
def test_names_are_stored_with_their_namespace_and_given_back(name: str, stored: str) -> None:
    assert wrap_name("shop", name) == stored
    assert wrap_name("shop", stored) == stored
    assert unwrap_name("shop", stored) == name.removeprefix("shop%")


def test_every_resource_of_a_request_and_its_answer_is_rewritten() -> None:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name="billing", resource_namespace="shop"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="Orders")),
    )
    wrap(request, "shop")
    assert (request.group.name, request.message_queue.topic.name) == ("shop%billing", "shop%Orders")
    assert request.group.resource_namespace == ""
    answer = spb.ReceiveMessageResponse(message=pb.Message(topic=pb.Resource(name="shop%Orders")))
    unwrap(answer, "shop")
    assert (answer.message.topic.name, answer.message.topic.resource_namespace) == (
        "Orders",
        "shop",
    )


@pytest.mark.parametrize(
    ("namespace", "from_header", "code", "named"),
    [
        ("a b", True, Code.BAD_REQUEST, "x-mq-namespace"),
        ("x" * 128, False, Code.ILLEGAL_TOPIC, "resource_namespace"),
        ("shop%in", True, Code.BAD_REQUEST, "a-zA-Z0-9_-"),
    ],
)
def test_a_bad_namespace_is_refused_naming_its_source(
    namespace: str, from_header: bool, code: int, named: str
) -> None:
    with pytest.raises(ProtocolError) as refused:
        validate_namespace(namespace, from_header)
    assert refused.value.code == code
    assert named in refused.value.message
