"""``python -m tests.rocketmq_proxy``: the stand-in RocketMQ 5 proxy as a process of its own.

It binds ``--listen`` (port 0: a free port), writes the port it bound to ``--port-file`` (whole,
by a rename) and prints ``rocketmq proxy stand-in listening on HOST:PORT``; SIGTERM or SIGINT
stops it cleanly (exit 0). A port it cannot bind exits 2 naming it. Its messages are kept under
``--data-dir`` (store.py), so a restart over the same directory, on the same port, serves them
again.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import service_pb2_grpc

from tests.rocketmq_proxy.config import (
    INVISIBLE_DURATION_MIN_MS,
    LONG_POLLING_MAX_MS,
    LONG_POLLING_MIN_MS,
    ProxyConfig,
    Topic,
)
from tests.rocketmq_proxy.standin import StandinProxy

READY_LINE = "rocketmq proxy stand-in listening on"
BIND_FAILED_EXIT_CODE = 2
# A 4 MiB body plus its envelope must fit in one request (grpc's default inbound limit is 4 MiB);
# and no second process may bind the port beside a running one.
SERVER_OPTIONS = (
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    ("grpc.max_send_message_length", 16 * 1024 * 1024),
    ("grpc.so_reuseport", 0),
)
STOP_GRACE_S = 1.0


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, ProxyConfig]:
    parser = argparse.ArgumentParser(prog="python -m tests.rocketmq_proxy", description=__doc__)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0: a free one)")
    parser.add_argument("--port-file", type=Path, help="where to write the port bound")
    parser.add_argument("--topic", action="append", default=[], help="NAME[:TYPE[:QUEUES]]")
    parser.add_argument("--group", action="append", default=[], help="a consumer group")
    parser.add_argument("--auto-create-group", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--flow-control", action="store_true", help="refuse every send")
    parser.add_argument("--invisible-duration-min-ms", type=int, default=INVISIBLE_DURATION_MIN_MS)
    parser.add_argument("--long-polling-min-ms", type=int, default=LONG_POLLING_MIN_MS)
    parser.add_argument("--long-polling-max-ms", type=int, default=LONG_POLLING_MAX_MS)
    args = parser.parse_args(argv)
    try:
        config = ProxyConfig(
            topics=tuple(Topic.parse(spec) for spec in args.topic),
            groups=tuple(args.group),
            auto_create_group=args.auto_create_group,
            flow_control=args.flow_control,
            invisible_duration_min_ms=args.invisible_duration_min_ms,
            long_polling_min_ms=args.long_polling_min_ms,
            long_polling_max_ms=args.long_polling_max_ms,
        )
    except ValueError as e:
        parser.error(str(e))
    return args, config


async def serve(args: argparse.Namespace, config: ProxyConfig) -> int:
    server = grpc.aio.server(options=SERVER_OPTIONS)
    try:
        port = server.add_insecure_port(args.listen)
    except RuntimeError:
        port = 0
    if not port:
        print(f"Error: --listen {args.listen} cannot be bound (in use?)", file=sys.stderr)  # noqa: T201 - the process's one line
        return BIND_FAILED_EXIT_CODE
    proxy = StandinProxy(config, args.data_dir, port)
    service_pb2_grpc.add_MessagingServiceServicer_to_server(proxy, server)
    await server.start()
    if args.port_file is not None:
        written = args.port_file.with_suffix(".tmp")
        written.write_text(f"{port}\n")
        os.replace(written, args.port_file)
    host = args.listen.rsplit(":", 1)[0]
    print(f"{READY_LINE} {host}:{port}", flush=True)  # noqa: T201 - its ready line
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(STOP_GRACE_S)
    proxy.store.close()
    return 0


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args, config = parse_args(argv)
    return asyncio.run(serve(args, config))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
