"""BrokerController: the broker process's parts, started and stopped in order.

start(): lock the store directory, bind the gRPC port, the metrics endpoint and a master's HA
listener (a held directory or a taken port fails here, before any work: StoreLockedError naming
the holder, ListenError naming the address), recover the store, load topics, start the timer,
transaction and send services and HA replication (broker/ha: a master serves its slaves, a slave
copies its master and refuses writes), then serve gRPC (messaging, admin, health), and return.
shutdown(): stop intake (the server refuses new calls, ends Telemetry streams, and finishes the
running calls within the grace period), drain the send queue, stop timer and transaction
services (saving progress), then shut the store down (flush, checkpoint, clean-exit marker).

Every background task (timer, transaction checks, send workers, state writers) runs in one root
asyncio.TaskGroup (background.py): one that dies stops the broker, and shutdown() raises it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Sequence
from wsgiref.simple_server import WSGIServer

import grpc
from grpc_health.v1 import health, health_pb2
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker.arrival import MessageArrivalNotifier
from broker.auth.acl_store import AclStore
from broker.background import BackgroundTasks
from broker.cluster_topics import ClusterTopics
from broker.config import BrokerConfig, store_host_address
from broker.consumer_offset import ConsumerOffsetManager
from broker.consumer_progress import QueueProgress, progress_keys, topic_progress
from broker.errors import BackgroundTaskError
from broker.flow_control import ForcedFlowControl, SendQueue
from broker.group_config import GroupConfigManager
from broker.grpc_service.acl_admin_service import add_guarded_servicers
from broker.grpc_service.admin_service import ADMIN_SERVICE_NAME, BrokerAdminService
from broker.grpc_service.client_activity import ClientActivity
from broker.grpc_service.client_registry import ClientRegistry
from broker.grpc_service.consumer_activity import ConsumerActivity
from broker.grpc_service.messaging_service import MessagingService
from broker.grpc_service.pull_activity import PullActivity
from broker.grpc_service.route_activity import ClusterRoute, RouteActivity, endpoints_of
from broker.grpc_service.send_activity import SendActivity
from broker.grpc_service.server import bind_server
from broker.ha.replication import HAState, Replication
from broker.ha.slave_synchronize import SlaveSynchronize
from broker.metrics import BrokerMetrics
from broker.pop_message import PopMessageService
from broker.register_broker import RegisterBrokerService
from broker.send_message import SendMessageService
from broker.store import STORE_BUILD
from broker.store.codec.message import MessageExt
from broker.store.commit_log_recovery import RecoveryReport
from broker.store.message_store import DefaultMessageStore
from broker.timer_message import TimerMessageService
from broker.topic_config import TopicConfigManager
from broker.transaction_message import TransactionalMessageService
from rocketbox_api.listen import HA, ListenError, start_metrics_server

LOG = logging.getLogger(__name__)

MESSAGING_SERVICE_NAME = "apache.rocketmq.v2.MessagingService"
SHUTDOWN_GRACE_S = 10.0


class BrokerController:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.metrics = BrokerMetrics()
        self.store = DefaultMessageStore(
            config.store,
            (config.route_host, config.listen_port),
            on_flush_seconds=self.metrics.observe_flush,
        )
        self.topics = TopicConfigManager(config.config_dir, config.default_topic_queue_nums)
        self.groups = GroupConfigManager(config.config_dir)
        self.arrivals = MessageArrivalNotifier()
        self.pull_offsets = ConsumerOffsetManager(config.config_dir)
        self.replication = Replication(config, self.store)
        self._pop: PopMessageService | None = None
        self.forced_flow_control = ForcedFlowControl()
        self.clients = ClientRegistry(config.telemetry_outbound_max)
        self.port = 0
        self.recovery_report: RecoveryReport | None = None
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self._send_queue: SendQueue | None = None
        self._timer: TimerMessageService | None = None
        self._transactions: TransactionalMessageService | None = None
        self._clients_activity: ClientActivity | None = None
        self.metrics_port = 0
        self._metrics_server: WSGIServer | None = None
        self._root: contextlib.AsyncExitStack | None = None
        self._tasks: BackgroundTasks
        # With NameServers: registrations (at start, every interval, on every topic change).
        self.registration: RegisterBrokerService | None = None
        if config.namesrv_addr:
            self.registration = RegisterBrokerService(
                config,
                self.topics,
                lambda: self.store.commit_log.max_offset,
                self.ha_address,
                self.on_master_changed,
            )
            self.topics.add_listener(self.registration.request_register)

    async def start(self) -> int:
        """Recover and serve; returns the bound port. On failure, what started is stopped.

        The root TaskGroup is entered here and left by shutdown(), both called by the task that
        runs the broker: it is the group's parent, which a dying background task cancels, so
        its wait ends and its shutdown() raises BackgroundTaskError (background.py)."""
        root = self._root = contextlib.AsyncExitStack()
        self._tasks = BackgroundTasks(await root.enter_async_context(asyncio.TaskGroup()))
        try:
            # The directory's lock first: a second broker on the same directory is told who
            # holds it, not that a port is taken. Then bind: the port (a free one when
            # listen_port is 0) is the store host every record carries, and what routes
            # advertise. The metrics endpoint binds with it, so a taken one fails before
            # recovery, not after it.
            self.store.lock()
            server, self.port = bind_server(self.config)
            self._server = server
            self._start_metrics_server()
            await self._bind_ha()
        except BaseException:
            await self.replication.stop()
            if self._server is not None:
                await self._server.stop(None)  # bound, never started: gives the port back
                self._server = None
            self.store.unlock()
            await self._leave_root()
            raise
        try:
            return await self._start_bound(server)
        except BaseException:
            await self.shutdown()
            raise

    async def _start_bound(self, server: grpc.aio.Server) -> int:
        cfg = self.config
        host = await asyncio.to_thread(store_host_address, cfg.route_host)  # records hold an IP
        self.store.store_host = (host, self.port)
        self.recovery_report = await asyncio.to_thread(self.store.start)
        self.topics.load()
        self.groups.load()
        self.arrivals.attach(self.store)
        messaging = self._build_services()
        await self._start_services()
        assert self._pop is not None
        acl = self._add_servicers(server, messaging)
        progress = (self._pop.progress, self.pull_offsets)
        configs = SlaveSynchronize(self.topics, self.groups, *progress, acl)
        await self.replication.start(self._tasks, configs)
        await server.start()
        if self.registration is not None:  # once it serves: routes may name it from now on
            self.registration.start(self._tasks, self.port)
        for service in ("", MESSAGING_SERVICE_NAME, ADMIN_SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        self.metrics.watch(self)
        if self._metrics_server is not None:
            LOG.info("broker metrics on http://%s:%s/metrics", cfg.metrics_host, self.metrics_port)
        LOG.info(
            "broker %s serving on %s:%s (store %s)",
            cfg.broker_name,
            cfg.listen_host,
            self.port,
            STORE_BUILD,
        )
        return self.port

    def _build_services(self) -> MessagingService:
        """The domain services and the gRPC activities over them."""
        cfg = self.config
        self._pop = PopMessageService(
            self.store,
            self.topics,
            cfg.config_dir,
            self.arrivals,
            connected=lambda client_id: self.clients.get(client_id) is not None,
            dead_letter_enable=not cfg.is_slave,
        )
        self._timer = TimerMessageService(self.store, cfg.config_dir, cfg.timer_pending_max)
        self._transactions = TransactionalMessageService(
            self.store,
            cfg.config_dir,
            cfg.transaction_timeout_ms,
            cfg.transaction_check_interval_ms,
            cfg.transaction_check_max,
            self._request_transaction_check,
        )
        self._send_queue = SendQueue(
            cfg.send_queue_capacity_max, cfg.wait_time_ms_in_send_queue, cfg.send_workers
        )
        sends = SendMessageService(
            self.store,
            self.topics,
            self.forced_flow_control,
            self._send_queue,
            self._timer,
            self._transactions,
            cfg.auto_create_topic_enable,
            self.metrics,
        )
        routes = self._route_activity(sends)
        consumers = ConsumerActivity(
            self._pop,
            self.groups,
            sends,
            routes,
            cfg.invisible_duration_ms_min,
            cfg.long_polling_timeout_ms,
        )
        self._clients_activity = ClientActivity(
            self.clients,
            self.groups,
            cfg.store.message_size_bytes_max,
            cfg.long_polling_timeout_ms,
            self._pop.progress.members,
        )
        return MessagingService(
            routes,
            self._clients_activity,
            SendActivity(
                sends,
                self._transactions,
                cfg.store.message_size_bytes_max,
                cfg.delay_ms_max,
                self.replication.write_refusal,
            ),
            consumers,
            PullActivity(
                self.store, sends, self.arrivals, self.pull_offsets, cfg.long_polling_timeout_ms
            ),
            self.replication.write_refusal,
        )

    def _route_activity(self, sends: SendMessageService) -> RouteActivity:
        """Routes of this broker alone, or (registered with NameServers) of its cluster."""
        cfg = self.config
        broker = pb.Broker(
            name=cfg.broker_name,
            id=0,  # the master: Python clients only use brokers with id 0
            endpoints=endpoints_of(f"{cfg.route_host}:{self.port}"),
        )
        reg = self.registration
        return RouteActivity(
            sends,
            broker,
            ClusterRoute(reg.outer_api, cfg.broker_cluster_name) if reg is not None else None,
            reg.register_broker_all if reg is not None else None,
            ClusterTopics(
                reg.outer_api, cfg.broker_cluster_name, cfg.broker_name, cfg.auth_admin
            ).create_on_peers
            if reg is not None and cfg.auto_create_topic_enable
            else None,
        )

    async def _start_services(self) -> None:
        assert self._timer is not None
        assert self._transactions is not None
        assert self._pop is not None
        assert self._send_queue is not None
        if not self.config.is_slave:
            # A slave's log is its master's bytes: its timer and transaction checks would
            # write there. They run on the master, whose writes the slave replicates.
            await self._timer.start(self._tasks)
            await self._transactions.start(self._tasks)
        await self._pop.start(self._tasks)
        await self.pull_offsets.start(self._tasks)
        self._send_queue.start(self._tasks)

    def _add_servicers(self, server: grpc.aio.Server, messaging: MessagingService) -> AclStore:
        assert self._pop is not None
        admin = BrokerAdminService(
            self.store,
            self.topics,
            self.forced_flow_control,
            self.groups,
            self._pop,
            self.clients,
            self.replication.write_refusal,
            self.replication.state,
        )
        refusals = self.metrics.access_refusals
        return add_guarded_servicers(
            server, self.config, messaging, admin, self._health, refusals, self.clients
        )

    # -- the cluster's seams: HA replication (broker/ha) and NameServer registration -------------
    def ha_address(self) -> str | None:
        """HOST:PORT of this master's HA listener, which its registrations advertise to slaves;
        None when it has none (a slave, or a stand-alone broker)."""
        return self.replication.ha_address()

    def on_master_changed(self, master_address: str | None, master_ha_address: str | None) -> None:
        """A slave's registration answer names its group's master (gRPC and HA addresses, or
        None while the group has no master): the slave replicates from and syncs configs with
        it. A master ignores it."""
        self.replication.on_master_changed(master_ha_address)

    def ha_state(self) -> HAState:
        return self.replication.state()

    async def _bind_ha(self) -> None:
        try:
            await self.replication.bind()
        except OSError as e:
            cfg = self.config
            address = f"{cfg.ha_listen_host}:{cfg.ha_listen_port}"
            raise ListenError(HA, address, e.strerror or str(e)) from e

    # -- what the scrape-time metrics read (broker/metrics.py BrokerState) ----------------------
    def consumer_progress(self) -> Iterator[tuple[str, str, Sequence[QueueProgress]]]:
        if self._pop is None:
            return
        for gc in self.groups.list():
            # A broadcast group's gauges are its members': "<group>@<member id>".
            for key in progress_keys(self._pop, gc):
                for topic in self._pop.progress.topics_of(key):
                    yield key, topic, topic_progress(self.store, self.topics, self._pop, key, topic)

    def long_polls_waiting(self) -> list[tuple[str, str, int]]:
        return self.arrivals.waiting_counts()

    def send_queue_depth(self) -> int:
        return self._send_queue.depth if self._send_queue is not None else 0

    def commitlog_offsets(self) -> tuple[int, int]:
        return self.store.commit_log.max_offset, self.store.commit_log_flushed_offset

    def _start_metrics_server(self) -> None:
        """Serve the registry (until ``metrics.watch`` the state's gauges are absent from it)."""
        cfg = self.config
        if cfg.metrics_host is not None:
            self._metrics_server = start_metrics_server(
                cfg.metrics_host, cfg.metrics_port, self.metrics.registry
            )
            self.metrics_port = self._metrics_server.server_port

    def _request_transaction_check(self, topic: str, half: MessageExt, transaction_id: str) -> bool:
        # Checks start after the server is up, so the messaging service exists by then.
        assert self._clients_activity is not None
        return self._clients_activity.request_transaction_check(topic, half, transaction_id)

    async def shutdown(self) -> None:
        if self.registration is not None:  # first: clients are routed elsewhere at once
            await self.registration.stop()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None
        if self._server is not None:
            await self._health.enter_graceful_shutdown()
            self.arrivals.wake_all()
            if self._clients_activity is not None:
                self._clients_activity.end_streams()
            await self._server.stop(SHUTDOWN_GRACE_S)
            self._server = None
        await self.replication.stop()
        if self._send_queue is not None:
            await self._send_queue.stop()
        if self._timer is not None:
            await self._timer.stop()
        if self._transactions is not None:
            await self._transactions.stop()
        if self._pop is not None:
            await self._pop.stop()
        await self.pull_offsets.stop()
        await asyncio.to_thread(self.store.shutdown)
        LOG.info("broker %s stopped", self.config.broker_name)
        await self._leave_root()

    async def _leave_root(self) -> None:
        """Leave the root TaskGroup, every task stopped by now; one that died is raised here."""
        root, self._root = self._root, None
        if root is None:
            return
        try:
            await root.aclose()
        except BaseExceptionGroup as group:
            died = group.subgroup(BackgroundTaskError)
            if died is None:
                raise
            first = died.exceptions[0]
            assert isinstance(first, BackgroundTaskError)
            raise first from first.__cause__  # the group adds nothing: the cause is the fault

    @property
    def timer(self) -> TimerMessageService:
        assert self._timer is not None
        return self._timer

    @property
    def transactions(self) -> TransactionalMessageService:
        assert self._transactions is not None
        return self._transactions
