"""Replicated Redis deployments of the chaos suite's own, built from chaos/services.py's
redis-server (AOF, ``appendfsync always``), every server on free ports of 127.0.0.1 in a directory
of its own:

- ``PrivateRedisCluster(data_dir)``: three masters in one Redis Cluster (``redis-cli --cluster
  create``), no replicas. ``move_slot`` moves one slot's keys to another master as ``redis-cli
  --cluster reshard`` does (CLUSTER SETSLOT IMPORTING and MIGRATING, MIGRATE in batches of
  RESHARD_KEYS_PER_MIGRATE keys, SETSLOT NODE on every master), a batch at a time, so that a
  scenario acts while the slot is half moved.
- ``PrivateRedisSentinel(data_dir)``: a master, one replica and three Sentinels (quorum two)
  monitoring it as SENTINEL_SERVICE. ``start_failover`` is SENTINEL FAILOVER; ``failed_over``
  says when it is complete: every Sentinel names another master, which every other server
  replicates from with its link up.

Each starts in ``with`` and returns once it is whole (the cluster's slots all served and agreed
on; the Sentinels knowing the master, the replica and each other); leaving the block stops every
server, whatever raised. Every wait has a deadline and a ServiceError naming what it waited for.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import redis

from chaos.services import REDIS_SERVER, PrivateRedis, ServiceError, free_port

REDIS_CLI = "redis-cli"
CLUSTER_MASTERS = 3
# A cluster agrees on its slots, and a failover completes (Sentinel turns the old master into a
# replica some seconds after it promoted the other), within this.
SETTLE_DEADLINE_S = 90.0
POLL_INTERVAL_S = 0.05
COMMAND_TIMEOUT_S = 10.0
# redis-cli --cluster reshard's own batch (its --cluster-pipeline default).
RESHARD_KEYS_PER_MIGRATE = 10
MIGRATE_TIMEOUT_MS = 5_000
CLUSTER_NODE_TIMEOUT_MS = 5_000
SENTINEL_SERVICE = "chaos"
SENTINELS = 3
# Sentinel's own timings: a master unanswered this long is down; a second failover may start
# twice the failover timeout after the first.
SENTINEL_DOWN_AFTER_MS = 5_000
SENTINEL_FAILOVER_TIMEOUT_MS = 10_000


def wait_for(what: str, condition: Callable[[], bool], deadline_s: float) -> None:
    """Until ``condition()`` holds; ServiceError naming ``what`` after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise ServiceError(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(POLL_INTERVAL_S)


@contextlib.contextmanager
def connected(node: PrivateRedis) -> Iterator[Any]:
    """A client of ``node`` (typed Any: redis-py's execute_command is untyped), closed after."""
    client: Any = redis.Redis(
        port=node.port, socket_timeout=COMMAND_TIMEOUT_S, socket_connect_timeout=COMMAND_TIMEOUT_S
    )
    try:
        yield client
    finally:
        client.close()


def command(node: PrivateRedis, *args: Any) -> Any:
    """One command's raw reply from ``node``."""
    with connected(node) as client:
        return client.execute_command(*args)


def info(node: PrivateRedis, section: str) -> dict[str, Any]:
    return dict(command(node, "INFO", section))


class _ClusterNode(PrivateRedis):
    """A redis-server with cluster mode on; its cluster bus on a free port of its own (the
    default, the port + 10000, may be taken), kept across restarts as the port is."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.bus_port = 0

    def _command(self, port: int) -> list[str]:
        if not self.port:  # a first start, maybe again after a port was taken: new ports both
            self.bus_port = free_port()
        return [
            *super()._command(port), "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf", "--cluster-port", str(self.bus_port),
            "--cluster-node-timeout", str(CLUSTER_NODE_TIMEOUT_MS),
        ]  # fmt: skip


class _Replica(PrivateRedis):
    def __init__(self, data_dir: Path, master_port: int) -> None:
        super().__init__(data_dir)
        self.master_port = master_port

    def _command(self, port: int) -> list[str]:
        return [*super()._command(port), "--replicaof", "127.0.0.1", str(self.master_port)]


class _Sentinel(PrivateRedis):
    """``redis-server sentinel.conf --sentinel`` (Sentinel rewrites its file: it is its own)."""

    name = "redis-sentinel"

    def __init__(self, data_dir: Path, master_port: int) -> None:
        super().__init__(data_dir)
        self.config = data_dir / "sentinel.conf"
        self.master_port = master_port

    def _prepare(self) -> None:
        super()._prepare()
        if not self.config.exists():
            quorum = SENTINELS // 2 + 1
            name = SENTINEL_SERVICE
            self.config.write_text(
                f"sentinel monitor {name} 127.0.0.1 {self.master_port} {quorum}\n"
                f"sentinel down-after-milliseconds {name} {SENTINEL_DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {name} {SENTINEL_FAILOVER_TIMEOUT_MS}\n",
                encoding="utf-8",
            )

    def _command(self, port: int) -> list[str]:
        return [
            REDIS_SERVER, str(self.config), "--sentinel", "--port", str(port),
            "--bind", "127.0.0.1", "--dir", str(self.data_dir), "--daemonize", "no",
            "--logfile", "",
        ]  # fmt: skip


class _Deployment:
    """Servers started in order and stopped together."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._stack = contextlib.ExitStack()

    def _start(self) -> None:
        raise NotImplementedError

    def _run(self, server: PrivateRedis) -> PrivateRedis:
        return self._stack.enter_context(server)

    def __enter__(self) -> Self:
        try:
            self._start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stack.close()


class PrivateRedisCluster(_Deployment):
    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.nodes: list[PrivateRedis] = []

    def url(self, prefix: str) -> str:
        """The outbox URL of a Redis outbox with key prefix ``prefix`` on this cluster."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"redis+cluster://{hosts}/?prefix={prefix}"

    def _start(self) -> None:
        for n in range(CLUSTER_MASTERS):
            self.nodes.append(self._run(_ClusterNode(self.data_dir / f"node{n}")))
        hosts = [f"127.0.0.1:{node.port}" for node in self.nodes]
        args = [REDIS_CLI, "--cluster", "create", *hosts, "--cluster-replicas", "0",
                "--cluster-yes"]  # fmt: skip
        try:
            done = subprocess.run(
                args, capture_output=True, text=True, timeout=SETTLE_DEADLINE_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ServiceError(f"{' '.join(args)}: {e}") from e
        if done.returncode != 0:
            raise ServiceError(f"{' '.join(args)} exited {done.returncode}: {done.stdout}")
        wait_for("the cluster to be ok on every node", self._settled, SETTLE_DEADLINE_S)

    def _settled(self) -> bool:
        for node in self.nodes:
            text = command(node, "CLUSTER", "INFO").decode()
            known = f"cluster_known_nodes:{len(self.nodes)}"
            if "cluster_state:ok" not in text or known not in text:
                return False
        return True

    def node_id(self, node: PrivateRedis) -> str:
        return str(command(node, "CLUSTER", "MYID").decode())

    def owner(self, slot: int, seen_by: PrivateRedis | None = None) -> PrivateRedis:
        """The master serving ``slot`` as ``seen_by`` (the first node) sees the cluster."""
        for start, end, master, *_ in command(seen_by or self.nodes[0], "CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return next(n for n in self.nodes if n.port == int(master[1]))
        raise ServiceError(f"no master serves slot {slot}")

    def keys_in_slot(self, node: PrivateRedis, slot: int) -> int:
        return int(command(node, "CLUSTER", "COUNTKEYSINSLOT", slot))

    def move_slot(self, slot: int, target: PrivateRedis) -> Iterator[int]:
        """Move ``slot`` from its master to ``target``, yielding the keys moved so far after
        each MIGRATE (the slot is half moved then); once exhausted, every node names ``target``
        as the slot's master."""
        source = self.owner(slot)
        if source is target:
            raise ValueError(f"slot {slot} is already served by port {target.port}")
        source_id, target_id = self.node_id(source), self.node_id(target)
        command(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        command(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        moved = 0
        while keys := command(source, "CLUSTER", "GETKEYSINSLOT", slot, RESHARD_KEYS_PER_MIGRATE):
            command(source, "MIGRATE", "127.0.0.1", target.port, "", 0, MIGRATE_TIMEOUT_MS,
                    "KEYS", *keys)  # fmt: skip
            moved += len(keys)
            yield moved
        # The target first, as redis-cli does: it serves the slot before the source lets go.
        others = [n for n in self.nodes if n not in (source, target)]
        for node in [target, source, *others]:
            command(node, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        wait_for(
            f"every node to name port {target.port} as slot {slot}'s master",
            lambda: all(self.owner(slot, n) is target for n in self.nodes),
            SETTLE_DEADLINE_S,
        )


class PrivateRedisSentinel(_Deployment):
    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.servers: list[PrivateRedis] = []
        self.sentinels: list[PrivateRedis] = []

    def url(self, prefix: str, query: str = "") -> str:
        """The outbox URL of a Redis outbox with key prefix ``prefix`` on the Sentinels' master
        (``query``: more options, no '?')."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        more = f"&{query}" if query else ""
        return f"redis+sentinel://{hosts}/{SENTINEL_SERVICE}?prefix={prefix}{more}"

    def _start(self) -> None:
        master = self._run(PrivateRedis(self.data_dir / "server0"))
        self.servers = [master, self._run(_Replica(self.data_dir / "server1", master.port))]
        wait_for("the replica's link to be up", lambda: self._replicating_from(master), 30.0)
        for n in range(SENTINELS):
            self.sentinels.append(self._run(_Sentinel(self.data_dir / f"sentinel{n}", master.port)))
        wait_for(
            "every Sentinel to know the master, its replica and the other Sentinels",
            self._sentinels_ready,
            SETTLE_DEADLINE_S,
        )

    def master_port(self, sentinel: PrivateRedis | None = None) -> int | None:
        """The master's port as ``sentinel`` (the first) names it; None if it names none."""
        try:
            named = command(sentinel or self.sentinels[0], "SENTINEL",
                            "GET-MASTER-ADDR-BY-NAME", SENTINEL_SERVICE)  # fmt: skip
        except redis.RedisError:
            return None
        return int(named[1]) if named else None

    def start_failover(self) -> int:
        """SENTINEL FAILOVER, as soon as a Sentinel accepts it (one refuses while another is in
        progress, or too soon after the last); the old master's port."""
        old = self.master_port()
        if old is None:
            raise ServiceError("no Sentinel names a master")

        def accepted() -> bool:
            try:
                command(self.sentinels[0], "SENTINEL", "FAILOVER", SENTINEL_SERVICE)
            except redis.ResponseError:
                return False
            return True

        wait_for("a Sentinel to accept SENTINEL FAILOVER", accepted, SETTLE_DEADLINE_S)
        return old

    def failed_over(self, old_port: int) -> bool:
        """Whether the failover away from ``old_port`` is complete: every Sentinel names another
        master, and every other server replicates from it with its link up."""
        named = {self.master_port(s) for s in self.sentinels}
        if len(named) != 1 or None in named or old_port in named:
            return False
        new = next(s for s in self.servers if s.port in named)
        return self._replicating_from(new)

    def _replicating_from(self, master: PrivateRedis) -> bool:
        try:
            if info(master, "replication")["role"] != "master":
                return False
            for server in self.servers:
                if server is master:
                    continue
                replication = info(server, "replication")
                if (
                    replication["role"] != "slave"
                    or replication.get("master_port") != master.port
                    or replication.get("master_link_status") != "up"
                ):
                    return False
        except redis.RedisError:
            return False
        return True

    def _sentinels_ready(self) -> bool:
        for sentinel in self.sentinels:
            try:
                with connected(sentinel) as client:
                    fields = client.sentinel_master(SENTINEL_SERVICE)
            except redis.RedisError:
                return False
            if (
                not fields["is_master"]
                or fields["is_sdown"]
                or int(fields["num-slaves"]) != len(self.servers) - 1
                or int(fields["num-other-sentinels"]) != SENTINELS - 1
            ):
                return False
        return True
