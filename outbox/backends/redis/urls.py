"""The Redis outbox's URLs: which Redis (one server, Sentinel's master, a Cluster), the key
prefix and its hash tag, and the replicas a write waits for.

- ``redis://[[user]:password@]host:port/db?prefix=NAME`` (``rediss://``: TLS): one server.
- ``redis+sentinel://[[user]:password@]host:port[,host:port…]/SERVICE[/db]?prefix=NAME``: the
  master the Sentinels (the hosts) name for SERVICE, found again after a failover.
- ``redis+cluster://[[user]:password@]host:port[,host:port…][/0]?prefix=NAME``: a Redis
  Cluster; the hosts are seeds, the rest is discovered.

Options of every form (query parameters):

- ``prefix`` (default ``rocketbox:outbox``) starts every key. On a Cluster every key of the
  outbox must hash to one slot, so the prefix is hash-tagged: ``{rocketbox:outbox}:e:<id>``; a
  prefix that has a tag already (``{orders}:outbox``) is used as it is. One server and Sentinel's
  master use the prefix as it is, so an outbox written before this release is read as it was.
- ``wait_replicas=N`` (0, the default: none; at most ``WAIT_REPLICAS_MAX``): every write
  (put, claim, settlement, bulk change) is followed by ``WAIT N wait_timeout_ms`` on the same
  connection, and fails with OutboxUnavailableError when fewer than N replicas acknowledged it
  in time (outbox.py's docstring says what that buys).
- ``wait_timeout_ms`` (default ``WAIT_TIMEOUT_MS_DEFAULT``, 1 to ``WAIT_TIMEOUT_MS_MAX``: below
  the socket timeout, so that a WAIT answers before the socket gives up).
- ``redis://``: every other option is redis-py's own (``socket_timeout`` …), as before.
  ``redis+sentinel://`` and ``redis+cluster://`` take ``socket_timeout`` and
  ``socket_connect_timeout`` (seconds) and, for Sentinel, ``sentinel_password`` (the Sentinels'
  own; the URL's password is the Redis servers').
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from outbox.errors import OutboxConfigError
from outbox.factory import redact

PREFIX_DEFAULT = "rocketbox:outbox"
# Every call has a deadline (a half-open connection must not hang a resend worker forever).
REDIS_SOCKET_TIMEOUT_S = 10.0
WAIT_REPLICAS_MAX = 16
WAIT_TIMEOUT_MS_DEFAULT = 1_000
# Below REDIS_SOCKET_TIMEOUT_S: a WAIT that times out must answer before the socket does.
WAIT_TIMEOUT_MS_MAX = 5_000
# Hosts a Sentinel or Cluster URL may list.
SEED_HOSTS_MAX = 32
SENTINEL_SCHEME = "redis+sentinel"
CLUSTER_SCHEME = "redis+cluster"
# The options our own query parameters; the rest of a redis:// URL's go to redis-py.
OWN_OPTIONS = ("prefix", "wait_replicas", "wait_timeout_ms")
SEEDED_OPTIONS = ("socket_timeout", "socket_connect_timeout")


class Topology(enum.Enum):
    STANDALONE = "standalone"
    SENTINEL = "sentinel"
    CLUSTER = "cluster"


@dataclass(frozen=True, slots=True)
class RedisUrl:
    """An outbox URL, read: what opening the client needs (connection.py)."""

    topology: Topology
    prefix: str
    # What every key starts with: the prefix, hash-tagged on a Cluster.
    key_base: str
    wait_replicas: int
    wait_timeout_ms: int
    # How errors name the outbox (no password).
    where: str
    # redis://: the URL without our options, for redis-py's from_url.
    standalone_url: str = ""
    # Sentinel and Cluster: the hosts listed, the service (Sentinel), and the client's options.
    hosts: tuple[tuple[str, int], ...] = ()
    service_name: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None
    socket_timeout_s: float = REDIS_SOCKET_TIMEOUT_S
    socket_connect_timeout_s: float = REDIS_SOCKET_TIMEOUT_S


def hash_tag(key: str) -> str | None:
    """The part of ``key`` Redis Cluster hashes when it has one: between its first ``{`` and
    the first ``}`` after it, when that is not empty."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    if end <= start + 1:
        return None
    return key[start + 1 : end]


def key_base(prefix: str, topology: Topology) -> str:
    """What the outbox's keys start with: on a Cluster a prefix with a hash tag of its own is
    used as it is, any other is wrapped in one, so that every key is in one slot."""
    if topology is not Topology.CLUSTER or hash_tag(prefix) is not None:
        return prefix
    tagged = "{" + prefix + "}"
    # "}x" wrapped is "{}x}": an empty tag, so no tag at all.
    if hash_tag(tagged) is None:
        raise OutboxConfigError(
            f"prefix {prefix!r} cannot be hash-tagged for Redis Cluster (it starts with '}}'); "
            "give it a tag of its own, e.g. {outbox}"
        )
    return tagged


