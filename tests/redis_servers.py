"""Throwaway Redis deployments of a test's own: a Redis Cluster (``RedisClusterServers``: masters,
optionally replicas, made by ``redis-cli --cluster create``) and a master with replicas under
Sentinel (``RedisSentinelServers``: ``redis-server --sentinel``). Every server runs on free ports
of 127.0.0.1 in its own directory under the directory given, keeps nothing on disk, and is
stopped when the context ends, whatever happens. Every wait is bounded by a deadline and fails
the test saying what it waited for.

``move_slot`` moves one slot's keys to another master as ``redis-cli --cluster reshard`` does
(CLUSTER SETSLOT IMPORTING / MIGRATING, MIGRATE in batches, SETSLOT NODE), one batch at a time
so that a test can act while the slot is half moved; ``failover`` is SENTINEL FAILOVER, waited
for until every Sentinel names the new master and the old one replicates from it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from tests.services import free_port

START_DEADLINE_S = 30.0
# A cluster agrees on its slots, a failover completes (Sentinel turns the old master into a
# replica some seconds after it promoted another), within this.
SETTLE_DEADLINE_S = 90.0
# How long one SENTINEL FAILOVER is given to name a new master before it is asked for again:
# past Sentinel's failover-timeout (10 s here), which ends a failover that did not finish.
FAILOVER_TRY_S = 25.0
POLL_S = 0.05
START_ATTEMPTS_MAX = 5
SERVICE_NAME = "rocketbox"
REDIS_CLI = "redis-cli"


def wait_until(what: str, condition: Callable[[], bool], deadline_s: float) -> None:
    """Return once ``condition()`` holds; fail the test naming ``what`` after ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(POLL_S)


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


