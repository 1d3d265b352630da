"""What the sidecar's lookup by unique key over RocketMQ's remoting protocol costs, beside a v2
send to the same stand-ins, and what it changes in a drain of maybe-stored entries, in one run.

    .venv/bin/python bench/remoting_lookup_bench.py [--lookups N] [--entries E] [--rounds R]
                                                    [--brokers B]

The stand-ins, on this process's event loop: a v2 endpoint as a RocketMQ 5 proxy is one
(tests/rocketmq_remoting/scripted.py: SendMessage stored in memory, no rocketbox lookup) and a
RocketMQ NameServer with B brokers on their remoting ports (tests/rocketmq_remoting/standin.py),
which hold what the v2 endpoint stored (on its broker, the first; the others hold nothing and
are asked all the same, as every master of a route is).

(a) latency, N times each, in turn: a v2 SendMessage of one 1 KiB message through the sidecar's
    producer (the reference: one gRPC round trip on a warm channel); the lookup of that message
    (FOUND); of a message never sent (NOT_FOUND); of the message again with each broker's index
    one message behind its commitlog (one more poll of the dispatcher); and the FOUND lookup on
    connections of its own, opened and closed by it (``lookup_by_uniq_key``). The others go
    through one ``UniqKeyLookup``, as the sidecar's producer does: connections kept open, the
    route kept (FOUND asks each broker for its progress, then three queries: the topic and the
    two delay topics; NOT_FOUND asks the NameServer for the route again as well). Prints median
    and 90th percentile, ms.
(b) drain, R rounds, the order of the modes alternating: a real ``rocketbox sidecar`` (default
    resend settings, RocksDB outbox) starts on E maybe-stored entries, half of which the broker
    already stored, and drains them; without ``--lookup-namesrv`` every entry is resent
    unchecked, with it the stored half is settled by the lookup. Prints the median drain time
    (ready to all DELIVERED), entries a second, SendMessage requests, duplicates stored,
    unchecked resends and the sidecar's CPU seconds.
The load average before and after: compare the two sides of each table, not absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.process_control import BenchError, Child, load, removed_on_exit
from outbox import OutboxEntry, OutboxMessage, SpoolCause, open_outbox
from sidecar.message_id import MessageIdGenerator
from sidecar.producer import Producer, ProducerConfig
from sidecar.remoting import (
    LookupResult,
    UniqKeyLookup,
    UniqKeyLookupConfig,
    Verdict,
    lookup_by_uniq_key,
    parse_namesrv_addrs,
)
from tests.prometheus import sample, scrape
from tests.rocketmq_remoting.scripted import HeldByScripted, proxy_like_broker
from tests.rocketmq_remoting.standin import RemotingCluster, remoting_cluster
from tests.sidecar.scripted_broker import ScriptedBroker

TOPIC = "LookupBenchTopic"
BODY = os.urandom(1024)
STORE_BATCH = 100
DRAIN_DEADLINE_S = 300.0
SCRAPE_INTERVAL_S = 0.02
SIDECAR_READY = re.compile(r"sidecar listening on \S+:(\d+)")
SIDECAR_METRICS = re.compile(r"sidecar metrics on \S+:(\d+)")
MODES = ("without --lookup-namesrv", "with --lookup-namesrv")
IDS = MessageIdGenerator()
T = TypeVar("T")


def message() -> OutboxMessage:
    return OutboxMessage(topic=TOPIC, body=BODY, message_id=IDS.next_id())


def broker_names(count: int) -> tuple[str, ...]:
    return tuple(f"broker-{chr(ord('a') + n)}" for n in range(count))


async def timed(samples: list[float], call: Awaitable[T]) -> T:
    started = time.perf_counter()
    result = await call
    samples.append((time.perf_counter() - started) * 1000)
    return result


async def latency(lookups: int, brokers: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {
        "v2 SendMessage (reference)": [], "lookup, FOUND": [], "lookup, NOT_FOUND": [],
        "lookup, FOUND, index 1 behind": [], "lookup, FOUND, own connections": [],
    }  # fmt: skip
    send, found, not_found, behind, one_shot = samples.values()
    async with (
        proxy_like_broker() as broker,
        remoting_cluster(HeldByScripted(broker), broker_names(brokers)) as cluster,
    ):
        producer = Producer(ProducerConfig(access_points=(broker.endpoint,)))
        config = UniqKeyLookupConfig(parse_namesrv_addrs(cluster.namesrv_addr))
        shared = UniqKeyLookup(config)

        async def check(call: Awaitable[LookupResult], want: Verdict, into: list[float]) -> None:
            result = await timed(into, call)
            if result.verdict is not want:
                raise BenchError(f"lookup: {result}, expected {want}")

        try:
            # The route, the channel and the connections, before any figure.
            m = message()
            await producer.send(m)
            await check(shared.lookup(TOPIC, m.message_id), Verdict.FOUND, [])
            for _ in range(lookups):
                m = message()
                await timed(send, producer.send(m))
                await check(shared.lookup(TOPIC, m.message_id), Verdict.FOUND, found)
                await check(shared.lookup(TOPIC, IDS.next_id()), Verdict.NOT_FOUND, not_found)
                await check(
                    lookup_by_uniq_key(config, TOPIC, m.message_id), Verdict.FOUND, one_shot
                )
                for stand_in in cluster.brokers.values():
                    stand_in.undispatched = 1
                await check(shared.lookup(TOPIC, m.message_id), Verdict.FOUND, behind)
        finally:
            await shared.close()
            await producer.close()
    return samples


async def prepare(broker: ScriptedBroker, outbox_url: str, entries: int) -> None:
    """E maybe-stored entries in a fresh outbox, every other one already stored."""
    messages = [message() for _ in range(entries)]
    held = messages[::2]
    producer = Producer(ProducerConfig(access_points=(broker.endpoint,)))
    try:
        for start in range(0, len(held), STORE_BATCH):
            for outcome in await producer.send_many(held[start : start + STORE_BATCH]):
                if isinstance(outcome, Exception):
                    raise BenchError(f"storing the held half failed: {outcome}")
    finally:
        await producer.close()
    with open_outbox(outbox_url) as outbox:
        outbox.put([
            OutboxEntry(m, SpoolCause.AMBIGUOUS, created_ms=0, next_send_time_ms=0,
                        maybe_stored=True, last_error="AMBIGUOUS: bench")
            for m in messages
        ])  # fmt: skip


def drained(child: Child, entries: int) -> tuple[float, float]:
    """Blocks until the sidecar delivered every entry: (seconds since ready, unchecked)."""
    port = int(SIDECAR_METRICS.findall(child.log.read_text())[0])
    deadline = time.monotonic() + DRAIN_DEADLINE_S
    while time.monotonic() < deadline:
        samples = scrape(port)
        if sample(samples, "rocketbox_sidecar_resends_total", outcome="DELIVERED") >= entries:
            seconds = time.perf_counter() - child.ready_at
            return seconds, sample(samples, "rocketbox_sidecar_resends_unchecked_total")
        time.sleep(SCRAPE_INTERVAL_S)
    raise BenchError(f"not drained in {DRAIN_DEADLINE_S:.0f} s:\n{child.output()}")


async def drain(root: Path, mode: str, entries: int, brokers: int) -> list[float]:
    """One drain: [seconds, entries/s, SendMessage requests, duplicates, unchecked, CPU s]."""
    run_dir = Path(tempfile.mkdtemp(prefix="drain-", dir=root))
    outbox_url = f"rocksdb://{run_dir / 'outbox'}"
    async with (
        proxy_like_broker() as broker,
        remoting_cluster(HeldByScripted(broker), broker_names(brokers)) as cluster,
    ):
        await prepare(broker, outbox_url, entries)
        sends_before = len(broker.requests)
        lookup = ["--lookup-namesrv", cluster.namesrv_addr] if mode == MODES[1] else []
        argv = [
            sys.executable, "-m", "rocketbox", "sidecar", "--broker", str(broker.endpoint),
            "--outbox", outbox_url, "--listen", "127.0.0.1:0", "--metrics-listen",
            "127.0.0.1:0", *lookup,
        ]  # fmt: skip
        child = await asyncio.to_thread(Child, "sidecar", argv, SIDECAR_READY, run_dir / "log")
        try:
            seconds, unchecked = await asyncio.to_thread(drained, child, entries)
            cpu_s = child.cpu_seconds()
        finally:
            await asyncio.to_thread(child.stop_checked)
        duplicates = len(broker.store_log) - len(set(broker.store_log))
        check_lookups(cluster, mode)
        return [
            seconds, entries / seconds, len(broker.requests) - sends_before, duplicates,
            unchecked, cpu_s,
        ]  # fmt: skip


def check_lookups(cluster: RemotingCluster, mode: str) -> None:
    asked = sum(12 in b.asked for b in cluster.brokers.values())
    if (mode == MODES[1]) != bool(asked):
        raise BenchError(f"{mode}: the stand-in brokers were asked {asked} times")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    try:
        asyncio.run(main())
    except BenchError as e:
        print(f"bench failed: {e}", file=sys.stderr)
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lookups", type=int, default=300)
    parser.add_argument("--entries", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--brokers", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="remoting-lookup-bench-"))
    print(f"load average before: {load()}")

    async def bench() -> None:
        samples = await latency(args.lookups, args.brokers)
        print(f"(a) {args.lookups} of each, {args.brokers} stand-in brokers, ms:")
        print(f"  {'':32} {'median':>8} {'p90':>8}")
        for name, values in samples.items():
            print(f"  {name:32} {statistics.median(values):>8.2f} {percentile(values, 0.9):>8.2f}")
        results: dict[str, list[list[float]]] = {mode: [] for mode in MODES}
        for r in range(args.rounds):
            for mode in MODES if r % 2 == 0 else tuple(reversed(MODES)):
                results[mode].append(await drain(root, mode, args.entries, args.brokers))
        print(f"(b) drain of {args.entries} maybe-stored entries, half already stored, "
              f"median of {args.rounds}:")  # fmt: skip
        columns = ("seconds", "entries/s", "sends", "duplicates", "unchecked", "CPU s")
        print(f"  {'':26}" + "".join(f"{c:>11}" for c in columns))
        for mode, runs in results.items():
            medians = [statistics.median(run[k] for run in runs) for k in range(len(columns))]
            print(f"  {mode:26}" + "".join(f"{v:>11,.2f}" for v in medians))

    with removed_on_exit(root):
        run(bench)
    print(f"load average after:  {load()}")


if __name__ == "__main__":
    main()
