"""The sidecar's root TaskGroup (sidecar/sidecar.py): a background task that dies stops the
sidecar at once and loudly, not at its next shutdown.

It proves, with a sidecar whose extra background loop raises (tests/sidecar/dying_sidecar.py):
- in this process: the task awaiting the sidecar (serving, with no stop asked) is cancelled by
  the failure; its ``stop`` closes the sidecar and raises the failure as an ExceptionGroup; the
  traceback was logged CRITICAL when the task died; the sidecar served before it (a message
  STORED) and its other background tasks are over;
- as ``rocketbox sidecar``: the process exits non-zero by itself, without a signal, the
  traceback in its output, and never says it stopped cleanly.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys

import grpc
import pytest

from rocketbox_api.deadlines import within
from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_api.v1 import sidecar_pb2_grpc
from sidecar.config import SidecarConfig
from sidecar.producer import ProducerConfig
from tests.rocketbox_process import REPO_ROOT
from tests.sidecar.dying_sidecar import FAILURE, DyingSidecar
from tests.sidecar.in_process import WAIT_DEADLINE_S
from tests.sidecar.scripted_broker import scripted_broker
from tests.sidecar.sidecar_process import CALL_DEADLINE_S, message, outcome

pytestmark = pytest.mark.slow


def test_a_dying_background_task_stops_the_sidecar_and_stop_raises_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sidecars: list[DyingSidecar] = []

    async def run() -> None:
        async with scripted_broker() as broker:
            config = SidecarConfig(
                producer=ProducerConfig(access_points=(broker.endpoint,)),
                outbox_url="memory://",
                listen_host="127.0.0.1",
                listen_port=0,
            )
            sidecar = DyingSidecar(config)
            sidecar.failing.clear()
            sidecars.append(sidecar)
            await sidecar.start()
            try:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{sidecar.port}") as channel:
                    stub = sidecar_pb2_grpc.SidecarServiceStub(channel)
                    request = api.SendRequest(message=message("Orders"))
                    response = await stub.Send(request, timeout=CALL_DEADLINE_S)
                    assert outcome(response.result) == "stored"
                sidecar.failing.set()
                # Nothing ever sets it: only the failure ends this wait, by cancelling it.
                await within(asyncio.Event().wait(), WAIT_DEADLINE_S)
            finally:
                await sidecar.stop()

    with (
        caplog.at_level(logging.CRITICAL, logger="sidecar.sidecar"),
        pytest.raises(BaseExceptionGroup) as raised,
    ):
        asyncio.run(run())
    assert [repr(e) for e in raised.value.exceptions] == [repr(RuntimeError(FAILURE))]
    [record] = [r for r in caplog.records if r.levelno == logging.CRITICAL]
    assert record.getMessage() == "the sidecar's injected task failed: stopping the sidecar"
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], RuntimeError)
    assert all(task.done() for task in sidecars[0]._loops)


def test_rocketbox_sidecar_exits_non_zero_when_a_background_task_dies() -> None:
    args = ["--broker", "127.0.0.1:1", "--outbox", "memory://", "--listen", "127.0.0.1:0"]
    done = subprocess.run(
        [sys.executable, "-m", "tests.sidecar.dying_sidecar", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT_DEADLINE_S,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "sidecar listening on" in output, "it served first"
    assert "the sidecar's injected task failed: stopping the sidecar" in output
    assert f"RuntimeError: {FAILURE}" in output
    # Logged once when the task died; the command's own error is one line, not a second copy.
    assert output.count("Traceback (most recent call last)") == 1, output
    assert "its traceback is logged above" in output, output
    assert "stopped cleanly" not in output
