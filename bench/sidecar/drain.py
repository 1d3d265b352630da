"""(c) The drain rate per backend after the broker returns, beside the direct producer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import grpc

from bench.process_control import BenchError
from bench.sidecar.clients import BatchClient, DirectClient, make_entries
from bench.sidecar.core import BenchCore
from bench.sidecar.loops import CpuMeter, Run, closed_loop, deadline_s
from bench.sidecar.processes import REF_TOPIC, RPC_TIMEOUT_S, TOPIC, Child
from bench.sidecar.table import rate_at_least, rate_row, versus
from bench.sidecar.targets import BATCH, BATCH_WINDOW, DRAIN_MIN, DRAIN_POLL_MS
from outbox.outbox import Outbox
from rocketbox_api.admin.v1 import broker_admin_pb2, broker_admin_pb2_grpc


class DrainParts(BenchCore):
    """(c) the drain rate after the broker returns."""

    async def part_c(self, backends: Sequence[str]) -> None:
        for backend in backends:
            await self.drain(backend)
            await asyncio.to_thread(self.res.drop_data)

    async def drain(self, backend: str) -> None:
        s = self.s
        n = s.drain_messages
        url = self.res.outbox_url(backend)
        outbox = await asyncio.to_thread(self.res.open_outbox, url)
        entries = make_entries(n, due_in_ms=0)
        for i in range(0, n, 500):
            await asyncio.to_thread(outbox.put, entries[i : i + 500])
        if backend == "rocksdb":  # one process at a time
            await asyncio.to_thread(self.res.close_outbox, outbox)
        broker = await asyncio.to_thread(self.res.broker)
        args = (
            f"--resend-concurrency-max={s.drain_concurrency}",
            f"--claim-batch-max={s.drain_claim_batch}",
            f"--poll-interval-ms={DRAIN_POLL_MS}",
        )
        sidecar = await asyncio.to_thread(self.res.sidecar, broker.endpoint, url, *args)
        cpu = CpuMeter({"sc": sidecar, "br": broker})
        stats_outbox = None if backend == "rocksdb" else outbox
        stored, done_at = await self.wait_drained(broker, stats_outbox, n, sidecar)
        used = cpu.read()
        seconds = done_at - sidecar.ready_at
        self.memory_row(sidecar, f"(c) {backend} drain")
        await asyncio.to_thread(self.res.stop, sidecar)
        if self.drain_refs is None:
            self.drain_refs = await self.drain_references(broker)
        if backend == "rocksdb":
            outbox = await asyncio.to_thread(self.res.open_outbox, url)
        stats = await asyncio.to_thread(outbox.stats, int(time.time() * 1000))
        await asyncio.to_thread(self.res.close_outbox, outbox)
        await asyncio.to_thread(self.res.stop, broker)
        run = Run(n, seconds, used, "delivered")
        if stats.pending or stats.dead or stats.delivered != n or stored != n:
            example = (
                f"broker holds {stored:,} of {n:,}; outbox pending {stats.pending:,}, "
                f"delivered {stats.delivered:,}, dead {stats.dead:,}"
            )
            run.outcomes[example] = max(1, abs(n - stats.delivered), stored - n)
        row = rate_row("c", f"{backend} drain", run,
                       checks=[rate_at_least(run.rate, DRAIN_MIN[backend])],
                       **versus(run, self.drain_refs[0].rate, "direct"))  # fmt: skip
        row.detail += f" (sidecar {' '.join(args)})"
        self.add(row)

    async def drain_references(self, broker: Child) -> tuple[Run, Run]:
        """Against the drain's broker, to REF_TOPIC: the direct Producer with the pool's
        concurrency (one message a send, as the pool sends), and BATCH messages a request."""
        n = self.s.drain_messages
        direct = DirectClient(broker.port, REF_TOPIC)
        batch = BatchClient(broker.endpoint, REF_TOPIC, BATCH)
        try:
            window = min(self.s.drain_concurrency, 64)
            await closed_loop(direct.send, 2 * window, window, "stored", CpuMeter({}))
            await batch.run(4 * BATCH * BATCH_WINDOW, BATCH_WINDOW, CpuMeter({}))
            await self.settle(broker)
            one = await closed_loop(direct.send, n, window, "stored", CpuMeter({"br": broker}))
            self.add(rate_row("c", f"reference: direct Producer, {window} in flight", one))
            batched = await batch.run(n, BATCH_WINDOW, CpuMeter({"br": broker}))
            self.add(
                rate_row("c", f"reference: raw SendMessage of {BATCH}, {BATCH_WINDOW} in flight",
                         batched)
            )  # fmt: skip
        finally:
            await direct.close()
            await batch.close()
        return one, batched

    async def wait_drained(
        self, broker: Child, outbox: Outbox | None, n: int, sidecar: Child
    ) -> tuple[int, float]:
        """Poll until the broker holds ``n`` messages of the topic and the outbox (when it can be
        read from here) has none pending; the broker's count and the time."""
        deadline = time.monotonic() + deadline_s(n)
        async with grpc.aio.insecure_channel(broker.endpoint) as channel:
            admin: Any = broker_admin_pb2_grpc.BrokerAdminStub(channel)
            request = broker_admin_pb2.DescribeTopicRequest(topic=TOPIC)
            stored = 0
            while time.monotonic() < deadline:
                if sidecar.proc.poll() is not None:
                    raise BenchError(f"the sidecar exited while draining:\n{sidecar.output()}")
                response = await admin.DescribeTopic(request, timeout=RPC_TIMEOUT_S)
                stored = sum(q.max_queue_offset - q.min_queue_offset for q in response.queues)
                if stored >= n:
                    if outbox is None:
                        return stored, time.perf_counter()
                    stats = await asyncio.to_thread(outbox.stats, int(time.time() * 1000))
                    if stats.pending == 0:
                        return stored, time.perf_counter()
                await asyncio.sleep(DRAIN_POLL_MS / 1000.0)
        raise BenchError(f"drain: the broker holds {stored:,} of {n:,} after {deadline_s(n):.0f} s")
