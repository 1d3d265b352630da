"""The power-loss filesystem's process (``python -m chaos.power_loss_daemon``): mounts
chaos/power_loss_fs.py's operations with libfuse 3 (through mfusepy) in the foreground, and
serves its control socket.

The control socket (a name in Linux's abstract namespace, so no path length limits it and
nothing is left on disk) takes one JSON request a line and answers one JSON line:
``{"op": "stats"}`` and ``{"op": "cut"}`` (chaos/power_loss_fs.py says what a cut does);
anything else is answered ``{"error": ...}``. The daemon prints READY_LINE once the kernel has
connected and the socket listens, and exits when the filesystem is unmounted (``fusermount3
-u``).
"""

from __future__ import annotations

import argparse
import json
import logging
import socketserver
import sys
import threading
from pathlib import Path
from typing import Any

import mfusepy  # type: ignore[import-untyped]  # mfusepy ships no types

from chaos.power_loss import READY_LINE, UNSYNCED_BYTES_MAX_DEFAULT, UNSYNCED_BYTES_MIN
from chaos.power_loss_fs import PowerLossOperations

LOG = logging.getLogger(__name__)
CONTROL_REQUEST_BYTES_MAX = 4096
# chown's "leave it as it is" (-1) as libfuse passes it: the unsigned 32-bit value.
ID_UNCHANGED = 0xFFFFFFFF


def _decode(path: bytes | None) -> str | None:
    return None if path is None else path.decode("utf-8", "surrogateescape")


def _fh(fip: Any) -> int | None:
    return int(fip.contents.fh) if fip else None


class _Fuse(mfusepy.FUSE):  # type: ignore[misc]  # an untyped base
    """mfusepy's FUSE, but a setattr through an open file (ftruncate, fchmod, fchown, futimens)
    reaches the operation with its descriptor: libfuse 3 passes no path then (nullpath_ok), and
    mfusepy's own wrappers drop the descriptor."""

    def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
        return int(self.operations.truncate(_decode(path), length, _fh(fip)))

    def chmod_fuse_3(self, path: bytes | None, mode: int, fip: Any) -> int:
        return int(self.operations.chmod(_decode(path), mode, _fh(fip)))

    def chown_fuse_3(self, path: bytes | None, uid: int, gid: int, fip: Any) -> int:
        uid, gid = (-1 if v == ID_UNCHANGED else v for v in (uid, gid))
        return int(self.operations.chown(_decode(path), uid, gid, _fh(fip)))

    def utimens_fuse_3(self, path: bytes | None, buf: Any, fip: Any) -> int:
        times = None
        if buf:
            times = tuple(
                mfusepy.time_of_timespec(t, use_ns=True) for t in (buf.contents.actime,
                                                                   buf.contents.modtime)
            )  # fmt: skip
        return int(self.operations.utimens(_decode(path), times, _fh(fip)))


class _ControlHandler(socketserver.StreamRequestHandler):
    server: _ControlServer

    def handle(self) -> None:
        line = self.rfile.readline(CONTROL_REQUEST_BYTES_MAX)
        try:
            op = json.loads(line)["op"]
            if op not in ("stats", "cut"):
                raise ValueError(f"op must be 'stats' or 'cut', not {op!r}")
            answer: dict[str, Any] = getattr(self.server.operations, op)()
        except (ValueError, KeyError, TypeError) as e:
            answer = {"error": f"bad request {line[:200]!r}: {e}"}
        self.wfile.write(json.dumps(answer).encode() + b"\n")


class _ControlServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, operations: PowerLossOperations) -> None:
        self.operations = operations
        super().__init__(path, _ControlHandler)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m chaos.power_loss_daemon", description=__doc__)
    parser.add_argument("--backing", type=Path, required=True, help="the synced files")
    parser.add_argument("--mount", type=Path, required=True, help="where to mount them")
    parser.add_argument(
        "--control", required=True, help="the control socket's name (Linux's abstract namespace)"
    )
    parser.add_argument(
        "--unsynced-bytes-max", type=int, default=UNSYNCED_BYTES_MAX_DEFAULT,
        help="unsynced bytes kept in all before the file being written is written back",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.unsynced_bytes_max < UNSYNCED_BYTES_MIN:
        parser.error(f"--unsynced-bytes-max must be at least {UNSYNCED_BYTES_MIN}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    operations = PowerLossOperations(args.backing.resolve(), args.unsynced_bytes_max)
    control = _ControlServer("\0" + args.control, operations)

    serving = threading.Thread(target=control.serve_forever, daemon=True, name="control")

    def serve() -> None:
        serving.start()
        sys.stdout.write(f"{READY_LINE} {args.mount}\n")
        sys.stdout.flush()

    operations.on_mounted.append(serve)
    try:
        _Fuse(
            operations, str(args.mount), foreground=True, hard_remove=True,
            fsname="chaos-power-loss", subtype="chaos",
        )  # fmt: skip
    finally:
        if serving.is_alive():
            control.shutdown()
        control.server_close()
    LOG.info("unmounted %s", args.mount)


if __name__ == "__main__":
    main()
