"""Namespaces: two apps' ``Orders`` are two topics (docs/rocketmq-protocol.md §7).

A client names its namespace in the ``x-mq-namespace`` metadata (the Python client also fills
every Resource's ``resource_namespace``, the Node client does not). The broker stores a
namespaced topic or group as ``<namespace>%<name>``, as RocketMQ's proxy does, and its system
names as ``%RETRY%<namespace>%<group>`` and ``%DLQ%<namespace>%<group>``. So everything behind
the gRPC edge (topics, groups, consume progress, ACL resources, the reconciliation) sees one
name per namespaced resource, and nothing else needs to know namespaces exist.

The edge (access.py) rewrites every Resource of a namespaced request on its way in (``wrap``)
and every Resource of its answer on the way out (``unwrap``): names lose the prefix and carry
the client's namespace in ``resource_namespace`` again. Requests without a namespace are not
walked at all.
"""

from __future__ import annotations

import re

from google.protobuf.message import Message
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker.grpc_service.protocol import Code, ProtocolError
from broker.grpc_service.request_limits import RESOURCE_NAMESPACE_LENGTH_MAX
from rocketbox_api.message_rules import shown
from rocketbox_api.names import namespaced

NAMESPACE_HEADER = "x-mq-namespace"
NAMESPACE_LENGTH_MAX = RESOURCE_NAMESPACE_LENGTH_MAX
NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9_-]+")
SYSTEM_PREFIXES = ("%RETRY%", "%DLQ%")
_RESOURCE = pb.Resource.DESCRIPTOR


def validate_namespace(namespace: str, from_header: bool) -> None:
    """A namespace from the metadata is refused BAD_REQUEST naming the header; one from a
    Resource ILLEGAL_TOPIC naming ``resource_namespace``, as the proxy's topic checks do."""
    if len(namespace) > NAMESPACE_LENGTH_MAX or not NAMESPACE_PATTERN.fullmatch(namespace):
        where = NAMESPACE_HEADER if from_header else "resource_namespace"
        raise ProtocolError(
            Code.BAD_REQUEST if from_header else Code.ILLEGAL_TOPIC,
            f"{where} {shown(namespace)}: 1..{NAMESPACE_LENGTH_MAX} characters of a-zA-Z0-9_-",
        )


def wrap_name(namespace: str, name: str) -> str:
    if not name:
        return name
    for prefix in SYSTEM_PREFIXES:
        if name.startswith(prefix):
            return prefix + wrap_name(namespace, name[len(prefix) :])
    return name if name.startswith(namespaced(namespace, "")) else namespaced(namespace, name)


def unwrap_name(namespace: str, name: str) -> str:
    for prefix in SYSTEM_PREFIXES:
        if name.startswith(prefix):
            return prefix + unwrap_name(namespace, name[len(prefix) :])
    stem = namespaced(namespace, "")
    return name[len(stem) :] if name.startswith(stem) else name


def _wrap_resource(resource: pb.Resource, namespace: str) -> None:
    resource.name = wrap_name(namespace, resource.name)
    resource.resource_namespace = ""


def _unwrap_resource(resource: pb.Resource, namespace: str) -> None:
    if resource.name:
        resource.name = unwrap_name(namespace, resource.name)
        resource.resource_namespace = namespace


def _walk(message: Message, namespace: str, wrap: bool) -> None:
    for field, value in message.ListFields():
        kind = field.message_type
        if kind is None or kind.GetOptions().map_entry:
            continue
        repeated = field.is_repeated
        items = value if repeated else (value,)
        if kind is _RESOURCE:
            for resource in items:
                (_wrap_resource if wrap else _unwrap_resource)(resource, namespace)
        else:
            for item in items:
                _walk(item, namespace, wrap)


def wrap(message: Message, namespace: str) -> None:
    """Every Resource of a request, in place: ``name`` → ``<namespace>%name``."""
    _walk(message, namespace, True)


def unwrap(message: Message, namespace: str) -> None:
    """Every Resource of an answer, in place: the stored name → the client's, with its
    namespace in ``resource_namespace``."""
    _walk(message, namespace, False)
