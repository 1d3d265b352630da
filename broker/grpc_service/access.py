"""Who may do what, at the broker's gRPC edge: namespaces, authentication and the ACL.

Each handler of MessagingService is wrapped once, when the servicer is registered (not by a
per-call interceptor), in this order:

1. the namespace (namespaces.py): from ``x-mq-namespace``, else the request's first
   ``resource_namespace``; a namespaced request's resources are rewritten to their stored names,
   and its answer's back;
2. with ``--auth``, the caller (broker/auth/authenticator.py), then the ACL over the resources
   the call touches (access_resources.py), by their stored names, so a namespace is part of the
   resource. A refusal is the call's answer: UNAUTHORIZED or FORBIDDEN in its Status, naming the
   access key, the action and the resource; nothing of a refused send is stored. A Telemetry
   stream is authenticated once, when it opens (it may live for days), and each Settings it
   carries is authorised; a refused one ends the stream with its status. Its user is kept with
   it, so that each change of the ACL holds it to the new table and a transaction is checked
   back only with a user still allowed (stream_access.py).

The admin services (BrokerAdmin, AclAdminService) are for admin users alone, except that any
user may look a message up by id (the sidecar asks before resending) and gets the copies of
topics it may PUB or SUB, and may query by key a topic it may SUB: RocketMQ 5 asks SUB (or GET,
which this ACL does not have) on the topic for QUERY_MESSAGE, a read of its messages, which PUB
does not give. They answer gRPC UNAUTHENTICATED or PERMISSION_DENIED; a refused query names the
topic and the action it needs. The health service stays open (probes carry no credentials).

Refusals are logged at WARNING, rate-limited: never a secret, a signature or a token.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, NoReturn

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from prometheus_client import Counter
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.auth.acl import Acl, Action, ResourceType, User
from broker.auth.authenticator import Authenticator
from broker.auth.errors import AuthError, ForbiddenError, UnauthenticatedError
from broker.grpc_service.access_resources import NEEDS, PUB_OR_SUB, Need, settings_needs
from broker.grpc_service.access_resources import namespace_of as first_namespace
from broker.grpc_service.namespaces import NAMESPACE_HEADER, unwrap, validate_namespace, wrap
from broker.grpc_service.protocol import Code, ProtocolError, status
from rocketbox_api.rate_limited_log import LOG_INTERVAL_S_DEFAULT, RateLimitedLog

LOG = logging.getLogger(__name__)
Context = Any  # grpc.aio.ServicerContext
MESSAGING = spb.DESCRIPTOR.services_by_name["MessagingService"]


def _metadata(context: Context) -> dict[str, str]:
    return {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}


class Access:
    def __init__(
        self,
        acl: Acl,
        authenticator: Authenticator | None,
        refusals: Counter | None = None,
        log_interval_s: float = LOG_INTERVAL_S_DEFAULT,
    ) -> None:
        """``authenticator`` None: authentication is off, every caller may do everything.
        ``refusals``: counted by method and code (broker/metrics.py)."""
        self._refusals = refusals
        self._acl = acl
        self._authenticator = authenticator
        self.refusal_log = RateLimitedLog(LOG, logging.WARNING, log_interval_s)

    # -- apache.rocketmq.v2 ----------------------------------------------------------------
    def messaging(self, servicer: Any) -> Any:
        """An object with the servicer's methods, each guarded, for add_..._to_server."""
        guarded = type("GuardedMessagingService", (), {})()
        for method in MESSAGING.methods:
            inner = getattr(servicer, method.name)
            if method.client_streaming:
                behaviour = self._telemetry(inner)
            elif method.server_streaming:
                behaviour = self._unary_stream(method.name, inner, method.output_type)
            else:
                behaviour = self._unary(method.name, inner, method.output_type)
            setattr(guarded, method.name, behaviour)
        return guarded

    def _admit(self, name: str, request: Any, metadata: Mapping[str, str]) -> str:
        """The request's namespace (its resources rewritten); raises its refusal."""
        namespace = metadata.get(NAMESPACE_HEADER, "")
        from_header = bool(namespace)
        namespace = namespace or first_namespace(name, request)
        if namespace:
            validate_namespace(namespace, from_header)
            wrap(request, namespace)
        if self._authenticator is not None:
            user = self._authenticator.user_of(metadata)
            self.authorize(user, NEEDS[name](request))
        return namespace

    def authorize(self, user: User, needs: Iterable[Need]) -> None:
        if user.admin:
            return
        for resource_type, name, actions in needs:
            if name and not self._acl.allows_any(user, resource_type, name, actions):
                wanted = " or ".join(a.value for a in actions)
                raise ForbiddenError(
                    f"user {user.access_key!r} has no {wanted} right on "
                    f"{resource_type.value}:{name}"
                )

    def _refusal(self, name: str, error: Exception) -> pb.Status:
        if isinstance(error, ProtocolError):
            answer = error.to_status()
        else:
            code = Code.UNAUTHORIZED if isinstance(error, UnauthenticatedError) else Code.FORBIDDEN
            self.refusal_log.log("refused %s: %s %s", name, Code.Name(code), error)
            answer = status(code, str(error))
        self.count_refusal(name, Code.Name(answer.code))
        return answer

    def count_refusal(self, name: str, code: str) -> None:
        if self._refusals is not None:
            self._refusals.labels(name, code).inc()

    def _unary(self, name: str, inner: Any, output: Any) -> Any:
        reply_type = message_factory.GetMessageClass(output)

        async def behaviour(request: Any, context: Context) -> Any:
            try:
                namespace = self._admit(name, request, _metadata(context))
            except (AuthError, ProtocolError) as e:
                return reply_type(status=self._refusal(name, e))
            response = await inner(request, context)
            if namespace:
                unwrap(response, namespace)
            return response

        return behaviour

    def _unary_stream(self, name: str, inner: Any, output: Any) -> Any:
        reply_type = message_factory.GetMessageClass(output)

        async def behaviour(request: Any, context: Context) -> AsyncIterator[Any]:
            try:
                namespace = self._admit(name, request, _metadata(context))
            except (AuthError, ProtocolError) as e:
                yield reply_type(status=self._refusal(name, e))
                return
            async for response in inner(request, context):
                if namespace:
                    unwrap(response, namespace)
                yield response

        return behaviour

    def _telemetry(self, inner: Any) -> Any:
        async def behaviour(
            commands: AsyncIterator[spb.TelemetryCommand], context: Context
        ) -> AsyncIterator[spb.TelemetryCommand]:
            metadata = _metadata(context)
            try:
                namespace = metadata.get(NAMESPACE_HEADER, "")
                if namespace:
                    validate_namespace(namespace, from_header=True)
                user = (
                    self._authenticator.user_of(metadata)
                    if self._authenticator is not None
                    else None
                )
            except (AuthError, ProtocolError) as e:
                yield spb.TelemetryCommand(status=self._refusal("Telemetry", e))
                return
            checked = _CheckedCommands(commands, namespace, user, self)
            async for response in inner(checked, context, user):
                if namespace:
                    unwrap(response, namespace)
                yield response
            if checked.refusal is not None:
                yield spb.TelemetryCommand(status=self._refusal("Telemetry", checked.refusal))

        return behaviour

    # -- the admin services ------------------------------------------------------------------
    def admin(self, servicer: Any, service: ServiceDescriptor, base: type) -> Any:
        """``servicer`` guarded for admins (the module docstring), as an instance of ``base``
        (the generated servicer class); unchanged when authentication is off."""
        if self._authenticator is None:
            return servicer
        methods = {
            m.name: self._admin_call(m.name, getattr(servicer, m.name)) for m in service.methods
        }
        return type(f"Guarded{service.name}", (base,), methods)()

    def _admin_call(self, name: str, inner: Any) -> Any:
        assert inspect.iscoroutinefunction(inner), name  # every admin call is unary

        async def behaviour(_self: Any, request: Any, context: Context) -> Any:
            authenticator = self._authenticator
            assert authenticator is not None
            try:
                user = authenticator.user_of(_metadata(context))
            except UnauthenticatedError as e:
                self.refusal_log.log("refused %s: %s", name, e)
                self.count_refusal(name, "UNAUTHENTICATED")
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
            if user.admin:
                return await inner(request, context)
            if name == "QueryMessage":
                # No topic: the call's own validation names the missing field.
                topic = request.topic
                if not topic or self._acl.allows(user, ResourceType.TOPIC, topic, Action.SUB):
                    return await inner(request, context)
                text = (
                    f"user {user.access_key!r} has no SUB right on {ResourceType.TOPIC.value}:"
                    f"{topic}: QueryMessage reads the topic's messages, which needs SUB on it"
                )
                return await self._admin_refusal(context, name, text)
            if name == "GetMessage":
                response = await inner(request, context)
                kept = [m for m in response.messages if self._may_see(user, _real_topic(m))]
                del response.messages[:]
                response.messages.extend(kept)
                if not kept:
                    await context.abort(grpc.StatusCode.NOT_FOUND, "no such message")
                return response
            text = f"user {user.access_key!r} is not an admin: {name} is for admins"
            return await self._admin_refusal(context, name, text)

        return behaviour

    async def _admin_refusal(self, context: Context, name: str, text: str) -> NoReturn:
        self.refusal_log.log("refused %s: %s", name, text)
        self.count_refusal(name, "PERMISSION_DENIED")
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, text)
        raise AssertionError("abort returns only by raising")

    def _may_see(self, user: User, topic: str) -> bool:
        return self._acl.allows_any(user, ResourceType.TOPIC, topic, PUB_OR_SUB)


def _real_topic(message: Any) -> str:
    real: str = message.system_properties.get("REAL_TOPIC", "")
    return real or str(message.topic)


class _CheckedCommands:
    """A Telemetry stream's commands, namespaced and authorised; a refused Settings ends it and
    is kept in ``refusal``."""

    def __init__(
        self,
        commands: AsyncIterator[spb.TelemetryCommand],
        namespace: str,
        user: User | None,
        access: Access,
    ) -> None:
        self._commands = commands
        self._namespace = namespace
        self._user = user
        self._access = access
        self.refusal: ForbiddenError | None = None

    def __aiter__(self) -> _CheckedCommands:
        return self

    async def __anext__(self) -> spb.TelemetryCommand:
        if self.refusal is not None:
            raise StopAsyncIteration
        command = await self._commands.__anext__()
        if self._namespace:
            wrap(command, self._namespace)
        if self._user is not None and command.HasField("settings"):
            try:
                self._access.authorize(self._user, settings_needs(command.settings))
            except ForbiddenError as e:
                self.refusal = e
                raise StopAsyncIteration from None
        return command
