"""Broker send, consume and end-to-end throughput over gRPC beside its ceiling and a peer, in
one run, with the broker's CPU per message.

    .venv/bin/python -m bench.broker [--only sends|consume|e2e] [--client-messages N]
        [--batch-messages N] [--window W] [--batch-size B] [--batch-window R]
        [--flush ASYNC_FLUSH SYNC_FLUSH] [--consume-messages N] [--e2e-messages N]
        [--e2e-streams S] [--e2e-clients C] [--e2e-rate MSGS_PER_S]
        [--store interpreted|compiled] [--auth-rounds N]

Sends 1 KiB messages to real ``rocketbox broker`` processes (a fresh one, with its own data
directory, per measurement and flush mode; stopped with SIGTERM, which must exit 0):

(a) the official Python client (``rocketmq-python-client``): one message per SendMessage,
    ``Producer.send_async`` with W sends in flight. Beside it, its ceiling: a plain grpc.aio
    unary echo of a 1 KiB payload (server in a child process, driven by a grpc.aio client with
    the same W requests in flight) -- what one-request-per-message Python gRPC gets through on
    this machine. Beside it, the client's own ceiling: the same client against a "null
    service" (a child process answering SendMessage OK at once, storing nothing): the most (a)
    could reach with a broker that cost nothing. Target: (a) >= 80% of that ceiling.
(b) multi-message SendMessage requests (B messages each, R requests in flight) through the
    generated stub over grpc.aio. Beside it, the peer: NATS JetStream's async publish of 1 KiB
    messages to a file-storage stream on 127.0.0.1:4222, B x R publishes awaiting their acks,
    every ack awaited. Target: (b) ahead of NATS. NATS's default durability is a periodic sync,
    the counterpart of ASYNC_FLUSH; SYNC_FLUSH answers each send after its fsync.
(c) consumption alone, from a backlog of N messages (produced (b)'s way into a fresh broker,
    ASYNC_FLUSH; N at most 8 queues x the in-flight window, 2,048): S raw-stub streams of
    ReceiveMessage (32) until every message came once (invisible 300 s), then every one acked
    32 entries to an AckMessage, S in flight; the backlog again, received, and acked one entry
    to an AckMessage, 64 in flight (the official clients' way). Each row with the broker's CPU
    per message, and the sum for a message received and acked (target <= 300 us). Then C
    official SimpleConsumers (a thread each, receive 32 + ack each) from a backlog, beside the
    same clients against the null service, which also answers ReceiveMessage with canned 1 KiB
    messages and AckMessage OK: their own ceiling. Target: >= 90% of it.
(e) end to end: one broker (ASYNC_FLUSH) while N messages are produced and consumed at once.
    The producer is (b)'s (B messages a request, R requests in flight; flat out, or paced with
    --e2e-rate); each body starts with its send time (time.time_ns()) and sequence number, so
    the consumer's latency is its receive time minus the send time, on the same clock. Two
    consumer kinds, a fresh broker each, one consumer group: S raw-stub streams, each a loop of
    ReceiveMessage (32, the most) and one AckMessage for the batch (the protocol's ceiling);
    and C official SimpleConsumers, a thread each, receive(32) and ack each message. Printed:
    consume msgs/s (first send to last ack answered), produce msgs/s (first send to last send
    answered), latency p50/p99/max. Target: consume >= 0.80x produce in the same run. Beside
    it, the peer: NATS JetStream, async publishes (B x R in flight) while S pull subscriptions
    of one durable consumer fetch 32 at a time and ack each, the same messages and stamps.
    Every message must be consumed (a consumer failure, or no progress for 60 s, fails the
    bench); a message received twice is counted as a duplicate and invalidates the run.
(f) the cost of --auth (bench/broker/auth.py): (a) against a broker without and with it, in
    alternating rounds; target: auth on >= 0.90x of off.

Each measurement follows a warm-up (2 x W messages; for (e) produced and consumed) and waits
until the server is idle (the store prepares its next segment in the background), so it sees
the steady state. Every send and publish must be acknowledged OK; any failure is printed and
the bench exits 1. NATS not reachable: the bench says so and exits 2. SIGTERM or SIGINT stops
every process started, deletes the NATS streams and removes the data directories (exit 130).
--store compiled builds the wheel the image ships (setup.py, ROCKETBOX_MYPYC=1: the store
compiled by mypyc) and runs every broker on it; the default is the checkout's plain Python.
"cores" is CPU seconds per wall second of the server process (broker, echo, null service or
nats-server) and of this process (the client: for (e) producer and consumers together) during
the measurement. Ratios matter more than the absolute figures: this machine is noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.broker import processes
from bench.broker.auth import run_auth
from bench.broker.consume import run_consume
from bench.broker.e2e import bench_e2e
from bench.broker.e2e_consumers import EndToEnd
from bench.broker.figures import FLUSH_MODES, NATS_URL, Figure, NatsUnreachable, Versus
from bench.broker.grpc_peers import bench_echo, serve_echo, serve_null
from bench.broker.nats_peer import bench_nats, bench_nats_e2e, nats_reachable
from bench.broker.processes import build_compiled_site, start_broker, start_helper
from bench.broker.sends import bench_official_client, bench_stub_batches
from bench.process_control import (
    BenchError,
    interrupted,
    load,
    run_async,
)


def run_sends(
    args: argparse.Namespace,
    base: Path,
    warmup: int,
    nats_window: int,
    report: Callable[[Figure, Versus | None], None],
) -> None:
    """The send figures: the echo, the null service, (a), NATS's publish, (b)."""
    echo = bench_echo(args.client_messages, args.window, warmup, base)
    report(echo, None)
    null = bench_official_client(
        start_helper("--serve-null", "null service", base),
        f"official client -> null service, {args.window} in flight",
        args.client_messages,
        args.window,
        warmup,
    )
    report(null, Versus("echo", echo, None, "the client's own ceiling"))
    for flush in args.flush:
        data_dir = base / f"client-{flush}"
        fig = bench_official_client(
            start_broker(data_dir, flush, args.segment_mib),
            f"(a) official client, {flush}, 1/request, {args.window} in flight",
            args.client_messages,
            args.window,
            warmup,
        )
        shutil.rmtree(data_dir, ignore_errors=True)
        report(fig, Versus("null", null, lambda r: r >= 0.8, ">= 0.80x"))
    nats_fig = run_async(bench_nats(args.batch_messages, nats_window, warmup))
    report(nats_fig, None)
    for flush in args.flush:
        data_dir = base / f"stub-{flush}"
        fig = bench_stub_batches(
            data_dir,
            flush,
            args.segment_mib,
            args.batch_messages,
            args.batch_size,
            args.batch_window,
            warmup,
        )
        shutil.rmtree(data_dir, ignore_errors=True)
        report(fig, Versus("NATS", nats_fig, lambda r: r > 1.0, "> 1.00x"))


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.broker", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--client-messages", type=int, default=20_000, help="(a) and the echo")
    parser.add_argument("--batch-messages", type=int, default=100_000, help="(b) and NATS")
    parser.add_argument("--window", type=int, default=256, help="(a) and echo: in flight")
    parser.add_argument("--batch-size", type=int, default=32, help="(b): messages per request")
    parser.add_argument("--batch-window", type=int, default=8, help="(b): requests in flight")
    parser.add_argument(
        "--nats-window", type=int, default=0, help="NATS publishes in flight (0: B x R)"
    )
    parser.add_argument("--flush", nargs="+", choices=FLUSH_MODES, default=list(FLUSH_MODES))
    parser.add_argument("--segment-mib", type=int, default=256)
    parser.add_argument("--dir", type=Path, default=None, help="broker data (default: tmp)")
    parser.add_argument(
        "--e2e-messages", type=int, default=20_000, help="(e) and its NATS peer: messages"
    )
    parser.add_argument(
        "--e2e-streams",
        type=int,
        default=8,
        help="(e) raw: ReceiveMessage streams; NATS: pull subscriptions fetching",
    )
    parser.add_argument(
        "--e2e-clients", type=int, default=4, help="(e) official: SimpleConsumers, a thread each"
    )
    parser.add_argument(
        "--e2e-rate",
        type=float,
        default=0.0,
        help="(e) and its NATS peer: produce at most this many msgs/s (default 0: flat out)",
    )
    parser.add_argument(
        "--consume-messages",
        type=int,
        default=16_000,
        help="(c): the backlog consumed; at most 8 queues x INFLIGHT_WINDOW_ENTRIES (16,384)",
    )
    parser.add_argument(
        "--only",
        choices=("sends", "consume", "e2e", "auth"),
        default=None,
        help="run one part (default: all)",
    )
    parser.add_argument(
        "--store",
        choices=("interpreted", "compiled"),
        default="interpreted",
        help="the brokers' store: the checkout's, or compiled by mypyc as the image ships it",
    )
    parser.add_argument("--auth-rounds", type=int, default=2, help="(f): alternated rounds")
    parser.add_argument("--serve-echo", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-null", action="store_true", help=argparse.SUPPRESS)
    return parser


def checked_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    args = parser.parse_args()
    numbers = ("client_messages", "batch_messages", "window", "batch_size", "batch_window")
    counts = ("e2e_messages", "e2e_streams", "e2e_clients", "consume_messages", "auth_rounds")
    for name in (*numbers, *counts):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.e2e_rate < 0:
        parser.error("--e2e-rate must be 0 (flat out) or more")
    if args.batch_messages < args.batch_size:
        parser.error("--batch-messages must be at least --batch-size")
    return args


def run_e2e(
    args: argparse.Namespace,
    base: Path,
    warmup: int,
    nats_window: int,
    report_e2e: Callable[[EndToEnd, EndToEnd | None], None],
) -> None:
    """(e) end to end: NATS's first, then the raw-stub and the official-client consumers."""
    nats_e2e = run_async(
        bench_nats_e2e(args.e2e_messages, nats_window, args.e2e_streams, warmup, args.e2e_rate)
    )
    report_e2e(nats_e2e, None)
    for kind, consumers in (("raw", args.e2e_streams), ("client", args.e2e_clients)):
        data_dir = base / f"e2e-{kind}"
        fig_e2e = bench_e2e(
            data_dir,
            args.segment_mib,
            args.e2e_messages,
            args.batch_size,
            args.batch_window,
            warmup,
            kind,
            consumers,
            args.e2e_rate,
        )
        shutil.rmtree(data_dir, ignore_errors=True)
        report_e2e(fig_e2e, nats_e2e)


def check_nats() -> None:
    try:
        asyncio.run(nats_reachable())
    except NatsUnreachable as e:
        print(
            f"NATS JetStream is not reachable at {NATS_URL}: {e}\n"
            "The bench compares (b) with it: start nats-server with JetStream "
            "(see CONTRIBUTING.md §6) and run again.",
            file=sys.stderr,
        )
        sys.exit(2)


def main() -> None:
    args = checked_args(parser())
    if args.serve_echo or args.serve_null:
        asyncio.run(serve_echo() if args.serve_echo else serve_null())
        return
    nats_window = args.nats_window or args.batch_size * args.batch_window
    # SIGTERM (and SIGINT, even where a shell started us with it ignored) unwinds like Ctrl-C,
    # so that every process started is stopped and the data directories are removed.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, interrupted)
    warmup = 2 * args.window
    began = time.perf_counter()
    print(
        f"bench.broker: 1 KiB messages, {os.cpu_count()} cores, load average {load()} at start; "
        f"(a) {args.client_messages:,}, (b) {args.batch_messages:,}, "
        f"(e) {args.e2e_messages:,} messages, flush {' '.join(args.flush)}, store {args.store}"
        f"{f', only {args.only}' if args.only else ''}",
        flush=True,
    )
    print()
    check_nats()
    base = Path(tempfile.mkdtemp(prefix="rocketbox-broker-bench-", dir=args.dir))
    failed = False

    def report(fig: Figure, versus: Versus | None) -> None:
        nonlocal failed
        failed |= bool(fig.failures)
        print(fig.line(versus), flush=True)

    def report_e2e(fig: EndToEnd, peer: EndToEnd | None) -> None:
        nonlocal failed
        failed |= fig.duplicates > 0
        print(fig.line(peer), flush=True)

    try:
        if args.store == "compiled":
            print("building the wheel with the compiled store (about 30 s) ...", flush=True)
            # Set once, before any broker starts.
            processes.compiled_site = build_compiled_site(base)
        if args.only in (None, "sends"):
            run_sends(args, base, warmup, nats_window, report)
            print()
        if args.only in (None, "consume"):
            run_consume(args, base, report)
            print()
        if args.only in (None, "e2e"):
            run_e2e(args, base, warmup, nats_window, report_e2e)
            print()
        if args.only in (None, "auth"):
            run_auth(args, base, warmup, report)
    except (BenchError, NatsUnreachable) as e:
        print(f"\nbench failed: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt as e:
        print(f"\ninterrupted ({e}); every process started is stopped", file=sys.stderr)
        sys.exit(130)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"load average {load()} at the end; the bench took {time.perf_counter() - began:.0f} s")
    if failed:
        print(
            "some sends or publishes failed, or messages came twice (above): "
            "the figures are not valid",
            file=sys.stderr,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
