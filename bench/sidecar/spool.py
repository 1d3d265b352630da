"""(b) Broker down: the spool rate per outbox backend beside the outbox's own and beside (a)'s
stored rate, the resend pool running as in production (it probes the dead broker); then
throttled, the pool held off."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.sidecar.clients import LIBRARY_SETTINGS, SidecarClient, make_entries
from bench.sidecar.core import BenchCore
from bench.sidecar.loops import CpuMeter, Run, closed_loop
from bench.sidecar.processes import (
    HOST,
    closed_port,
    set_flow_control,
)
from bench.sidecar.table import at_least, rate_at_least, rate_row, versus
from bench.sidecar.targets import (
    BATCH,
    BATCH_WINDOW,
    NO_RESEND_ARGS,
    RAW_BATCH,
    RAW_THREADS,
    SPOOL_BATCHED_MIN,
    SPOOL_SENDERS,
    SPOOL_STREAM_MIN,
    SPOOL_STREAM_VS_STORED_MIN,
    SPOOL_UNARY_VS_STORED_MIN,
    THROTTLED_STREAM_MIN,
)
from outbox.entry import OutboxEntry


class SpoolParts(BenchCore):
    """(b) the spool rate, broker down; then throttled."""

    async def part_b(self, backends: Sequence[str], memory_only: bool = False) -> None:
        for backend in backends:
            await self.spool(backend, memory_only)
            await asyncio.to_thread(self.res.drop_data)
        if "rocksdb" in backends and not memory_only:
            await self.throttled()
            await asyncio.to_thread(self.res.drop_data)

    async def spool(self, backend: str, memory_only: bool) -> None:
        s = self.s
        raw_rate: float | None = None
        if not memory_only:
            singles, batched = await asyncio.to_thread(self.raw_puts, backend)
            self.add(rate_row("b", f"{backend} raw outbox.put, {RAW_THREADS} threads x 1",
                              singles))  # fmt: skip
            self.add(rate_row("b", f"{backend} raw outbox.put, 1 thread x {RAW_BATCH}/put",
                              batched))  # fmt: skip
            raw_rate = singles.rate
        url = self.res.outbox_url(backend)
        down = f"{HOST}:{closed_port()}"
        sidecar = await asyncio.to_thread(self.res.sidecar, down, url)
        client = SidecarClient(sidecar.endpoint, BATCH)
        procs = {"sc": sidecar}
        streams = s.streams[0]
        n = s.spool_messages
        try:
            warmup = 2 * SPOOL_SENDERS
            await closed_loop(client.send, warmup, SPOOL_SENDERS, "spooled", CpuMeter({}))
            await client.stream(warmup, streams, s.stream_window, "spooled", CpuMeter({}))
            await client.run_batches(warmup * BATCH, BATCH_WINDOW, "spooled", CpuMeter({}))
            assert sidecar.memory is not None
            sidecar.memory.take()

            def with_ref(run: Run) -> dict[str, Any]:
                return versus(run, raw_rate, f"raw {RAW_THREADS}x1")

            unary = await closed_loop(client.send, n, SPOOL_SENDERS, "spooled", CpuMeter(procs))
            checks = []
            if self.unary_rate is not None:
                minimum = SPOOL_UNARY_VS_STORED_MIN * self.unary_rate
                checks = [at_least(unary.rate, minimum, f">= {SPOOL_UNARY_VS_STORED_MIN:g}x "
                                   f"(a) unary {self.unary_rate:,.0f}")]  # fmt: skip
            row = rate_row("b", f"{backend} spool: Send (unary), {SPOOL_SENDERS} in flight", unary,
                           checks=checks, **with_ref(unary))  # fmt: skip
            if self.unary_rate is None:
                row.detail += "; no target: its target is (a)'s unary STORED rate, not run"
            self.add(row)
            stream = await client.stream(n, streams, s.stream_window, "spooled", CpuMeter(procs))
            checks = [rate_at_least(stream.rate, SPOOL_STREAM_MIN)]
            if self.stream_rate is not None:
                minimum = SPOOL_STREAM_VS_STORED_MIN * self.stream_rate
                checks.append(at_least(stream.rate, minimum, f">= {SPOOL_STREAM_VS_STORED_MIN:g}x"
                                       f" (a) SendStream {self.stream_rate:,.0f}"))  # fmt: skip
            row = rate_row("b", f"{backend} spool: SendStream, {streams} x {s.stream_window} in "
                           "flight", stream, checks=checks, **with_ref(stream))  # fmt: skip
            if self.stream_rate is not None:
                row.detail += f"; {stream.rate / self.stream_rate:.2f}x of (a) SendStream stored"
            self.add(row)
            batches = await client.run_batches(n, BATCH_WINDOW, "spooled", CpuMeter(procs))
            self.add(
                rate_row("b", f"{backend} spool: SendBatch of {BATCH}, {BATCH_WINDOW} in flight",
                         batches,
                         checks=[rate_at_least(batches.rate, SPOOL_BATCHED_MIN[backend])],
                         **with_ref(batches))
            )  # fmt: skip
            figure = f"{backend} spool: client library, {s.window} concurrent send()"
            if not self.missing("b", figure, "rocketbox_client"):
                lib = await self.library_run(sidecar.endpoint, n, "spooled", procs, None)
                row = rate_row("b", figure, lib,
                               checks=[rate_at_least(lib.rate, SPOOL_BATCHED_MIN[backend])],
                               **with_ref(lib))  # fmt: skip
                row.detail += f"; {LIBRARY_SETTINGS}"
                self.add(row)
            self.memory_row(sidecar, f"(b) {backend} spool")
        finally:
            await client.close()
        await asyncio.to_thread(self.res.stop, sidecar)

    async def throttled(self) -> None:
        """The broker up but answering every send TOO_MANY_REQUESTS (forced flow control):
        every message must be answered SPOOLED, cause THROTTLED. RocksDB outbox."""
        s = self.s
        broker = await asyncio.to_thread(self.res.broker)
        url = self.res.outbox_url("rocksdb")
        sidecar = await asyncio.to_thread(self.res.sidecar, broker.endpoint, url, *NO_RESEND_ARGS)
        client = SidecarClient(sidecar.endpoint)
        procs = {"sc": sidecar, "br": broker}
        expect = "spooled THROTTLED"
        streams = s.streams[0]
        n = s.spool_messages
        try:
            await closed_loop(client.send, 2 * s.window, s.window, "stored", CpuMeter({}))
            await set_flow_control(broker, True)
            await closed_loop(client.send, 2 * SPOOL_SENDERS, SPOOL_SENDERS, expect, CpuMeter({}))
            await client.stream(2 * SPOOL_SENDERS, streams, s.stream_window, expect, CpuMeter({}))
            stream = await client.stream(n, streams, s.stream_window, expect, CpuMeter(procs))
            self.add(
                rate_row("b", f"rocksdb THROTTLED: SendStream, {streams} x {s.stream_window} in "
                         "flight", stream,
                         checks=[rate_at_least(stream.rate, THROTTLED_STREAM_MIN)])
            )  # fmt: skip
            unary = await closed_loop(client.send, n, SPOOL_SENDERS, expect, CpuMeter(procs))
            self.add(
                rate_row("b", f"rocksdb THROTTLED: Send (unary), {SPOOL_SENDERS} in flight",
                         unary, **versus(unary, stream.rate, "SendStream"))
            )  # fmt: skip
            await set_flow_control(broker, False)
            self.memory_row(sidecar, "(b) rocksdb throttled")
        finally:
            await client.close()
        await asyncio.to_thread(self.res.stop, sidecar)
        await asyncio.to_thread(self.res.stop, broker)

    def raw_puts(self, backend: str) -> tuple[Run, Run]:
        """outbox.put in this process: RAW_THREADS threads one entry a put, then one thread
        RAW_BATCH entries a put; a fresh outbox."""
        outbox = self.res.open_outbox(self.res.outbox_url(backend))
        try:
            n = self.s.raw_messages
            singles = make_entries(n, due_in_ms=3_600_000)
            per_thread = [singles[i::RAW_THREADS] for i in range(RAW_THREADS)]

            def put_each(entries: list[OutboxEntry]) -> None:
                for entry in entries:
                    outbox.put([entry])

            with ThreadPoolExecutor(RAW_THREADS) as pool:
                list(pool.map(put_each, [e[:2] for e in per_thread]))  # warm: connections
                cpu = CpuMeter({})
                start = time.perf_counter()
                list(pool.map(put_each, [e[2:] for e in per_thread]))
                seconds = time.perf_counter() - start
            count = sum(len(e[2:]) for e in per_thread)
            threads = Run(count, seconds, cpu.read(), "put")
            batches = make_entries(n, due_in_ms=3_600_000)
            cpu = CpuMeter({})
            start = time.perf_counter()
            for i in range(0, n, RAW_BATCH):
                outbox.put(batches[i : i + RAW_BATCH])
            batched = Run(n, time.perf_counter() - start, cpu.read(), "put")
            stats = outbox.stats(int(time.time() * 1000))
            if stats.pending != 2 * n:
                self.failed.append(f"{backend} raw puts: {stats.pending:,} pending afterwards")
        finally:
            self.res.close_outbox(outbox)
        return threads, batched
