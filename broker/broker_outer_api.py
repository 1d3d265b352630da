"""BrokerOuterAPI: the broker's calls to the NameServers (RocketMQ's BrokerOuterAPI).

Each NameServer is asked on its own (they do not talk to each other): a registration goes to
every one, concurrently; a route is asked of each in turn until one answers. Every call has a
deadline, so a NameServer that is down or silent costs at most that, never a hang, and never
stops the broker: its failure is the caller's to log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from rocketbox_api.namesrv.v1 import namesrv_pb2 as npb
from rocketbox_api.namesrv.v1 import namesrv_pb2_grpc

# RocketMQ's registration timeout is 6 s; a route lookup is on a client's QueryRoute, shorter.
REGISTER_DEADLINE_S = 6.0
ROUTE_DEADLINE_S = 3.0
# A registration carries every topic; the NameServer takes 16 MiB (namesrv/config.py).
SEND_MESSAGE_BYTES_MAX = 16 * 1024 * 1024


class NamesrvUnreachableError(Exception):
    """No NameServer answered (each one's failure, joined). Retriable."""


@dataclass(frozen=True, slots=True)
class RegisterOutcome:
    namesrv_addr: str
    response: npb.RegisterBrokerResponse | None
    error: grpc.RpcError | None


class BrokerOuterAPI:
    """Channels to the NameServers, made on first use (inside the event loop that uses them)."""

    def __init__(self, namesrv_addrs: Sequence[str]) -> None:
        self.namesrv_addrs = tuple(namesrv_addrs)
        self._stubs: dict[str, namesrv_pb2_grpc.NameServerServiceStub] = {}
        self._channels: list[grpc.aio.Channel] = []

    def _stub(self, addr: str) -> namesrv_pb2_grpc.NameServerServiceStub:
        stub = self._stubs.get(addr)
        if stub is None:
            channel = grpc.aio.insecure_channel(
                addr, options=[("grpc.max_send_message_length", SEND_MESSAGE_BYTES_MAX)]
            )
            self._channels.append(channel)
            stub = self._stubs[addr] = namesrv_pb2_grpc.NameServerServiceStub(channel)
        return stub

    async def register_broker_all(
        self, request: npb.RegisterBrokerRequest
    ) -> list[RegisterOutcome]:
        """Register with every NameServer at once; one outcome each, in namesrv_addrs' order."""

        async def one(addr: str) -> RegisterOutcome:
            try:
                response = await self._stub(addr).RegisterBroker(
                    request, timeout=REGISTER_DEADLINE_S
                )
            except grpc.RpcError as e:
                return RegisterOutcome(addr, None, e)
            return RegisterOutcome(addr, response, None)

        return list(await asyncio.gather(*(one(addr) for addr in self.namesrv_addrs)))

    async def unregister_broker_all(self, request: npb.UnregisterBrokerRequest) -> list[str]:
        """Unregister from every NameServer; the ones that failed, with why."""

        async def one(addr: str) -> str | None:
            try:
                await self._stub(addr).UnregisterBroker(request, timeout=REGISTER_DEADLINE_S)
            except grpc.RpcError as e:
                return f"{addr}: {e.code().name}: {e.details()}"
            return None

        failed = await asyncio.gather(*(one(addr) for addr in self.namesrv_addrs))
        return [f for f in failed if f is not None]

    async def get_route_info_by_topic(self, topic: str) -> npb.GetRouteInfoByTopicResponse | None:
        """The topic's route from the first NameServer that has one; None when those that
        answered hold none (a NameServer restarted a moment ago may not yet, so the others
        are asked too). NamesrvUnreachableError when none answered."""
        failures = []
        answered = False
        for addr in self.namesrv_addrs:
            try:
                response: npb.GetRouteInfoByTopicResponse = await self._stub(
                    addr
                ).GetRouteInfoByTopic(
                    npb.GetRouteInfoByTopicRequest(topic=topic), timeout=ROUTE_DEADLINE_S
                )
            except grpc.RpcError as e:
                if e.code() is grpc.StatusCode.NOT_FOUND:
                    answered = True
                    continue
                failures.append(f"{addr}: {e.code().name}")
                continue
            return response
        if answered:
            return None
        raise NamesrvUnreachableError("no NameServer answered: " + "; ".join(failures))

    async def get_broker_cluster_info(self) -> npb.GetBrokerClusterInfoResponse:
        """Every registered broker, from the first NameServer that answers;
        NamesrvUnreachableError when none does."""
        failures = []
        for addr in self.namesrv_addrs:
            try:
                response: npb.GetBrokerClusterInfoResponse = await self._stub(
                    addr
                ).GetBrokerClusterInfo(npb.GetBrokerClusterInfoRequest(), timeout=ROUTE_DEADLINE_S)
            except grpc.RpcError as e:
                failures.append(f"{addr}: {e.code().name}")
                continue
            return response
        raise NamesrvUnreachableError("no NameServer answered: " + "; ".join(failures))

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()
        self._channels.clear()
        self._stubs.clear()
