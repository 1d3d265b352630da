"""A spool the outbox's primary applied but its replicas did not confirm (Redis with
``wait_replicas``, none there), through a real sidecar whose broker is down.

Proves: the answer is not SPOOLED (the promise needs the replicas) but REJECTED UNAVAILABLE with
a retry-after, saying the message may still be delivered and to send it again with the same
message id; sent so, it is not written twice: the outbox holds one entry of that id.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import grpc
import pytest

from outbox import open_outbox
from tests.redis_servers import start_redis
from tests.services import free_port
from tests.sidecar.sidecar_process import SidecarProcess, message, send

pytestmark = pytest.mark.slow

WAIT_MS = 100


def test_an_unconfirmed_spool_says_to_send_again_with_the_same_id(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        master = start_redis(stack, tmp_path / "redis", list)
        url = (
            f"redis://127.0.0.1:{master.port}/0?prefix=u&wait_replicas=1&wait_timeout_ms={WAIT_MS}"
        )
        sidecar = SidecarProcess(f"127.0.0.1:{free_port()}", url)
        stack.callback(sidecar.kill)
        with sidecar.client() as stub:
            with pytest.raises(grpc.RpcError) as first:
                send(stub, message("Orders"))
            assert first.value.code() == grpc.StatusCode.UNAVAILABLE
            details = first.value.details() or ""
            assert "may still be delivered" in details, details
            message_id = details.split("same message_id ", 1)[1].split(" ", 1)[0]
            with pytest.raises(grpc.RpcError) as again:
                send(stub, message("Orders", message_id=message_id))
            assert again.value.code() == grpc.StatusCode.UNAVAILABLE
        with open_outbox(f"redis://127.0.0.1:{master.port}/0?prefix=u") as outbox:
            entries = list(outbox.scan_all())
        assert [e.message_id for e in entries] == [message_id], "written once, by its id"
