"""(f) the cost of authentication: (a)'s official client, one message per SendMessage, against a
broker without --auth and one with it (every call's signature verified and the ACL consulted:
the client is a user with PUB on the topic, not an admin, so no rule is skipped), alternated
``rounds`` times in one run. The target: auth on at >= 0.90x of auth off.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable
from pathlib import Path

import grpc

from bench.broker.figures import TOPIC, Figure, Versus
from bench.broker.processes import start_broker
from bench.broker.sends import bench_official_client
from rocketbox_api.admin.v1 import acl_admin_pb2 as apb
from rocketbox_api.admin.v1 import acl_admin_pb2_grpc
from rocketbox_api.credentials import Credentials, Signer

ADMIN = Credentials("bench-admin", "bench-admin-secret")
USER = ("bench-user", "bench-user-secret")
FLUSH = "ASYNC_FLUSH"


def _make_user(endpoint: str) -> None:
    """The bench's user, with PUB on the topic, made through the AclAdmin service."""
    signer = Signer(ADMIN)
    with grpc.insecure_channel(endpoint) as channel:
        stub = acl_admin_pb2_grpc.AclAdminServiceStub(channel)
        stub.CreateUser(
            apb.CreateUserRequest(access_key=USER[0], secret_key=USER[1]),
            metadata=signer.metadata(),
            timeout=10,
        )
        stub.Grant(
            apb.GrantRequest(access_key=USER[0], resource=f"Topic:{TOPIC}", actions=["PUB"]),
            metadata=signer.metadata(),
            timeout=10,
        )


def run_auth(
    args: argparse.Namespace,
    base: Path,
    warmup: int,
    report: Callable[[Figure, Versus | None], None],
) -> None:
    """(f): ``args.auth_rounds`` rounds of ``args.client_messages`` sends, ``args.window`` in
    flight, each side on a fresh broker."""
    segment_mib, count, window = args.segment_mib, args.client_messages, args.window
    rounds = args.auth_rounds
    admin_file = base / "bench-admin.credentials"
    admin_file.write_text(f"access_key={ADMIN.access_key}\nsecret_key={ADMIN.secret_key}\n")
    for n in range(1, rounds + 1):
        data_dir = base / f"auth-off-{n}"
        off = bench_official_client(
            start_broker(data_dir, FLUSH, segment_mib),
            f"(f) round {n}: official client, auth off, {window} in flight",
            count,
            window,
            warmup,
        )
        shutil.rmtree(data_dir, ignore_errors=True)
        report(off, None)
        data_dir = base / f"auth-on-{n}"
        broker = start_broker(
            data_dir, FLUSH, segment_mib, "--auth", "--auth-admin-file", str(admin_file)
        )
        try:
            _make_user(broker.endpoint)
        except BaseException:
            broker.stop()
            raise
        on = bench_official_client(
            broker,
            f"(f) round {n}: official client, auth on (a user), {window} in flight",
            count,
            window,
            warmup,
            USER,
        )
        shutil.rmtree(data_dir, ignore_errors=True)
        report(on, Versus("auth off", off, lambda r: r >= 0.9, ">= 0.90x"))
