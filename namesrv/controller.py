"""NamesrvController: the NameServer process's parts, started and stopped in order.

start(): bind the gRPC port and the metrics endpoint first (a taken port fails here, before any
work: ListenError naming the address), then start the scan for silent brokers and serve
(rocketbox.namesrv.v1.NameServerService and health). It returns once the server serves, with the
bound port. shutdown(): stop serving, then the scan. A scan that dies (a bug) is
``wait_failed``'s answer: the process stops rather than serving routes that never expire.

The scan runs every scan_not_active_broker_interval_ms and drops each broker whose last
registration is older than broker_channel_expired_time_ms (RocketMQ's scanNotActiveBroker).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from wsgiref.simple_server import WSGIServer

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from namesrv.config import GRPC_RECEIVE_MESSAGE_BYTES_MAX, NamesrvConfig
from namesrv.metrics import NamesrvMetrics
from namesrv.route_info import RouteInfoManager
from namesrv.servicer import NAMESRV_SERVICE_NAME, NameServerService
from rocketbox_api.listen import bind_grpc, start_metrics_server
from rocketbox_api.namesrv.v1 import namesrv_pb2_grpc
from rocketbox_api.server_guard import ServerGuard

LOG = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 5.0


class NamesrvController:
    def __init__(self, config: NamesrvConfig) -> None:
        self.config = config
        self.routes = RouteInfoManager(config.brokers_max)
        self.metrics = NamesrvMetrics(self.routes)
        self.port = 0
        self.metrics_port = 0
        self._server: grpc.aio.Server | None = None
        self._metrics_server: WSGIServer | None = None
        self._health = health.aio.HealthServicer()
        self._scan: asyncio.Task[None] | None = None

    async def start(self) -> int:
        cfg = self.config
        server = self._server = grpc.aio.server(
            interceptors=[ServerGuard()],
            options=[
                ("grpc.max_receive_message_length", GRPC_RECEIVE_MESSAGE_BYTES_MAX),
                ("grpc.so_reuseport", 0),  # a second NameServer on the port must fail
            ],
        )
        try:
            self.port = bind_grpc(server, f"{cfg.listen_host}:{cfg.listen_port}")
            if cfg.metrics_host is not None:
                self._metrics_server = start_metrics_server(
                    cfg.metrics_host, cfg.metrics_port, self.metrics.registry
                )
                self.metrics_port = self._metrics_server.server_port
        except BaseException:
            await self.shutdown()
            raise
        namesrv_pb2_grpc.add_NameServerServiceServicer_to_server(
            NameServerService(self.routes, self.metrics), server
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        self._scan = asyncio.create_task(self._scan_not_active_broker(), name="namesrv scan")
        await server.start()
        for service in ("", NAMESRV_SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        LOG.info("namesrv serving on %s:%s", cfg.listen_host, self.port)
        return self.port

    async def wait_failed(self) -> BaseException:
        """Returns when the scan dies (a bug: it never ends by itself), with its exception."""
        assert self._scan is not None
        try:
            await asyncio.shield(self._scan)
        except Exception as e:  # whatever killed it: the caller stops the NameServer
            LOG.critical("the NameServer's scan died; the NameServer stops", exc_info=True)
            return e
        raise AssertionError("the scan ended without an exception")

    async def _scan_not_active_broker(self) -> None:
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.scan_not_active_broker_interval_ms / 1000)
            for live in self.routes.scan_not_active_broker(cfg.broker_channel_expired_time_ms):
                reg = live.registration
                self.metrics.evicted.inc()
                LOG.warning(
                    "broker %s/%s/%s at %s dropped: no registration for %s ms (expiry %s ms)",
                    reg.cluster_name,
                    reg.broker_name,
                    reg.broker_id,
                    reg.broker_addr,
                    self.routes.now_ms() - live.last_update_timestamp_ms,
                    cfg.broker_channel_expired_time_ms,
                )

    async def shutdown(self) -> None:
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None
        if self._server is not None:
            await self._health.enter_graceful_shutdown()
            await self._server.stop(SHUTDOWN_GRACE_S)
            self._server = None
        if self._scan is not None:
            self._scan.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan
            self._scan = None
        LOG.info("namesrv stopped")
