"""Authentication and authorisation as RocketMQ 5 does them (a subset of its ACL 2.0).

- acl.py: users (an access key, a secret key, admin or not) and each user's rules: ALLOW or DENY
  of PUB and SUB on topics and groups, by exact name or prefix. A pure table, no I/O.
- acl_store.py: the table on disk (``config/acl.json``), secret keys encrypted at rest.
- authenticator.py: the request's ``authorization`` metadata checked against the users, with a
  bound on clock skew.

The gRPC edge (broker/grpc_service/access.py) applies them to every call of both services.
Errors (errors.py): ``UnauthenticatedError`` (no or bad credentials) and ``ForbiddenError``
(a known user without the right); neither is retriable as is.
"""
