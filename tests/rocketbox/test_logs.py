"""``--log-format json``: every log line of a real process is one JSON object, and a line about
a message carries its message id and topic as fields a log pipeline can select on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.services import free_port
from tests.sidecar.sidecar_process import SidecarProcess, message, outcome, send

pytestmark = pytest.mark.slow


def json_lines(output: str) -> list[dict[str, Any]]:
    """The process's log lines; its ready lines (click.echo, for people) are not logs."""
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_json_log_lines_carry_the_message_id_and_topic() -> None:
    # Nothing listens on the broker's port: the send is spooled, which logs a line about it.
    sidecar = SidecarProcess(
        f"127.0.0.1:{free_port()}", "memory://",
        options=("--log-level", "DEBUG", "--log-format", "json"),
    )  # fmt: skip
    try:
        with sidecar.client() as stub:
            result = send(stub, message("Orders"))
        assert outcome(result) == "spooled"
    finally:
        sidecar.stop()
    lines = json_lines(sidecar.output())
    assert lines, sidecar.output()
    for line in lines:
        assert {"time", "level", "logger", "thread", "message"} <= line.keys(), line
    about = [line for line in lines if line.get("message_id") == result.message_id]
    assert about, f"no line carries {result.message_id}:\n{sidecar.output()}"
    spooled = [line for line in about if line["message"].startswith("spooled")]
    assert spooled, about
    assert spooled[0]["topic"] == "Orders"
    assert spooled[0]["level"] == "DEBUG"
    assert spooled[0]["logger"] == "sidecar.intake"
