"""The front's methods on a gRPC server: the ones the sidecar answers itself, typed, and the
ones it forwards, raw (forward.py). One generic handler holds them all, so a method is either
answered here or forwarded, never registered twice, and each is guarded alike (auth.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import grpc
from rocketmq.grpc_protocol import service_pb2 as spb

from sidecar.rocketmq_front.auth import FrontAuth
from sidecar.rocketmq_front.forward import Forwarder
from sidecar.rocketmq_front.upstream import SERVICE

Context = grpc.aio.ServicerContext[Any, Any]
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


def typed_unary(
    behaviour: Callable[[Any, Context], Any], request_type: Any, response_type: Any
) -> Handler:
    del response_type  # the serializer is the message's own
    return grpc.unary_unary_rpc_method_handler(
        behaviour,
        request_deserializer=request_type.FromString,
        response_serializer=_serialize,
    )


def _serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())


def front_handler(
    forwarder: Forwarder, own: dict[str, Handler], auth: FrontAuth | None = None
) -> grpc.GenericRpcHandler:
    """The front's methods: ``own`` answered by the sidecar, every other one forwarded; with
    ``auth``, each verifies its caller first."""
    handlers = forwarder.handlers()
    handlers.update(own)
    if auth is not None:
        handlers = auth.guarded(handlers)
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


__all__ = ["front_handler", "spb", "typed_unary"]
