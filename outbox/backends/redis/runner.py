"""How the Redis outbox runs its Lua scripts (scripts.py): with every key declared, on the
master that holds the outbox, and with ``wait_replicas`` followed by WAIT.

Declared keys, on a Cluster. A call declares the fixed keys (keys.FIXED_KEYS) and the per-entry
keys its caller can name (a put's entries, the ids given, what keys.KeyHints remembers). Keys a
script finds on the way (the due entries, an entry's group, the group's next head) it may not
touch undeclared, so it reads first and, when it would need more, writes nothing and names them;
``run`` calls it again with those declared too, up to NEED_ROUNDS_MAX rounds. Between rounds the
outbox may change (another sidecar): each round reads afresh, and keys declared in vain cost
nothing. With the hints a put, a claim in a drain and its settlements are one call each.

Loose, on one server and Sentinel's master: scripts are called without KEYS and name the keys
they find as they go, in one call, as before Cluster support (Redis allows it outside a
Cluster). Declaring them there would cost every call the arguments redis-py encodes one by one
and the rounds that find them (docs/internals.md has the figures).

WAIT. With ``wait_replicas=N`` a script that writes and WAIT N go to the server in one request
on one connection (WAIT counts the replicas that acknowledged that connection's writes): the
client's pipeline on one server or Sentinel's master; on a Cluster, a pipeline to the master of
the outbox's slot, following MOVED (the slots read again), ASK (ASKING to the importing node)
and TRYAGAIN (a slot being moved, tried again until CLUSTER_RETRY_S has passed) itself. A
write fewer than N replicas acknowledged raises ReplicasNotAcknowledgedError (the master did
execute it). Without WAIT redis-py's own clients route and follow redirects; TRYAGAIN is tried
again for CLUSTER_RETRY_S here too, as a slot move takes a while.

Scripts are sent by their SHA1 (EVALSHA), and loaded (SCRIPT LOAD, on every master of a
Cluster) when a server does not have them: a new master after a failover or a reshard.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.exceptions as rex
from redis.cluster import RedisCluster

from outbox.backends.redis import scripts as redis_scripts
from outbox.backends.redis.connection import Client, ReplicasNotAcknowledgedError
from outbox.backends.redis.keys import fixed_keys
from outbox.backends.redis.urls import RedisUrl, Topology

NEED_ROUNDS_MAX = 8
# A Cluster request redirected more often than this gives up (the topology keeps changing).
REDIRECTS_MAX = 16
# How long a refused request (TRYAGAIN: the outbox's slot is being moved) is tried again.
CLUSTER_RETRY_S = 2.0
CLUSTER_RETRY_PAUSE_S = 0.05


class KeysKeptChangingError(rex.TryAgainError):
    """A script needed new keys NEED_ROUNDS_MAX rounds in a row (the outbox changed under it
    each time): it wrote nothing; trying later can help."""


@dataclass(frozen=True, slots=True)
class Source:
    text: bytes
    sha1: str

    @classmethod
    def of(cls, text: str) -> Source:
        data = text.encode()
        return cls(data, hashlib.sha1(data, usedforsecurity=False).hexdigest())


@dataclass(frozen=True, slots=True)
class Lua:
    """One operation's script, and the same flagged to run at maxmemory (None: never so);
    ``writes``: it changes the outbox (WAIT follows it)."""

    plain: Source
    allow_oom: Source | None
    writes: bool


class ScriptRunner:
    def __init__(self, client: Client, url: RedisUrl) -> None:
        self.client = client
        # redis-py's command methods are untyped: called through Any.
        self._redis: Any = client
        self.url = url
        # Whether every key a script touches is declared (a Cluster), or none (module docstring).
        self.declared = url.topology is Topology.CLUSTER
        self.fixed_keys = fixed_keys(url.key_base) if self.declared else ()
        # Until a server says it cannot compile ALLOW_OOM (Redis 6).
        self._allow_oom = True

    @staticmethod
    def script(body: str, *, allow_oom: bool = False, writes: bool = True) -> Lua:
        source = redis_scripts.PRELUDE + body
        flagged = Source.of(redis_scripts.ALLOW_OOM + source) if allow_oom else None
        return Lua(Source.of(source), flagged, writes)

    def run(self, lua: Lua, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """The script's result, run with the fixed keys, ``keys`` and those it asks for (a
        Cluster), or loose (the keys ignored)."""
        declared = dict.fromkeys((*self.fixed_keys, *keys)) if self.declared else {}
        for _ in range(NEED_ROUNDS_MAX):
            reply, acked = self._eval(lua, list(declared), [self.url.key_base, *args])
            if reply[0] == 0:
                self._check_acked(acked)
                return reply[1] if len(reply) > 1 else None
            declared.update(dict.fromkeys(key.decode() for key in reply[1:]))
        raise KeysKeptChangingError(
            f"the script needed new keys {NEED_ROUNDS_MAX} times in a row (NEED_ROUNDS_MAX): "
            "the outbox kept changing; nothing was written"
        )

    def write(self, *command: Any) -> Any:
        """One write command on the outbox's master, followed by WAIT when set."""
        if not self.url.wait_replicas:
            return self._redis.execute_command(*command)
        reply, acked = self._waited(command, str(command[1]))
        self._check_acked(acked)
        return reply

    def _eval(self, lua: Lua, keys: list[str], args: list[Any]) -> tuple[Any, int | None]:
        """(the reply, the replicas WAIT counted or None) of one round."""
        source = lua.allow_oom if lua.allow_oom is not None and self._allow_oom else lua.plain
        try:
            return self._evalsha(source, keys, args, lua.writes)
        except rex.ResponseError as e:
            if source is lua.plain or "Error compiling script" not in str(e):
                raise
            self._allow_oom = False  # Redis 6: no script flags
            return self._evalsha(lua.plain, keys, args, lua.writes)

    def _evalsha(
        self, source: Source, keys: list[str], args: list[Any], writes: bool
    ) -> tuple[Any, int | None]:
        command = ("EVALSHA", source.sha1, len(keys), *keys, *args)
        for loaded in (False, True):
            try:
                if writes and self.url.wait_replicas:
                    return self._waited(command, keys[0] if keys else self.url.key_base)
                return self._retried(command), None
            except rex.NoScriptError:
                if loaded:
                    raise
                self._redis.script_load(source.text)
        raise AssertionError("unreachable")

    def _retried(self, command: tuple[Any, ...]) -> Any:
        """The command through the client (its routing), TRYAGAIN tried again for a while."""
        deadline = time.monotonic() + CLUSTER_RETRY_S
        while True:
            try:
                return self._redis.execute_command(*command)
            # RedisCluster's own retries of TRYAGAIN end in ClusterError ("TTL exhausted").
            except (rex.TryAgainError, rex.ClusterError):
                if time.monotonic() > deadline:
                    raise
            time.sleep(CLUSTER_RETRY_PAUSE_S)

    def _waited(self, command: tuple[Any, ...], key: str) -> tuple[Any, int]:
        """``command`` then WAIT, on one connection to the master holding ``key``."""
        wait = ("WAIT", self.url.wait_replicas, self.url.wait_timeout_ms)
        if isinstance(self.client, RedisCluster):
            reply, acked = self._on_slot_master(self._redis, [command, wait], key)
        else:
            pipe = self._redis.pipeline(transaction=False)
            pipe.execute_command(*command)
            pipe.execute_command(*wait)
            reply, acked = pipe.execute(raise_on_error=False)
        for answer in (reply, acked):
            if isinstance(answer, Exception):
                raise answer
        return reply, int(acked)

    def refresh_master(self) -> None:
        """On Sentinel: ask the Sentinels for the master now, so that connections to one they no
        longer name are dropped (idle ones now, busy ones when released) rather than when it is
        demoted. Elsewhere nothing."""
        if self.url.topology is Topology.SENTINEL:
            self._redis.connection_pool.get_master_address()

    def _check_acked(self, acked: int | None) -> None:
        if acked is not None and acked < self.url.wait_replicas:
            # The master may have lost its replicas to a failover: the next call finds out.
            self.refresh_master()
            raise ReplicasNotAcknowledgedError(
                f"the master executed the write, but {acked} of the wait_replicas="
                f"{self.url.wait_replicas} replicas acknowledged it within wait_timeout_ms="
                f"{self.url.wait_timeout_ms}: it may not survive a failover"
            )

    @staticmethod
    def _on_slot_master(client: Any, commands: list[tuple[Any, ...]], key: str) -> list[Any]:
        """The replies (or errors) of ``commands`` sent together on one connection to the
        master of ``key``'s slot, following redirects (module docstring)."""
        deadline = time.monotonic() + CLUSTER_RETRY_S
        asking: Any = None  # the importing node (redis-py's ClusterNode) to ask
        redirects = 0  # MOVED and ASK since the last TRYAGAIN
        while redirects <= REDIRECTS_MAX:
            node = asking if asking is not None else client.get_node_from_key(key)
            pipe = client.get_redis_connection(node).pipeline(transaction=False)
            if asking is not None:
                pipe.execute_command("ASKING")
            for command in commands:
                pipe.execute_command(*command)
            replies = pipe.execute(raise_on_error=False)[1 if asking is not None else 0 :]
            first, asking = replies[0], None
            if isinstance(first, rex.MovedError):
                redirects += 1
                client.nodes_manager.initialize()
            elif isinstance(first, rex.AskError):
                redirects += 1
                asking = client.get_node(host=first.host, port=first.port)
                if asking is None:
                    client.nodes_manager.initialize()
            elif isinstance(first, rex.TryAgainError) and time.monotonic() < deadline:
                # The slot is being moved (an ASK often leads here): it settles by itself.
                redirects = 0
                time.sleep(CLUSTER_RETRY_PAUSE_S)
            else:
                return list(replies)
        raise rex.ClusterError(
            f"the outbox's slot was redirected {REDIRECTS_MAX} times in a row (REDIRECTS_MAX)"
        )