class RedisProcess:
    """One redis-server (or Sentinel) of the test's: ``args`` after its port and directory."""

    def __init__(self, directory: Path, args: list[str], port: int | None = None) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port = port if port is not None else free_port()
        self.proc = subprocess.Popen(
            ["redis-server", *args, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(directory), "--save", "", "--appendonly", "no",
             "--logfile", str(directory / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.client = redis.Redis(port=self.port, socket_timeout=5.0, socket_connect_timeout=5.0)

    def started(self) -> bool:
        """Whether it answers PING (False: it exited, e.g. its port was taken meanwhile)."""
        deadline = time.monotonic() + START_DEADLINE_S
        while not _answers(self.client):
            if self.proc.poll() is not None:
                return False
            if time.monotonic() > deadline:
                pytest.fail(f"redis-server on port {self.port} did not answer (its log: "
                            f"{self.directory / 'redis.log'})")  # fmt: skip
            time.sleep(POLL_S)
        return True

    def command(self, *args: Any) -> Any:
        """A command's raw reply (redis-py's execute_command, which is untyped)."""
        client: Any = self.client
        return client.execute_command(*args)

    def info(self, section: str) -> dict[str, object]:
        return dict(self.client.info(section))

    def pause(self) -> None:
        """SIGSTOP: it keeps its sockets and answers nothing until ``resume``."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.resume()  # a paused process does not handle SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(timeout=START_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=START_DEADLINE_S)


def start_redis(
    stack: contextlib.ExitStack, directory: Path, make_args: Callable[[], list[str]]
) -> RedisProcess:
    """A started server (a port taken between choosing it and binding it: another port),
    stopped when ``stack`` closes."""
    for _ in range(START_ATTEMPTS_MAX):
        server = RedisProcess(directory, make_args())
        stack.callback(server.stop)
        if server.started():
            return server
    pytest.fail(f"no redis-server could start in {directory} ({START_ATTEMPTS_MAX} attempts)")


class RedisClusterServers:
    """``masters`` masters, each with ``replicas`` replicas, in one Redis Cluster."""

    def __init__(self, directory: Path, masters: int = 3, replicas: int = 0) -> None:
        self.directory = directory
        self.masters_n, self.replicas_n = masters, replicas
        self.nodes: list[RedisProcess] = []
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> RedisClusterServers:
        try:
            for n in range(self.masters_n * (1 + self.replicas_n)):
                self.nodes.append(start_redis(self._stack, self.directory / f"node{n}", _node_args))
            self._create()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def url(self, query: str = "") -> str:
        """A ``redis+cluster://`` URL listing every node (``query``: the options, no '?')."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"redis+cluster://{hosts}/" + (f"?{query}" if query else "")

    def masters(self) -> list[RedisProcess]:
        return [n for n in self.nodes if n.info("replication")["role"] == "master"]

    def node_id(self, node: RedisProcess) -> str:
        return str(node.command("CLUSTER", "MYID").decode())

    def owner(self, slot: int) -> RedisProcess:
        """The master serving ``slot`` (as the first node sees the cluster)."""
        for start, end, master, *_ in self.nodes[0].command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return next(n for n in self.nodes if n.port == int(master[1]))
        pytest.fail(f"no master serves slot {slot}")

    def move_slot(self, slot: int, target: RedisProcess, keys_per_batch: int = 10) -> Iterator[int]:
        """Move ``slot`` to ``target``, yielding the keys moved after each MIGRATE batch (the
        slot is half moved then); the slot is the target's once the generator is exhausted."""
        source = self.owner(slot)
        source_id, target_id = self.node_id(source), self.node_id(target)
        target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        moved = 0
        while keys := source.command("CLUSTER", "GETKEYSINSLOT", slot, keys_per_batch):
            source.command("MIGRATE", "127.0.0.1", target.port, "", 0, 5_000, "KEYS", *keys)
            moved += len(keys)
            yield moved
        for node in [target, source, *(n for n in self.masters() if n not in (source, target))]:
            node.command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        wait_until(
            f"every node to see slot {slot} served by port {target.port}",
            lambda: all(self._owner_seen_by(n, slot) == target.port for n in self.nodes),
            SETTLE_DEADLINE_S,
        )

    def _create(self) -> None:
        hosts = [f"127.0.0.1:{node.port}" for node in self.nodes]
        command = [REDIS_CLI, "--cluster", "create", *hosts,
                   "--cluster-replicas", str(self.replicas_n), "--cluster-yes"]  # fmt: skip
        done = subprocess.run(
            command, check=False, capture_output=True, text=True, timeout=SETTLE_DEADLINE_S
        )
        if done.returncode != 0:
            pytest.fail(f"{' '.join(command)} failed: {done.stdout}{done.stderr}")
        wait_until("the cluster to be ok on every node", self._settled, SETTLE_DEADLINE_S)

    def _settled(self) -> bool:
        for node in self.nodes:
            info = node.command("CLUSTER", "INFO").decode()
            if (
                "cluster_state:ok" not in info
                or f"cluster_known_nodes:{len(self.nodes)}" not in info
            ):
                return False
            replication = node.info("replication")
            if replication["role"] == "slave" and replication.get("master_link_status") != "up":
                return False
        return True

    def _owner_seen_by(self, node: RedisProcess, slot: int) -> int | None:
        for start, end, master, *_ in node.command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(master[1])
        return None


def _sentinel_args(config: Path) -> list[str]:
    return [str(config), "--sentinel"]


def _node_args() -> list[str]:
    return ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "5000", "--cluster-port", str(free_port())]  # fmt: skip


class RedisSentinelServers:
    """A master, ``replicas`` replicas and ``sentinels`` Sentinels (quorum: a majority)
    monitoring it as SERVICE_NAME."""

    def __init__(self, directory: Path, replicas: int = 1, sentinels: int = 3) -> None:
        self.directory = directory
        self.replicas_n, self.sentinels_n = replicas, sentinels
        self.servers: list[RedisProcess] = []  # the master first, until a failover
        self.sentinels: list[RedisProcess] = []
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> RedisSentinelServers:
        try:
            self._start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def url(self, query: str = "") -> str:
        """A ``redis+sentinel://`` URL listing every Sentinel (``query``: the options)."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE_NAME}" + (f"?{query}" if query else "")

    def master(self) -> RedisProcess:
        """The server the first Sentinel names as master."""
        _host, port = self.sentinels[0].command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE_NAME)
        return next(s for s in self.servers if s.port == int(port))

    def replicas(self) -> list[RedisProcess]:
        master = self.master()
        return [s for s in self.servers if s is not master]

    def failover(self) -> tuple[RedisProcess, RedisProcess]:
        """SENTINEL FAILOVER, waited for: returns (old master, new master) once every Sentinel
        names the new one and every other server replicates from it with its link up."""
        old = self.master()

        def named_new() -> bool:
            return all(self._named_port(s) not in (None, old.port) for s in self.sentinels)

        # A failover that Sentinel abandons (its timeout passed with the replica not yet
        # promoted, as on a loaded machine) names no new master: it is asked for again.
        deadline = time.monotonic() + SETTLE_DEADLINE_S
        while not named_new():
            assert time.monotonic() < deadline, "timed out waiting for a new master"
            wait_until(
                "a Sentinel to start the failover (one within twice failover-timeout of the "
                "last is refused)",
                self._failover_started,
                SETTLE_DEADLINE_S,
            )
            tried_until = time.monotonic() + FAILOVER_TRY_S
            while not named_new() and time.monotonic() < tried_until:
                time.sleep(POLL_S)  # sleep: a poll of the Sentinels within the try's bound
        new = self.master()
        wait_until(
            f"every server to replicate from the new master (port {new.port})",
            lambda: self._replicating_from(new),
            SETTLE_DEADLINE_S,
        )
        return old, new

    def _failover_started(self) -> bool:
        try:
            self.sentinels[0].command("SENTINEL", "FAILOVER", SERVICE_NAME)
        except redis.ResponseError:  # INPROG, or the last one is too recent
            return False
        return True

    def _start(self) -> None:
        master = start_redis(self._stack, self.directory / "server0", list)
        self.servers.append(master)
        for n in range(1, self.replicas_n + 1):
            self.servers.append(
                start_redis(
                    self._stack,
                    self.directory / f"server{n}",
                    lambda: ["--replicaof", "127.0.0.1", str(master.port)],
                )
            )
        wait_until("the replicas' links to be up", lambda: self._replicating_from(master), 30.0)
        quorum = self.sentinels_n // 2 + 1
        for n in range(self.sentinels_n):
            directory = self.directory / f"sentinel{n}"
            directory.mkdir(parents=True)
            config = directory / "sentinel.conf"
            config.write_text(
                f"sentinel monitor {SERVICE_NAME} 127.0.0.1 {master.port} {quorum}\n"
                f"sentinel down-after-milliseconds {SERVICE_NAME} 5000\n"
                # A second failover may start twice this after the first one did.
                f"sentinel failover-timeout {SERVICE_NAME} 10000\n"
            )
            args = functools.partial(_sentinel_args, config)
            self.sentinels.append(start_redis(self._stack, directory, args))
        wait_until("every Sentinel to know the master, its replicas and the other Sentinels",
                   self._sentinels_ready, START_DEADLINE_S)  # fmt: skip

    def _named_port(self, sentinel: RedisProcess) -> int | None:
        try:
            named = sentinel.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE_NAME)
        except redis.RedisError:
            return None
        return int(named[1]) if named else None

    def _replicating_from(self, master: RedisProcess) -> bool:
        for server in self.servers:
            if server is master:
                if server.info("replication")["role"] != "master":
                    return False
                continue
            replication = server.info("replication")
            if (
                replication["role"] != "slave"
                or replication.get("master_port") != master.port
                or replication.get("master_link_status") != "up"
            ):
                return False
        return True

    def _sentinels_ready(self) -> bool:
        for sentinel in self.sentinels:
            fields = cast(dict[str, Any], sentinel.client.sentinel_master(SERVICE_NAME))
            if (
                not fields["is_master"]
                or fields["is_sdown"]
                or int(fields["num-slaves"]) != self.replicas_n
                or int(fields["num-other-sentinels"]) != self.sentinels_n - 1
            ):
                return False
        return True


def delete_keys(deployment: RedisClusterServers | RedisSentinelServers, pattern: str) -> None:
    """Delete the keys matching ``pattern`` (SCAN's glob) wherever they are in ``deployment``."""
    if isinstance(deployment, RedisSentinelServers):
        masters = [deployment.master()]
    else:
        masters = deployment.masters()
    for master in masters:
        # One DEL a key: a Cluster refuses a DEL of keys of several slots.
        pipe = master.client.pipeline(transaction=False)
        for key in master.client.scan_iter(match=pattern, count=1000):
            pipe.delete(key)
        pipe.execute()
