"""The Redis outbox's connection: the client a URL names, its Lua scripts (scripts.py) each
registered plain and, for the scripts that take no new room, flagged to run at ``maxmemory``
too; and the one place redis-py's errors become the outbox's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import redis
import redis.exceptions as rex

from outbox.backends.redis import scripts as redis_scripts
from outbox.errors import (
    OutboxConfigError,
    OutboxError,
    OutboxNoSpaceError,
    OutboxUnavailableError,
)
from outbox.factory import redact

PREFIX_DEFAULT = "rocketbox:outbox"
# Connections the sidecar's threads share; a caller beyond them waits up to the timeout.
REDIS_CONNECTIONS_MAX = 64
REDIS_POOL_WAIT_S = 10.0
# Every call has a deadline (a half-open connection must not hang a resend worker forever).
REDIS_SOCKET_TIMEOUT_S = 10.0


def translated_error(e: rex.RedisError, what: str) -> OutboxError:
    if isinstance(e, rex.OutOfMemoryError):
        return OutboxNoSpaceError(f"redis outbox {what}: the server is at its maxmemory: {e}")
    transient = (
        rex.ConnectionError,
        rex.TimeoutError,
        rex.OutOfMemoryError,
        rex.ReadOnlyError,
        rex.MasterDownError,
        rex.TryAgainError,
        rex.ClusterDownError,
    )
    text = str(e)
    if isinstance(e, transient) or text.startswith(("MISCONF", "NOREPLICAS", "BUSY")):
        return OutboxUnavailableError(f"redis outbox {what}: {type(e).__name__}: {text}")
    # Anything else is a reply the outbox did not expect: trying again will not help.
    return OutboxError(f"redis outbox {what}: unexpected {type(e).__name__}: {text}")


@dataclass(frozen=True, slots=True)
class Lua:
    """One operation's script, and the same flagged to run at maxmemory (None: never so)."""

    plain: Any
    allow_oom: Any | None


def load_script(client: redis.Redis, body: str, *, allow_oom: bool = False) -> Lua:
    source = redis_scripts.PRELUDE + body
    flagged = client.register_script(redis_scripts.ALLOW_OOM + source) if allow_oom else None
    return Lua(client.register_script(source), flagged)


def redis_client(url: str) -> tuple[redis.Redis, str, str]:
    """The client a ``redis://`` URL names (its pool bounded, every call with a deadline), the
    key prefix, and how errors name the outbox."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefixes = [value for key, value in query if key == "prefix"]
    prefix = prefixes[-1] if prefixes else PREFIX_DEFAULT
    if not prefix:
        raise OutboxConfigError(f"outbox URL {redact(url)!r}: prefix must not be empty")
    if parts.path.strip("/") and not parts.path.strip("/").isdigit():
        raise OutboxConfigError(f"outbox URL {redact(url)!r}: the path is a database number")
    rest = urlencode([(key, value) for key, value in query if key != "prefix"])
    try:
        pool = redis.BlockingConnectionPool.from_url(
            parts._replace(query=rest).geturl(),
            max_connections=REDIS_CONNECTIONS_MAX,
            timeout=REDIS_POOL_WAIT_S,
            socket_timeout=REDIS_SOCKET_TIMEOUT_S,
            socket_connect_timeout=REDIS_SOCKET_TIMEOUT_S,
        )
    except (ValueError, TypeError) as e:
        raise OutboxConfigError(f"outbox URL {redact(url)!r}: {e}") from e
    where = f"{redact(url)} (prefix {prefix!r})"
    return redis.Redis(connection_pool=pool), prefix, where