def parse_url(url: str) -> RedisUrl:
    shown = redact(url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    query = parse_qsl(parts.query, keep_blank_values=True)
    options = dict(query)
    prefix = options.get("prefix", PREFIX_DEFAULT)
    if not prefix:
        raise OutboxConfigError(f"outbox URL {shown!r}: prefix must not be empty")
    replicas = _int_option(shown, options, "wait_replicas", 0, 0, WAIT_REPLICAS_MAX)
    timeout_ms = _int_option(
        shown, options, "wait_timeout_ms", WAIT_TIMEOUT_MS_DEFAULT, 1, WAIT_TIMEOUT_MS_MAX
    )
    if scheme in ("redis", "rediss"):
        topology = Topology.STANDALONE
        _check_wait_below_socket_timeout(shown, replicas, timeout_ms, options, lenient=True)
    else:
        topology = Topology.SENTINEL if scheme == SENTINEL_SCHEME else Topology.CLUSTER
    base = key_base(prefix, topology)
    where = f"{shown} (prefix {prefix!r})"
    common = (topology, prefix, base, replicas, timeout_ms, where)
    if topology is Topology.STANDALONE:
        if parts.path.strip("/") and not parts.path.strip("/").isdigit():
            raise OutboxConfigError(f"outbox URL {shown!r}: the path is a database number")
        rest = urlencode([(key, value) for key, value in query if key not in OWN_OPTIONS])
        return RedisUrl(*common, standalone_url=parts._replace(query=rest).geturl())
    return _seeded(shown, parts.netloc, parts.path, options, common)


def _seeded(
    shown: str,
    netloc: str,
    path: str,
    options: dict[str, str],
    common: tuple[Topology, str, str, int, int, str],
) -> RedisUrl:
    """A Sentinel or Cluster URL: several hosts, so urlsplit's hostname and port do not apply."""
    topology = common[0]
    known: tuple[str, ...] = (*OWN_OPTIONS, *SEEDED_OPTIONS)
    if topology is Topology.SENTINEL:
        known += ("sentinel_password",)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise OutboxConfigError(
            f"outbox URL {shown!r}: unknown option {unknown[0]!r} for {topology.value} "
            f"(known: {', '.join(known)})"
        )
    userinfo, _, hostlist = netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    hosts = tuple(_host_port(shown, h) for h in hostlist.split(","))
    if len(hosts) > SEED_HOSTS_MAX:
        raise OutboxConfigError(
            f"outbox URL {shown!r}: {len(hosts)} hosts, at most {SEED_HOSTS_MAX} (SEED_HOSTS_MAX)"
        )
    segments = [unquote(s) for s in path.split("/") if s]
    service, db = "", 0
    if topology is Topology.SENTINEL:
        if not segments or len(segments) > 2:
            raise OutboxConfigError(
                f"outbox URL {shown!r}: the path is /SERVICE or /SERVICE/db (the master's name "
                "the Sentinels monitor, and a database number)"
            )
        service = segments[0]
        db = _db(shown, segments[1]) if len(segments) == 2 else 0
    elif segments and segments != ["0"]:
        raise OutboxConfigError(f"outbox URL {shown!r}: a Redis Cluster has database 0 only")
    timeout_s = _check_wait_below_socket_timeout(
        shown, common[3], common[4], options, lenient=False
    )
    connect_s = _seconds_option(shown, options, "socket_connect_timeout")
    return RedisUrl(
        *common,
        hosts=hosts,
        service_name=service,
        db=db,
        username=unquote(username) or None,
        password=unquote(password) if userinfo else None,
        sentinel_password=options.get("sentinel_password"),
        socket_timeout_s=timeout_s,
        socket_connect_timeout_s=connect_s,
    )


def _check_wait_below_socket_timeout(
    shown: str, wait_replicas: int, wait_timeout_ms: int, options: dict[str, str], *, lenient: bool
) -> float:
    """The socket timeout, checked to leave a WAIT time to answer. ``lenient``: a value that is
    no number is left for redis-py to refuse (redis://)."""
    try:
        timeout_s = _seconds_option(shown, options, "socket_timeout")
    except OutboxConfigError:
        if lenient:
            return REDIS_SOCKET_TIMEOUT_S
        raise
    if wait_replicas and wait_timeout_ms >= timeout_s * 1000:
        raise OutboxConfigError(
            f"outbox URL {shown!r}: wait_timeout_ms ({wait_timeout_ms}) must be below "
            f"socket_timeout ({timeout_s} s)"
        )
    return timeout_s


def _host_port(shown: str, text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    host = host.strip("[]")  # an IPv6 address is written [::1]:6379
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise OutboxConfigError(
            f"outbox URL {shown!r}: host {text!r} is not host:port (port 1-65535)"
        )
    return host, int(port)


def _db(shown: str, text: str) -> int:
    if not text.isdigit():
        raise OutboxConfigError(f"outbox URL {shown!r}: the database {text!r} is not a number")
    return int(text)


def _int_option(
    shown: str, options: dict[str, str], name: str, default: int, low: int, high: int
) -> int:
    text = options.get(name)
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise OutboxConfigError(
            f"outbox URL {shown!r}: {name} must be a whole number from {low} to {high}, "
            f"not {text!r}"
        )
    return int(text)


def _seconds_option(shown: str, options: dict[str, str], name: str) -> float:
    text = options.get(name)
    if text is None:
        return REDIS_SOCKET_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 3600:
        raise OutboxConfigError(
            f"outbox URL {shown!r}: {name} must be seconds, above 0 and at most 3600, not {text!r}"
        )
    return seconds
