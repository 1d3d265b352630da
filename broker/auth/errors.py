"""The refusals of broker/auth::

    AuthError                 (not retriable as is: the credentials or the rules must change)
    ├── UnauthenticatedError  no credentials, a malformed or wrong signature, a date too far off
    └── ForbiddenError        a known user without the right to an action on a resource

The message never holds a secret or a signature: it names the access key, the resource and the
action, which is what an operator needs to grant the right.
"""

from __future__ import annotations


class AuthError(Exception):
    retriable = False


class UnauthenticatedError(AuthError):
    pass


class ForbiddenError(AuthError):
    pass


class AclInputError(ValueError):
    """A user or rule given to the admin service that breaks a rule or a limit; says which."""
