"""Open Telemetry streams held to the ACL as it changes, and transaction check-backs to it.

A Telemetry stream is authenticated when it opens and may live for days; the broker pushes a
producer's stream the half messages of its topics' open transactions (RecoverOrphanedTransaction
Command, body included) and takes its answer. So, with authentication:

- a transaction is checked back only with a producer whose user, at the time of the check, is
  still the user that opened the stream (not deleted, its secret and admin flag unchanged) and
  may PUB on the transaction's topic (``may_publish``, the registry's ``publish_gate``);
- after every change of the ACL (an admin's, or a slave taking its master's table), each open
  stream is held to the new table as if it opened now (``end_refused``): one whose user was
  deleted or changed is ended UNAUTHENTICATED, one whose Settings need a right the user has lost
  PERMISSION_DENIED, each with a message naming the user and the right. The client sees its
  stream fail and, like a client a RocketMQ proxy dropped, opens another, which is
  authenticated and authorised afresh.
"""

from __future__ import annotations

import grpc

from broker.auth.acl import Acl, Action, ResourceType
from broker.auth.errors import AuthError, ForbiddenError, UnauthenticatedError
from broker.grpc_service.access import Access
from broker.grpc_service.access_resources import settings_needs
from broker.grpc_service.client_registry import ClientRegistry, ClientSession, StreamEnd

METHOD = "Telemetry"


class StreamAccess:
    def __init__(self, acl: Acl, access: Access, clients: ClientRegistry) -> None:
        self._acl = acl
        self._access = access
        self._clients = clients

    def install(self) -> None:
        """Gate the registry's check-backs (``end_refused`` is the ACL store's listener)."""
        self._clients.publish_gate = self.may_publish

    def may_publish(self, session: ClientSession, topic: str) -> bool:
        """Whether ``session``'s user may be asked about a transaction on ``topic`` now."""
        if session.user is None:
            return True  # opened without authentication
        current = self._acl.users.get(session.user.access_key)
        return current == session.user and self._acl.allows(
            current, ResourceType.TOPIC, topic, Action.PUB
        )

    def refusal(self, session: ClientSession) -> AuthError | None:
        """Why ``session``'s stream would be refused if it opened now, with its Settings."""
        user = session.user
        if user is None:
            return None
        current = self._acl.users.get(user.access_key)
        if current is None:
            return UnauthenticatedError(f"user {user.access_key!r} was deleted")
        if current != user:
            return UnauthenticatedError(
                f"user {user.access_key!r} changed (its secret key or admin flag) since its "
                "stream opened"
            )
        if session.settings is not None:
            try:
                self._access.authorize(user, settings_needs(session.settings))
            except ForbiddenError as e:
                return e
        return None

    def end_refused(self) -> int:
        """Ends each open stream the ACL would now refuse; how many."""
        ended = 0
        for session in self._clients.sessions():
            refusal = self.refusal(session)
            if refusal is None:
                continue
            unauthenticated = isinstance(refusal, UnauthenticatedError)
            code = (
                grpc.StatusCode.UNAUTHENTICATED
                if unauthenticated
                else grpc.StatusCode.PERMISSION_DENIED
            )
            details = f"the ACL changed: {refusal}"
            self._access.refusal_log.log("ended %s of %s: %s", METHOD, session.client_id, details)
            self._access.count_refusal(METHOD, code.name)
            self._clients.end(session, StreamEnd(code, details))
            ended += 1
        return ended
