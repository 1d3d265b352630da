"""``rocketbox.admin.v1.AclAdminService``: users and their rules (proto/.../acl_admin.proto),
and the composition of the broker's access layer (``add_guarded_servicers``).

Every change is written to config/acl.json before it is answered: an answered grant survives a
restart. Changes take effect on the next call (the table is read per call), and on open
Telemetry streams before the change is answered: a stream the new table would refuse is ended
(stream_access.py).
"""

from __future__ import annotations

from typing import Any

import grpc
from grpc_health.v1 import health_pb2_grpc
from prometheus_client import Counter
from rocketmq.grpc_protocol import service_pb2_grpc

from broker.auth.acl import Decision, ResourcePattern, parse_actions
from broker.auth.acl_store import ACL_FILE_NAME, AclStore
from broker.auth.authenticator import Authenticator
from broker.auth.errors import AclInputError
from broker.config import BrokerConfig
from broker.grpc_service.access import Access
from broker.grpc_service.client_registry import ClientRegistry
from broker.grpc_service.stream_access import StreamAccess
from rocketbox_api.admin.v1 import acl_admin_pb2 as apb
from rocketbox_api.admin.v1 import acl_admin_pb2_grpc, broker_admin_pb2, broker_admin_pb2_grpc

Context = grpc.aio.ServicerContext[Any, Any]
_DECISIONS = {apb.DECISION_ALLOW: Decision.ALLOW, apb.DECISION_DENY: Decision.DENY}
_PB_DECISIONS = {v: k for k, v in _DECISIONS.items()}


class AclAdminService(acl_admin_pb2_grpc.AclAdminServiceServicer):  # type: ignore[misc]  # untyped generated stubs
    def __init__(self, store: AclStore) -> None:
        self._store = store

    async def CreateUser(  # noqa: N802 - the protocol's method name
        self, request: apb.CreateUserRequest, context: Context
    ) -> apb.CreateUserResponse:
        exists = request.access_key in self._store.acl.users
        if exists and not request.update:
            await context.abort(
                grpc.StatusCode.ALREADY_EXISTS,
                f"user {request.access_key!r} exists (update it with update=true)",
            )
        try:
            self._store.put_user(request.access_key, request.secret_key, request.admin)
        except AclInputError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        await self._store.save()
        return apb.CreateUserResponse(created=not exists)

    async def DeleteUser(  # noqa: N802 - the protocol's method name
        self, request: apb.DeleteUserRequest, context: Context
    ) -> apb.DeleteUserResponse:
        if not self._store.acl.delete_user(request.access_key):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no user {request.access_key!r}")
        await self._store.save()
        return apb.DeleteUserResponse()

    async def ListUsers(  # noqa: N802 - the protocol's method name
        self, request: apb.ListUsersRequest, context: Context
    ) -> apb.ListUsersResponse:
        acl = self._store.acl
        return apb.ListUsersResponse(
            users=[
                apb.UserView(
                    access_key=u.access_key,
                    admin=u.admin,
                    rule_count=len(acl.rules.get(u.access_key, ())),
                )
                for u in sorted(acl.users.values(), key=lambda u: u.access_key)
            ]
        )

    async def Grant(  # noqa: N802 - the protocol's method name
        self, request: apb.GrantRequest, context: Context
    ) -> apb.GrantResponse:
        try:
            self._store.acl.grant(
                request.access_key,
                ResourcePattern.parse(request.resource),
                parse_actions(request.actions),
                _DECISIONS.get(request.decision, Decision.ALLOW),
            )
        except AclInputError as e:
            code = (
                grpc.StatusCode.NOT_FOUND
                if request.access_key not in self._store.acl.users
                else grpc.StatusCode.INVALID_ARGUMENT
            )
            await context.abort(code, str(e))
        await self._store.save()
        return apb.GrantResponse()

    async def Revoke(  # noqa: N802 - the protocol's method name
        self, request: apb.RevokeRequest, context: Context
    ) -> apb.RevokeResponse:
        if request.access_key not in self._store.acl.users:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no user {request.access_key!r}")
        try:
            changed = self._store.acl.revoke(
                request.access_key,
                ResourcePattern.parse(request.resource),
                parse_actions(request.actions or ["ALL"]),
            )
        except AclInputError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        await self._store.save()
        return apb.RevokeResponse(rules_changed=changed)

    async def ListRules(  # noqa: N802 - the protocol's method name
        self, request: apb.ListRulesRequest, context: Context
    ) -> apb.ListRulesResponse:
        acl = self._store.acl
        if request.access_key and request.access_key not in acl.users:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no user {request.access_key!r}")
        keys = [request.access_key] if request.access_key else sorted(acl.rules)
        return apb.ListRulesResponse(
            rules=[
                apb.RuleView(
                    access_key=key,
                    resource=str(rule.pattern),
                    actions=sorted(a.value for a in rule.actions),
                    decision=apb.DECISION_ALLOW
                    if rule.decision is Decision.ALLOW
                    else apb.DECISION_DENY,
                )
                for key in keys
                for rule in acl.rules.get(key, ())
            ]
        )


def open_acl(cfg: BrokerConfig) -> AclStore:
    """The ACL table, its bootstrap admin put in (AclFileError naming the file if unreadable)."""
    store = AclStore(cfg.config_dir / ACL_FILE_NAME, cfg.acl_key_file)
    if cfg.auth_admin is not None:
        store.put_user(cfg.auth_admin.access_key, cfg.auth_admin.secret_key, admin=True)
        store.snapshot()  # encrypts now: a key that cannot is found at start
    return store


def add_guarded_servicers(
    server: grpc.aio.Server,
    cfg: BrokerConfig,
    messaging: Any,
    admin: broker_admin_pb2_grpc.BrokerAdminServicer,
    health: health_pb2_grpc.HealthServicer,
    refusals: Counter | None = None,
    clients: ClientRegistry | None = None,
) -> AclStore:
    """Registers the broker's services behind its access layer (access.py); ``refusals``
    counts what it refuses; ``clients``' streams are held to the ACL (stream_access.py)."""
    store = open_acl(cfg)
    authenticator = (
        Authenticator(store.acl.users, cfg.auth_clock_skew_s) if cfg.auth_enabled else None
    )
    access = Access(store.acl, authenticator, refusals)
    if authenticator is not None and clients is not None:
        streams = StreamAccess(store.acl, access, clients)
        streams.install()
        store.add_listener(streams.end_refused)
    service_pb2_grpc.add_MessagingServiceServicer_to_server(access.messaging(messaging), server)
    broker_admin_pb2_grpc.add_BrokerAdminServicer_to_server(
        access.admin(
            admin,
            broker_admin_pb2.DESCRIPTOR.services_by_name["BrokerAdmin"],
            broker_admin_pb2_grpc.BrokerAdminServicer,
        ),
        server,
    )
    acl_admin_pb2_grpc.add_AclAdminServiceServicer_to_server(
        access.admin(
            AclAdminService(store),
            apb.DESCRIPTOR.services_by_name["AclAdminService"],
            acl_admin_pb2_grpc.AclAdminServiceServicer,
        ),
        server,
    )
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    return store
