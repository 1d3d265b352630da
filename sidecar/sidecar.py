"""The sidecar process's parts, started and stopped in order.

start: the listeners' TLS files read (sidecar/app_server.py) → open the outbox → producer →
resend pool → gRPC server (SidecarService, OutboxAdminService, health, reflection; the RocketMQ
front's and a health-only one when asked) bound and serving → a RocksDB outbox's holder file
written (outbox/holder.py: how ``rocketbox outbox`` finds this sidecar to change the outbox it
holds). ``start`` returns once it serves. An outbox on a server (Redis, MySQL) that cannot be
reached yet does not stop the start: it is opened once it can be (AsyncOutbox.opened_later), and
meanwhile the sidecar serves NOT READY. What needs the outbox at start (ending an earlier run's
leases, loading the FIFO fence) is done once it is reached; until the fence is loaded, FIFO
messages are refused UNAVAILABLE.

State lines (sidecar/health_log.py): the broker's and the outbox's changes of state are logged
once each, and repeated at most every ``state_log_interval_ms`` while they last; intake, the
resend pool and readiness feed them, and log no line per message or per poll of their own.

Readiness (gRPC health, service "" and "rocketbox.v1.SidecarService") is SERVING only while the
outbox is writable: a sidecar that could not spool must not be sent traffic. Its reason
(``readiness_reason``: READY, OUTBOX_NO_SPACE or OUTBOX_UNAVAILABLE) is logged when it changes
and is the ``rocketbox_sidecar_ready{reason}`` gauge; OUTBOX_NO_SPACE also sets
``rocketbox_outbox_no_space``. An outbox with no space refuses spools only: the resend pool goes
on delivering what it holds.

Identity: the resend pool leases entries as ``<sidecar_id>/<incarnation>`` (a new incarnation at
every start). At start, before it claims anything, the sidecar ends every lease still held by
an earlier incarnation of its id (``Outbox.expire_leases``): that process is dead, so its
entries are claimed at once, maybe stored (their resend asks the broker's index first), rather
than after their lease runs out (a RocksDB outbox, one process's, does so at open for every
lease it finds, whatever the id). Two live sidecars given one id (a misconfiguration) end each
other's leases at their starts: an entry the other is sending just then may be sent twice (never
lost); give each sidecar its own id.

stop (SIGTERM): stop intake (new calls are answered UNAVAILABLE) → let calls in flight finish
or spool within ``shutdown_grace_ms`` → stop the resend pool (resends in flight finish, unstarted
leases released) → close producer, outbox and ledger; remove the holder file.

One root TaskGroup holds every background task (the resend pool, readiness, the FIFO fence's
refresh and rechecks, outbox stats, the ledger's flush), entered by ``start`` and left by
``stop`` in the task that awaits both. A background task that raises is logged at once with its
traceback, and the TaskGroup cancels the other tasks and that owning task (``rocketbox sidecar``
waits there for its signal): the owner's ``stop`` then closes what is open and raises the failure
as an ExceptionGroup, so the process exits non-zero, loudly, instead of serving on without its
resend pool and mentioning it at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

import grpc
from grpc_health.v1 import health, health_pb2

from outbox.errors import OutboxError, OutboxNoSpaceError
from outbox.factory import redact
from outbox.holder import Holder, remove_holder, rocksdb_dir, write_holder
from rocketbox_api.listen import HEALTH, ROCKETMQ, bind_grpc, start_metrics_server
from rocketbox_api.v1 import sidecar_pb2
from sidecar.app_server import app_server, health_server, server_tls
from sidecar.async_outbox import open_async_outbox
from sidecar.backoff import Backoff
from sidecar.clock import now_ms
from sidecar.coalescer import SendCoalescer
from sidecar.config import SidecarConfig
from sidecar.fifo_fence import FifoFence
from sidecar.health_log import BrokerStateLog, OutboxStateLog
from sidecar.intake import Intake
from sidecar.ledger import AckLedger
from sidecar.metrics import OUTBOX_NO_SPACE, OUTBOX_UNAVAILABLE, READY, SidecarMetrics, outbox_label
from sidecar.outbox_admin_service import OutboxAdminService
from sidecar.producer import Producer
from sidecar.resend_pool import ResendPool
from sidecar.rocketmq_front.server import front_server
from sidecar.server import SidecarService
from sidecar.spool_writer import SpoolWriter

LOG = logging.getLogger(__name__)
SERVICE_NAME = sidecar_pb2.DESCRIPTOR.services_by_name["SidecarService"].full_name
# The hosts a listener bound to every interface is reached at from this machine.
ANY_HOSTS = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "[::]": "[::1]", "": "127.0.0.1"}  # noqa: S104 - not a bind: a bound listener's address


class Sidecar:
    def __init__(self, config: SidecarConfig) -> None:
        self.config = config
        self.port = 0
        # The root of every background task (module docstring), entered at start, left at stop.
        self._exit_stack = contextlib.AsyncExitStack()
        self._root = asyncio.TaskGroup()
        self._loops: list[asyncio.Task[None]] = []
        self._ledger: AckLedger | None = None
        self._server: grpc.aio.Server | None = None
        self._front: grpc.aio.Server | None = None
        self.rocketmq_port = 0
        self._health_only: grpc.aio.Server | None = None
        self.health_port = 0
        self.metrics = SidecarMetrics()
        self.metrics_port = 0
        self._metrics_server: WSGIServer | None = None
        # What the resend pool leases as: this process, among the sidecar's incarnations.
        self.lease_owner = f"{config.sidecar_id}/{uuid.uuid4().hex[:12]}"
        self.readiness_reason = ""
        self.readiness_detail = ""
        self._leases_ended = False
        # The RocksDB outbox's directory, once this sidecar recorded itself as its holder.
        self._held_dir: Path | None = None

    async def start(self) -> None:
        """Open the parts, serve, and start the background tasks under the root TaskGroup.
        ``start`` and ``stop`` are awaited by one task: the one the root TaskGroup cancels when
        a background task fails (module docstring)."""
        c = self.config
        tls = server_tls(c)  # first: a TLS file that cannot be used stops the start at once
        self.outbox = await open_async_outbox(c.outbox_url, c.outbox_limits, c.outbox_threads)
        self.outbox_log = OutboxStateLog(redact(c.outbox_url), c.state_log_interval_ms)
        await self._open_parts()
        self._health = health.aio.HealthServicer()
        server = app_server(
            c, self.service, OutboxAdminService(self.outbox, self.pool.wake), self._health
        )
        # After the outbox's open: a RocksDB outbox's lock refuses a second sidecar on the same
        # directory, naming its holder, before a port could be found taken (ListenError).
        self.port = bind_grpc(server, f"{c.listen_host}:{c.listen_port}", tls)
        front = None
        if c.rocketmq_listen_host is not None:
            front = front_server(c, self.producer, self.service, self.metrics.front_forwarded)
            front_address = f"{c.rocketmq_listen_host}:{c.rocketmq_listen_port}"
            self.rocketmq_port = bind_grpc(front, front_address, tls, listener=ROCKETMQ)
        if c.health_listen_host is not None:
            self._health_only = health_server(self._health)
            health_address = f"{c.health_listen_host}:{c.health_listen_port}"
            self.health_port = bind_grpc(self._health_only, health_address, listener=HEALTH)
        if await self._check_ready():
            await self._outbox_reached()
        if c.metrics_host is not None:
            self._metrics_server = start_metrics_server(
                c.metrics_host, c.metrics_port, self.metrics.registry
            )
            self.metrics_port = self._metrics_server.server_port
        await server.start()
        self._server = server
        if front is not None:
            await front.start()
            self._front = front
        if self._health_only is not None:
            await self._health_only.start()
        self._record_holder()
        self._root = await self._exit_stack.enter_async_context(asyncio.TaskGroup())
        self._root.create_task(_watched("resend pool", self.pool.run()), name="resend pool")
        for name, work in self._background_loops():
            self._loops.append(self._root.create_task(_watched(name, work), name=name))
        LOG.info(
            "sidecar listening on %s:%d, broker %s, outbox %s",
            c.listen_host, self.port,
            ",".join(str(e) for e in c.producer.access_points), redact(c.outbox_url),
        )  # fmt: skip

    async def _open_parts(self) -> None:
        """Producer, FIFO fence, resend pool, intake, ledger and the gRPC service."""
        c = self.config
        self.producer = Producer(c.producer)
        backoff = Backoff(c.resend.backoff_initial_ms, c.resend.backoff_max_ms)
        # Loaded once the outbox is reached (_outbox_reached); FIFO messages wait for it.
        self.fence = FifoFence(self.outbox)
        self.broker_log = BrokerStateLog(self._pending_count, c.state_log_interval_ms)
        self.pool = ResendPool(
            c.resend, self.producer, self.outbox, backoff, self.metrics,
            on_fifo_delivered=self._recheck_fence, owner=self.lease_owner,
            broker_log=self.broker_log, outbox_log=self.outbox_log,
        )  # fmt: skip
        self.intake = Intake(
            SendCoalescer(self.producer, c.coalesce, self.metrics),
            SpoolWriter(self.outbox, self.metrics),
            self.fence,
            backoff,
            on_spooled=self.pool.wake,
            pull_in=self.pool.pull_in,
            broker_log=self.broker_log,
            outage=self.pool.outage,
            namespace=c.producer.namespace,
        )
        if c.ack_ledger_path is not None:
            self._ledger = AckLedger(
                c.ack_ledger_path, c.ack_ledger_flush_interval_ms, c.producer.namespace
            )
        self.service = SidecarService(
            self.intake,
            c.send_batch_entries_max,
            c.send_batch_bytes_max,
            c.send_stream_in_flight_max,
            c.intake_in_flight_max,
            on_sent=self._ledger.record if self._ledger else None,
            metrics=self.metrics,
        )
        self.metrics.intake_in_flight.set_function(lambda: self.service.intake_in_flight)
        self.metrics.fifo_fenced_groups.set_function(lambda: len(self.fence))

    def _record_holder(self) -> None:
        """Write the holder file beside a RocksDB outbox (outbox/holder.py): where
        ``rocketbox outbox`` asks for a change while this sidecar holds the outbox."""
        outbox_dir = rocksdb_dir(self.config.outbox_url)
        if outbox_dir is None:
            return
        host = self.config.listen_host
        host = ANY_HOSTS.get(host, f"[{host}]" if ":" in host and "[" not in host else host)
        holder = Holder(os.getpid(), f"{host}:{self.port}", "rocketbox sidecar", now_ms())
        try:
            write_holder(outbox_dir, holder)
        except OSError as e:  # the CLI then says the outbox is held, without naming by whom
            LOG.warning("could not record this sidecar as the outbox's holder: %s", e)
            return
        self._held_dir = outbox_dir

    def _background_loops(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """The loops under the root TaskGroup beside the resend pool, by name: they run until
        ``stop`` cancels them (the pool until ``stop`` asks it to end)."""
        tasks = [
            ("readiness", self._readiness_loop()),
            ("FIFO fence refresh", self._fence_loop()),
            ("broker state log", self.broker_log.run()),
        ]
        if self._metrics_server is not None or self.config.outbox_stats_enable:
            # Only for the gauges, so not without a reader of them (this sidecar's metrics
            # endpoint, or one serving its registry: rocketbox up's).
            tasks.append(("outbox stats", self._stats_loop()))
        if self._ledger is not None:
            tasks.append(("ledger", self._ledger.run()))
        return tasks

    async def stop(self) -> None:
        """Stop in order (module docstring); everything is closed whatever fails on the way.
        Raises the failures of background tasks (an ExceptionGroup): a sidecar that lost a part
        must not exit as if it stopped cleanly."""
        try:
            await self._drain()
        finally:
            try:
                # Every task of the root ends here: the pool once its resends finished, the loops
                # cancelled, the fence rechecks the pool's last deliveries started.
                await self._exit_stack.aclose()
            finally:
                await self._close()

    async def _drain(self) -> None:
        c = self.config
        self.service.accepting = False
        await self._health.enter_graceful_shutdown()
        # In-flight calls get the grace to finish (each is bounded by the send timeout, then
        # spooled); new calls are refused by the servers themselves.
        servers = [s for s in (self._server, self._front, self._health_only) if s is not None]
        await asyncio.gather(*(s.stop(c.shutdown_grace_ms / 1000.0) for s in servers))
        # Calls cut off by the grace may leave coalesced requests and spool writes running.
        await self.intake.wait_idle()
        self.pool.stop()
        for task in self._loops:
            task.cancel()

    async def _close(self) -> None:
        await self.producer.close()
        await self.outbox.close()
        if self._held_dir is not None:
            remove_holder(self._held_dir, os.getpid())
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        if self._ledger is not None:
            self._ledger.close()
        totals = self.pool.totals
        LOG.info(
            "sidecar stopped: %d delivered, %d rescheduled, %d buried by the resend pool",
            totals["DELIVERED"], totals["RESCHEDULED"], totals["BURIED"],
        )  # fmt: skip

    async def _end_dead_leases(self) -> None:
        """End the leases of this sidecar's earlier incarnations (module docstring)."""
        prefix = f"{self.config.sidecar_id}/"
        try:
            ended = await self.outbox.expire_leases(prefix, now_ms())
        except OutboxError as e:  # they end by themselves at their lease's end
            LOG.warning("the leases of %s* left by an earlier run were not ended: %s", prefix, e)
            return
        if ended:
            LOG.info(
                "ended %d outbox leases an earlier run of %s left: claimed again at once, "
                "checked against the broker's index before any resend",
                ended, self.config.sidecar_id,
            )  # fmt: skip

    async def _check_ready(self) -> bool:
        try:
            await self.outbox.check_writable()
        except OutboxNoSpaceError as e:
            reason, detail = OUTBOX_NO_SPACE, str(e)
        except OutboxError as e:
            reason, detail = OUTBOX_UNAVAILABLE, str(e)
        else:
            reason, detail = READY, ""
        # The state's lines (sidecar/health_log.py): one per change, rate-limited repeats.
        self.outbox_log.checked(reason, detail)
        self.readiness_reason, self.readiness_detail = reason, detail
        self.metrics.observe_readiness(reason)
        ready = reason == READY
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if ready
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", SERVICE_NAME):
            await self._health.set(name, status)
        return ready

    async def _outbox_reached(self) -> None:
        """What start does with the outbox once it can reach it: end the leases of earlier runs
        and load the FIFO fence (until then FIFO messages are refused UNAVAILABLE: a group's
        entries in the outbox are not known). Again by the readiness loop while not done."""
        if not self._leases_ended:
            await self._end_dead_leases()
            self._leases_ended = True
        if not self.fence.loaded:
            with contextlib.suppress(OutboxError):  # the readiness loop tries again
                await self.fence.load()

    async def _pending_count(self) -> int:
        # Counted, not scanned (Outbox.shared_stats): this sidecar's gauges read it so too.
        interval_ms = self.config.outbox_stats_interval_ms
        return (await self.outbox.shared_stats(now_ms(), self.lease_owner, interval_ms)).pending

    async def _readiness_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.readiness_interval_ms / 1000.0)
            with contextlib.suppress(Exception):
                if await self._check_ready():
                    await self._outbox_reached()

    async def _stats_loop(self) -> None:
        """The outbox gauges, under the outbox's label (sidecar/metrics.py): every sidecar
        sharing the outbox reads its counters; one at a time scans for the rest."""
        interval_ms = self.config.outbox_stats_interval_ms
        label = outbox_label(self.config.outbox_url, self.config.sidecar_id)
        while True:
            now = now_ms()
            try:
                stats = await self.outbox.shared_stats(now, self.lease_owner, interval_ms)
            except OutboxError as e:
                LOG.debug("outbox stats unavailable: %s", e)
            else:
                self.metrics.observe_stats(stats, now, label)
            await asyncio.sleep(interval_ms / 1000.0)

    def _recheck_fence(self, topic: str, message_group: str) -> None:
        """A FIFO entry left PENDING: lift its group's fence if it was the last (on a task of
        the root TaskGroup, so awaited before the outbox closes)."""
        try:
            self._root.create_task(self._recheck((topic, message_group)))
        except RuntimeError:  # the root is going down on a failure: the next start reloads
            LOG.debug("FIFO fence recheck of %s/%s skipped: stopping", topic, message_group)

    async def _recheck(self, group: tuple[str, str]) -> None:
        try:
            await self.fence.recheck(group)
        except Exception as e:
            # The fence stays up: order is kept; the periodic refresh lifts it later.
            LOG.debug("FIFO fence recheck failed: %s", e)

    async def _fence_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.fifo_fence_refresh_interval_ms / 1000.0)
            try:
                await self.fence.refresh()
            except OutboxError as e:  # fences stay up meanwhile: order is kept, not lost
                LOG.debug("FIFO fence refresh failed: %s", e)


async def _watched(name: str, work: Coroutine[Any, Any, None]) -> None:
    """``work``, its failure logged with its traceback the moment it happens (the root TaskGroup
    then stops the sidecar, and raises it again at stop)."""
    try:
        await work
    except Exception:
        LOG.critical("the sidecar's %s task failed: stopping the sidecar", name, exc_info=True)
        raise
