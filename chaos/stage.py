"""One scenario's stage: the parts it runs (a broker, an outbox backend, a sidecar, optionally a
fault proxy between them and a small disk under the outbox), the load, and the means a scenario
times its faults with.

The outbox backends: RocksDB, a private redis-server, a private mariadbd (chaos/services.py), and
a private Redis Cluster or Sentinel-managed master and replica (chaos/redis_ha.py), the last with
``wait_replicas=1`` (SENTINEL_OUTBOX_OPTIONS).

Promises:
- every part is private to the scenario (its own directories under ``<out>/<scenario>/data``, its
  own ports) and is stopped when the stage closes, whatever raised;
- the broker runs with ``--flush SYNC_FLUSH``: STORED means on disk, which no kill may undo;
- waits are on conditions with deadlines (``at_progress``, ``wait_drained``); ``hold`` is the
  only timed wait, and it is a fault's planned duration, not a wait for something to happen;
- every fault is written to ``events.jsonl`` with the time and the load's progress, so a failed
  scenario can be read against its schedule.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from chaos.disk import SmallDisk
from chaos.fault_proxy import FaultProxy
from chaos.load import LoadGenerator
from chaos.plan import BROKER_TOPIC_ARGS, Plan
from chaos.power_loss import PowerLossDisk
from chaos.processes import BrokerProcess, SidecarProcess
from chaos.redis_ha import PrivateRedisCluster, PrivateRedisSentinel
from chaos.services import PrivateMariaDB, PrivateRedis
from outbox.entry import EntryState, OutboxEntry, OutboxStats
from outbox.factory import open_outbox
from rocketbox.admin_client import AdminClient

LOG = logging.getLogger(__name__)
Backend = Literal["rocksdb", "redis", "mysql", "redis-cluster", "redis-sentinel"]
# Whose storage the power-loss disk holds (chaos/power_cut.py).
PowerLossTarget = Literal["broker", "outbox"]
# The backends every per-backend scenario runs on; the replicated Redis ones have their own.
BACKENDS: tuple[Backend, ...] = ("rocksdb", "redis", "mysql")
# Every Redis outbox's key prefix (hash-tagged on a Cluster: one slot, the one a reshard moves).
REDIS_PREFIX = "chaos"
# The Sentinel outbox waits for its replica before it answers (SPOOLED, a claim, a settlement),
# so that a failover to it keeps what the sidecar acknowledged; a WAIT unanswered within 1 s
# (redis-py's default socket timeout is 10 s) refuses the write.
SENTINEL_OUTBOX_OPTIONS = "wait_replicas=1&wait_timeout_ms=1000"
POLL_INTERVAL_S = 0.1
# The outbox's small disk: room for the RocksDB outbox's emergency reserve (128 MiB by default,
# and twice that free to take spools: outbox/disk_reserve.py) and a scenario's spools; tmpfs is
# memory, and fill() takes all of it while the disk is full.
SMALL_DISK_BYTES = 512 * 1024 * 1024
# The sidecars run with the production delivery budget: failed resends never bury by count, so
# however often the suite's fast back-off (processes.FAST_RESEND_ARGS) resends during an outage,
# nothing is buried; the suite bounds a resend by its drain deadline.
SIDECAR_ARGS: tuple[str, ...] = ()
# The proxy scenario: the broker listens on another loopback address and advertises 127.0.0.1,
# where the proxy listens on the broker's port, so every call after QueryRoute goes through the
# proxy too (a route names the broker's advertised host and port).
BROKER_BEHIND_PROXY_HOST = "127.0.0.2"


@dataclass(frozen=True, slots=True)
class StageOptions:
    backend: Backend = "rocksdb"
    small_disk: bool = False
    proxy: bool = False
    power_loss: PowerLossTarget | None = None
    # The sidecar's own arguments for the scenario, after the suite's (so they override).
    sidecar_args: tuple[str, ...] = ()


class Stage:
    def __init__(
        self,
        name: str,
        directory: Path,
        plan: Plan,
        options: StageOptions,
        *,
        load_deadline_s: float,
        sidecar_id: str | None,
        seed: int = 0,
    ) -> None:
        self.name = name
        # Absolute: outbox URLs and the processes' arguments name paths under it.
        self.dir = directory.resolve()
        self.data_dir = self.dir / "data"
        self.plan = plan
        self.options = options
        self.load_deadline_s = load_deadline_s
        self._sidecar_id = sidecar_id
        self._seed = seed
        self._stack = ExitStack()
        self._started_s = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        self._events = (self.dir / "events.jsonl").open("a", encoding="utf-8")
        self.redis: PrivateRedis | None = None
        self.mariadb: PrivateMariaDB | None = None
        self.redis_cluster: PrivateRedisCluster | None = None
        self.redis_sentinel: PrivateRedisSentinel | None = None
        self.disk: SmallDisk | None = None
        self.power_disk: PowerLossDisk | None = None
        self.proxy: FaultProxy | None = None
        self.broker: BrokerProcess | None = None
        self.sidecar: SidecarProcess | None = None
        self.load: LoadGenerator | None = None
        self.outbox_url = ""
        # When the scenario's last fault was healed (monotonic); the drain is timed from it, or
        # from the load's end when that is later.
        self.healed_s = 0.0
        # The last point of the load's progress a scenario waited for (scenarios.py).
        self.progress_mark = 0.0
        self.events: list[dict[str, Any]] = []

    # -- the parts ----------------------------------------------------------------------------
    def __enter__(self) -> Self:
        try:
            self._start()
        except BaseException:
            self._stack.close()
            self._events.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self.load is not None:
                self.load.__exit__(kind, e, tb)
            self._stack.close()
        finally:
            self._events.close()

    def _start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.options.power_loss is not None:
            # First in, last out: the parts on it are stopped before it is unmounted.
            self.power_disk = self._stack.enter_context(PowerLossDisk(self.data_dir / "power"))
            self.event("power-loss disk mounted", holds=self.options.power_loss)
        self.outbox_url = self._start_backend()
        broker_args: tuple[str, ...] = BROKER_TOPIC_ARGS
        if self.options.proxy:
            # The proxy first, for its port: the broker binds the same port on another loopback
            # address and advertises the proxy's, so routes lead the sidecar back to the proxy.
            self.proxy = self._stack.enter_context(
                FaultProxy(BROKER_BEHIND_PROXY_HOST, 1, seed=self._seed)
            )
            self.proxy.target_port = self.proxy.port
            broker_args += (
                "--listen", f"{BROKER_BEHIND_PROXY_HOST}:{self.proxy.port}",
                "--advertise-host", "127.0.0.1",
            )  # fmt: skip
            self.event("fault proxy started", port=self.proxy.port)
        self.broker = self._stack.enter_context(
            BrokerProcess(self._store_dir("broker"), "SYNC_FLUSH", broker_args)
        )
        self.event("broker started", port=self.broker.port)
        # Behind the proxy, 127.0.0.1:port is the proxy.
        broker_address = self.broker.endpoint
        self.sidecar = self._stack.enter_context(
            SidecarProcess(
                [broker_address],
                self.outbox_url,
                ack_ledger=self.dir / "sidecar-acks.jsonl",
                sidecar_id=self._sidecar_id,
                extra_args=SIDECAR_ARGS + self.options.sidecar_args,
            )
        )
        self.event("sidecar started", port=self.sidecar.port)
        self.load = LoadGenerator(
            self.sidecar.endpoint,
            self.plan,
            self.dir / "load",
            load_deadline_s=self.load_deadline_s,
        )

    def _start_backend(self) -> str:
        backend = self.options.backend
        if backend == "redis":
            self.redis = self._stack.enter_context(
                PrivateRedis(self.data_dir / "redis", self._power_dir("outbox", "redis"))
            )
            self.event("redis-server started")
            return self.redis.url(REDIS_PREFIX)
        if backend == "redis-cluster":
            self.redis_cluster = self._stack.enter_context(
                PrivateRedisCluster(self.data_dir / "redis-cluster")
            )
            self.event("redis cluster started", ports=[n.port for n in self.redis_cluster.nodes])
            return self.redis_cluster.url(REDIS_PREFIX)
        if backend == "redis-sentinel":
            self.redis_sentinel = self._stack.enter_context(
                PrivateRedisSentinel(self.data_dir / "redis-sentinel")
            )
            self.event(
                "redis master, replica and sentinels started",
                servers=[s.port for s in self.redis_sentinel.servers],
                sentinels=[s.port for s in self.redis_sentinel.sentinels],
            )
            return self.redis_sentinel.url(REDIS_PREFIX, SENTINEL_OUTBOX_OPTIONS)
        if backend == "mysql":
            self.mariadb = self._stack.enter_context(
                PrivateMariaDB(self.data_dir / "mariadb", self._power_dir("outbox", "mariadb"))
            )
            self.event("mariadbd started")
            return self.mariadb.url("chaos_outbox")
        directory = self._power_dir("outbox", "outbox") or self.data_dir / "outbox"
        if self.options.small_disk:
            mount = self.data_dir / "disk"
            mount.mkdir(parents=True, exist_ok=True)
            self.disk = self._stack.enter_context(SmallDisk(mount, SMALL_DISK_BYTES))
            self.event("small disk mounted", size_bytes=SMALL_DISK_BYTES)
            directory = mount / "outbox"
        return f"rocksdb://{directory}"

    def _power_dir(self, part: PowerLossTarget, name: str) -> Path | None:
        """``name`` on the power-loss disk when it holds ``part``'s storage, else None."""
        if self.power_disk is not None and self.options.power_loss == part:
            return self.power_disk.mount_dir / name
        return None

    def _store_dir(self, name: str) -> Path:
        return self._power_dir("broker", name) or self.data_dir / name

    @property
    def broker_endpoint(self) -> str:
        """The broker's own address, whatever the proxy does (the checker reads through it)."""
        assert self.broker is not None
        if self.options.proxy:
            return f"{BROKER_BEHIND_PROXY_HOST}:{self.broker.port}"
        return self.broker.endpoint

    def parts_output(self) -> dict[str, str]:
        """Each process's kept output, for the scenario's directory."""
        out: dict[str, str] = {}
        for name, part in (("broker", self.broker), ("sidecar", self.sidecar)):
            if part is not None:
                out[name] = part.output()
        return out

    # -- what scenarios use -------------------------------------------------------------------
    def event(self, what: str, **fields: Any) -> None:
        line = {
            "t_s": round(time.monotonic() - self._started_s, 3),
            "event": what,
            "answered": self.load.answered if self.load is not None else 0,
            **fields,
        }
        self.events.append(line)
        self._events.write(json.dumps(line) + "\n")
        self._events.flush()
        LOG.info("%s: %s %s", self.name, what, fields or "")

    def start_load(self) -> LoadGenerator:
        assert self.load is not None
        self.load.start()
        self.event("load started", messages=len(self.plan.messages))
        return self.load

    def at_progress(self, fraction: float) -> None:
        """Returns once the load has answered ``fraction`` of its messages, or has ended."""
        assert self.load is not None
        target = fraction * len(self.plan.messages)
        load = self.load
        self.wait(
            lambda: load.answered >= target or load.done,
            self.load_deadline_s,
            f"the load at {fraction:.0%}",
        )

    def hold(self, seconds: float, what: str) -> None:
        """The fault lasts ``seconds`` (a planned duration: nothing is being waited for)."""
        self.event(f"{what} for {seconds:.1f} s")
        time.sleep(seconds)

    def healed(self) -> None:
        self.healed_s = time.monotonic()
        self.event("healed")

    def flow_control(self, on: bool) -> None:
        with AdminClient(self.broker_endpoint) as admin:
            admin.set_flow_control(on, None)
        self.event(f"flow control {'on' if on else 'off'}")

    @property
    def _outbox_view_url(self) -> str:
        """The outbox's URL for a look at it: the RocksDB outbox, beside the sidecar that holds
        it, as a read-only view (opened afresh each time)."""
        if self.outbox_url.startswith("rocksdb:"):
            return self.outbox_url + "?read_only=true"
        return self.outbox_url

    def outbox_pending(self) -> int | None:
        """PENDING entries in the outbox now; None when it cannot be read."""
        stats = self.outbox_stats()
        return None if stats is None else stats.pending

    def outbox_stats(self) -> OutboxStats | None:
        """The outbox's counts now; None when it cannot be read."""
        try:
            with open_outbox(self._outbox_view_url) as outbox:
                return outbox.stats(time.time_ns() // 1_000_000)
        except Exception as e:  # any backend's failure: the outbox is unreadable right now
            LOG.debug("outbox stats: %s", e)
            return None

    def outbox_entries(self, state: EntryState, limit: int) -> list[OutboxEntry] | None:
        """Up to ``limit`` of the outbox's entries in ``state``; None when it cannot be read."""
        try:
            with open_outbox(self._outbox_view_url) as outbox:
                return list(itertools.islice(outbox.scan_all(state), limit))
        except Exception as e:  # any backend's failure: the outbox is unreadable right now
            LOG.debug("outbox scan: %s", e)
            return None

    def wait_outbox(self, condition: str, test: Callable[[int], object], deadline_s: float) -> None:
        """Until ``test(pending)`` is true of the outbox's PENDING count."""

        def check() -> bool:
            pending = self.outbox_pending()
            return pending is not None and bool(test(pending))

        self.wait(check, deadline_s, condition)

    def wait_drained(self, deadline_s: float) -> float | None:
        """Seconds from the heal (or the load's end) until the outbox held no PENDING entry;
        None if it still did after ``deadline_s``."""
        assert self.load is not None
        since = max(self.healed_s, self.load.finished_s)
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            pending = self.outbox_pending()
            if pending == 0:
                drained_s = max(0.0, time.monotonic() - since)
                self.event("drained", drain_s=round(drained_s, 3))
                return drained_s
            time.sleep(POLL_INTERVAL_S)
        self.event("not drained", pending=self.outbox_pending())
        return None

    def wait(self, condition: Callable[[], object], deadline_s: float, what: str) -> None:
        """Until ``condition()`` is true; TimeoutError naming ``what`` after ``deadline_s``."""
        end = time.monotonic() + deadline_s
        while not condition():
            if time.monotonic() > end:
                raise TimeoutError(f"timed out after {deadline_s} s waiting for {what}")
            time.sleep(POLL_INTERVAL_S)
