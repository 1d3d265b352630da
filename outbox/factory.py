"""Open an outbox by URL. The scheme picks the backend; each is imported only when used.

| URL | backend (under outbox/backends/) |
|---|---|
| ``memory://`` | memory.py: the reference; nothing survives the process |
| ``rocksdb:///abs/path`` or ``rocksdb://./rel/path`` | rocksdb/ |
| ``redis://[:password@]host:port/db?prefix=NAME`` (and ``rediss://``) | redis/ |
| ``redis+sentinel://[:pw@]host:port[,host:port…]/SERVICE[/db]?prefix=NAME`` | redis/ (Sentinel) |
| ``redis+cluster://[:password@]host:port[,host:port…]/?prefix=NAME`` | redis/ (Cluster) |
| ``mysql+pymysql://user:password@host:port/db?table=NAME`` | mysql/ |
"""

from __future__ import annotations

import difflib
import importlib
from urllib.parse import unquote, urlsplit

from outbox.entry import OutboxLimits
from outbox.errors import OutboxConfigError
from outbox.outbox import Outbox

# scheme → (module, class)
BACKENDS: dict[str, tuple[str, str]] = {
    "memory": ("outbox.backends.memory", "MemoryOutbox"),
    "rocksdb": ("outbox.backends.rocksdb.outbox", "RocksDBOutbox"),
    "redis": ("outbox.backends.redis.outbox", "RedisOutbox"),
    "rediss": ("outbox.backends.redis.outbox", "RedisOutbox"),
    "redis+sentinel": ("outbox.backends.redis.outbox", "RedisOutbox"),
    "redis+cluster": ("outbox.backends.redis.outbox", "RedisOutbox"),
    "mysql+pymysql": ("outbox.backends.mysql.outbox", "MySQLOutbox"),
}


def open_outbox(url: str, limits: OutboxLimits | None = None, *, create: bool = True) -> Outbox:
    """The backend ``url`` names, opened (and its schema created when missing; with
    ``create=False``, OutboxNotFoundError instead: admin commands never create an outbox)."""
    scheme = urlsplit(url).scheme.lower()
    if scheme not in BACKENDS:
        close = difflib.get_close_matches(scheme, BACKENDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise OutboxConfigError(
            f"outbox URL {redact(url)!r}: unknown scheme {scheme!r}{hint} "
            f"(known: {', '.join(sorted(BACKENDS))})"
        )
    return backend_class(scheme).from_url(url, limits or OutboxLimits(), create=create)


def backend_class(scheme: str) -> type[Outbox]:
    """The backend class of a known URL scheme (imported now): its ``features``, say."""
    module_name, class_name = BACKENDS[scheme]
    backend: type[Outbox] = getattr(importlib.import_module(module_name), class_name)
    return backend


def redact(url: str) -> str:
    """The URL with its password replaced, for logs and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def hide_password(text: str, url: str) -> str:
    """``text`` (an error message, say) without ``url``'s password, as typed or percent-decoded:
    for messages that may quote a driver quoting the URL."""
    try:
        password = urlsplit(url).password
    except ValueError:  # a URL too malformed to have one
        return text
    for form in sorted({password, unquote(password)} if password else (), key=len, reverse=True):
        text = text.replace(form, "***")
    return text
