"""(a) Broker up: the sidecar's sends beside a direct client, latency at paced rates, overload."""

from __future__ import annotations

import asyncio
from typing import Any

from bench.sidecar.clients import (
    CANCELLED,
    LIBRARY_SETTINGS,
    RESOURCE_EXHAUSTED,
    DirectClient,
    SidecarClient,
)
from bench.sidecar.core import BenchCore
from bench.sidecar.loops import CpuMeter, Send, closed_loop, open_loop, percentile
from bench.sidecar.processes import (
    Child,
)
from bench.sidecar.table import (
    Row,
    at_least,
    at_most,
    ms,
    rate_at_least,
    rate_row,
    sidecar_cpu_at_most,
    versus,
)
from bench.sidecar.targets import (
    ADDED_LATENCY_MAX_MS,
    BATCH,
    BATCH_WINDOW,
    DAPR_ADDED_P99_MS,
    LIBRARY_RATE_MIN,
    OVERLOAD_FACTOR,
    OVERLOAD_OFFERED_MIN,
    OVERLOAD_P99_MAX_MS,
    STREAM_RATE_MIN,
    UNARY_VS_DIRECT_MIN,
)


class SendParts(BenchCore):
    """(a) throughput, latency and overload, broker up."""

    async def part_a(self, memory_only: bool = False) -> None:
        s = self.s
        broker = await asyncio.to_thread(self.res.broker)
        outbox_url = self.res.outbox_url("rocksdb")
        sidecar = await asyncio.to_thread(self.res.sidecar, broker.endpoint, outbox_url)
        direct = DirectClient(broker.port)
        client = SidecarClient(sidecar.endpoint, BATCH)
        procs = {"sc": sidecar, "br": broker}
        w = s.window
        try:
            warmup = 2 * w
            await closed_loop(direct.send, warmup, w, "stored", CpuMeter({}))
            await closed_loop(client.send, warmup, w, "stored", CpuMeter({}))
            await client.stream(warmup, max(s.streams), s.stream_window, "stored", CpuMeter({}))
            await client.run_batches(warmup * BATCH, BATCH_WINDOW, "stored", CpuMeter({}))
            assert sidecar.memory is not None
            sidecar.memory.take()
            if not memory_only:
                await self.settle(broker)
                run = await closed_loop(
                    direct.send, s.messages, w, "stored", CpuMeter({"br": broker})
                )
                self.direct_rate = run.rate
                self.add(rate_row("a", f"direct: Producer -> broker, 1 msg/request, {w} in flight",
                                  run))  # fmt: skip
            await self.settle(broker)
            unary = await closed_loop(client.send, s.messages, w, "stored", CpuMeter(procs))
            self.unary_rate = unary.rate
            checks = [sidecar_cpu_at_most(unary, "Send")]
            if self.direct_rate is not None:
                checks.insert(0, at_least(unary.rate / self.direct_rate, UNARY_VS_DIRECT_MIN,
                                          f">= {UNARY_VS_DIRECT_MIN:g}x direct"))  # fmt: skip
            self.add(
                rate_row("a", f"Send (unary), coalescing on, {w} in flight", unary,
                         checks=checks, **versus(unary, self.direct_rate, "direct"))
            )  # fmt: skip
            if not memory_only:
                await self.coalescing_off(broker)
            await self.stream_batch_library(client, broker, sidecar.endpoint, procs)
            self.memory_row(sidecar, "(a) throughput")
            if not memory_only:
                for rate in s.rates:
                    await self.latency(direct, client, broker, sidecar, rate)
                self.memory_row(sidecar, "(a) paced")
        finally:
            await client.close()
            await direct.close()
        await asyncio.to_thread(self.res.stop, sidecar)
        await self.overload(broker)
        await asyncio.to_thread(self.res.stop, broker)

    async def stream_batch_library(
        self, client: SidecarClient, broker: Child, endpoint: str, procs: dict[str, Child]
    ) -> None:
        """(a)'s SendStream rows, its SendBatch row and the client library's row."""
        s = self.s
        w = s.window
        for streams in s.streams:
            await self.settle(broker)
            stream = await client.stream(
                s.messages * 2, streams, s.stream_window, "stored", CpuMeter(procs)
            )
            if streams == s.streams[0]:
                self.stream_rate = stream.rate
            self.add(
                rate_row("a", f"SendStream, {streams} x {s.stream_window} in flight", stream,
                         checks=[rate_at_least(stream.rate, STREAM_RATE_MIN),
                                 sidecar_cpu_at_most(stream, "SendStream")],
                         **versus(stream, self.direct_rate, "direct"))
            )  # fmt: skip
        await self.settle(broker)
        batches = await client.run_batches(s.messages * 2, BATCH_WINDOW, "stored", CpuMeter(procs))
        self.add(
            rate_row("a", f"SendBatch of {BATCH}, {BATCH_WINDOW} in flight",
                     batches, checks=[sidecar_cpu_at_most(batches, "SendBatch")],
                     **versus(batches, self.direct_rate, "direct"))
        )  # fmt: skip
        figure = f"client library batching sender, {w} concurrent send()"
        if not self.missing("a", figure, "rocketbox_client"):
            lib = await self.library_run(endpoint, s.messages * 2, "stored", procs, broker)
            row = rate_row("a", figure, lib, checks=[rate_at_least(lib.rate, LIBRARY_RATE_MIN)],
                           **versus(lib, self.direct_rate, "direct"))  # fmt: skip
            row.detail += f"; {LIBRARY_SETTINGS}"
            self.add(row)

    async def coalescing_off(self, broker: Child) -> None:
        """Unary Send through a second sidecar started with --no-coalesce: one SendMessage per
        message, the sidecar before coalescing."""
        w = self.s.window
        figure = f"Send (unary), coalescing off, {w} in flight"
        if self.missing("a", figure, "--no-coalesce"):
            return
        url = self.res.outbox_url("rocksdb")
        sidecar = await asyncio.to_thread(self.res.sidecar, broker.endpoint, url, "--no-coalesce")
        client = SidecarClient(sidecar.endpoint)
        try:
            await closed_loop(client.send, 2 * w, w, "stored", CpuMeter({}))
            await self.settle(broker)
            run = await closed_loop(
                client.send, self.s.messages, w, "stored", CpuMeter({"sc": sidecar, "br": broker})
            )
        finally:
            await client.close()
        await asyncio.to_thread(self.res.stop, sidecar)
        row = rate_row("a", figure, run, **versus(run, self.direct_rate, "direct"))
        row.detail += " (a second sidecar, --no-coalesce)"
        if self.unary_rate:
            row.detail += f"; {run.rate / self.unary_rate:.2f}x of coalescing on"
        self.add(row)

    async def latency(
        self, direct: DirectClient, client: SidecarClient, broker: Child, sidecar: Child,
        rate: float,
    ) -> None:  # fmt: skip
        sends: dict[str, Send] = {"direct": direct.send, "sidecar": client.send}
        # The direct rounds' CPU leaves the (idle) sidecar out: it is not on their path.
        procs = {"direct": {"br": broker}, "sidecar": {"sc": sidecar, "br": broker}}
        paced = await self.paced(sends, procs, broker, rate, "stored")
        self.paced_rows("a", paced, " (not stored)")
        targets = ADDED_LATENCY_MAX_MS.get(rate, {})
        for q in (50, 99):
            added = paced.p("sidecar", q) - paced.p("direct", q)
            checks = [at_most(added, targets[q], f"<= {targets[q]:g} ms")] if q in targets else []
            peer: dict[str, Any] = {}
            if q == 99:
                peer = {"reference": f"Dapr adds {DAPR_ADDED_P99_MS} ms",
                        "ratio": added / DAPR_ADDED_P99_MS}  # fmt: skip
            self.add(
                Row("a", f"added p{q} latency, {rate:,.0f}/s paced", added, "ms",
                    checks=checks, **peer)
            )  # fmt: skip

    async def overload(self, broker: Child) -> None:
        """Unary Send open loop at OVERLOAD_FACTOR x the unary STORED rate, on a fresh sidecar:
        what it answers must stay fast, the excess be refused at once, its memory bounded."""
        s = self.s
        figure = f"overload: Send open loop at {OVERLOAD_FACTOR:g}x unary, answered p99"
        if self.missing("a", figure, "--pending-calls-max"):
            return
        assert self.unary_rate is not None
        args = (
            f"--intake-in-flight-max={s.overload_intake_in_flight_max}",
            f"--pending-calls-max={s.overload_pending_calls_max}",
        )
        url = self.res.outbox_url("rocksdb")
        sidecar = await asyncio.to_thread(self.res.sidecar, broker.endpoint, url, *args)
        client = SidecarClient(sidecar.endpoint)
        rate = OVERLOAD_FACTOR * self.unary_rate
        count = max(1, int(rate * s.overload_seconds))
        try:
            await closed_loop(client.send, 2 * s.window, s.window, "stored", CpuMeter({}))
            await self.settle(broker)
            assert sidecar.memory is not None
            sidecar.memory.take()
            meter = CpuMeter({"sc": sidecar, "br": broker})
            got = await open_loop(client.send, count, rate)
            cpu = meter.read()
        finally:
            await client.close()
        stored, spooled = got.answered("stored"), got.answered("spooled")
        answered = stored + spooled
        refused, dropped = got.answered(RESOURCE_EXHAUSTED), got.answered(CANCELLED)
        failed = got.failures("stored", "spooled", RESOURCE_EXHAUSTED, CANCELLED)
        offered = got.offered_rate / rate
        detail = (
            f"{count:,} sends in {got.seconds:.2f} s, offered {got.offered_rate:,.0f}/s of "
            f"{rate:,.0f}/s; answered {len(answered):,} (stored {len(stored):,}, spooled "
            f"{len(spooled):,}), p50 {ms(percentile(answered, 50))}; p99 from the call's own "
            f"start {ms(percentile(got.answered('stored', 'spooled', from_start=True), 99))}"
        )
        if offered < OVERLOAD_OFFERED_MIN:
            detail += "; the bench could NOT offer the rate (its own CPU): not an overload test"
        if failed:
            detail += f"; FAILED: {failed}"
        us = cpu.us_per_message(count)
        p99 = percentile(answered, 99)
        self.add(
            Row("a", figure, p99, "ms", reference=f"offered {got.offered_rate:,.0f}/s",
                ratio=offered,
                checks=[at_most(p99, OVERLOAD_P99_MAX_MS, f"<= {OVERLOAD_P99_MAX_MS:g} ms"),
                        at_least(offered, OVERLOAD_OFFERED_MIN,
                                 f"offered >= {OVERLOAD_OFFERED_MIN:g}x")],
                us_per_message=us, cores=cpu.cores(), detail=detail,
                failures=sum(failed.values()))
        )  # fmt: skip
        # Refused at once: by admission control (RESOURCE_EXHAUSTED, with a retry-after) or,
        # before the sidecar's code, by gRPC past --pending-calls-max (CANCELLED).
        refusals = refused + dropped
        self.add(
            Row("a", "overload: refused at once, p99", percentile(refusals, 99), "ms",
                reference=f"{len(refusals):,} of {count:,} refused",
                checks=[at_most(percentile(refusals, 99), OVERLOAD_P99_MAX_MS,
                                f"<= {OVERLOAD_P99_MAX_MS:g} ms")],
                us_per_message=us, cores=cpu.cores(),
                detail=f"{len(refused):,} RESOURCE_EXHAUSTED by admission control (p50 "
                f"{ms(percentile(refused, 50))}), {len(dropped):,} CANCELLED by gRPC past "
                f"--pending-calls-max (p50 {ms(percentile(dropped, 50))}); CPU per message: "
                f"per send offered")
        )  # fmt: skip
        self.memory_row(sidecar, "(a) overload")
        await asyncio.to_thread(self.res.stop, sidecar)
