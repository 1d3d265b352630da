"""``rocketbox send``: send messages through the sidecar with the client library (rocketbox_client),
as an app would, and print each answer: STORED, SPOOLED or REJECTED (send_render.py).

One message prints its answer; ``--count N`` sends N copies (paced by ``--rate``) from
SEND_CONCURRENCY_MAX threads and prints a summary. Exit codes: SEND_OK_EXIT_CODE when every
message was STORED or SPOOLED, SEND_REJECTED_EXIT_CODE when any was REJECTED (or got no answer
within the deadline), SEND_USAGE_EXIT_CODE for bad options (click's own usage errors exit 2
too), UNREACHABLE_EXIT_CODE for an unreachable sidecar (rocketbox/exit_codes.py).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

import click

from rocketbox import send_render as render
from rocketbox.exit_codes import FAILED_EXIT_CODE, UNREACHABLE_EXIT_CODE, USAGE_EXIT_CODE
from rocketbox.sidecar_security_options import client_token
from rocketbox_client import (
    Client,
    Message,
    RocketboxError,
    SendResult,
    TlsConfig,
    UnavailableError,
)

SEND_OK_EXIT_CODE = 0
SEND_REJECTED_EXIT_CODE = FAILED_EXIT_CODE
SEND_USAGE_EXIT_CODE = USAGE_EXIT_CODE
DEFAULT_SIDECAR = "127.0.0.1:8980"
# --count's sends in flight at once: enough to keep a local sidecar busy, few enough threads.
SEND_CONCURRENCY_MAX = 16
COUNT_MAX = 10_000_000
# The sidecar's own limit is 4 MiB (sidecar.proto); reading more from stdin would only be refused.
STDIN_BYTES_MAX = 64 * 1024 * 1024
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")
_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


class SidecarUnreachableError(click.ClickException):
    exit_code = UNREACHABLE_EXIT_CODE


def parse_delay_ms(text: str) -> int:
    """``10s``, ``5m``, ``1.5h``, ``500ms`` as milliseconds; raises ValueError."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration like 500ms, 10s, 5m or 1h")
    return int(float(match.group(1)) * _DURATION_UNITS_MS[match.group(2)])


def parse_delivery_time_ms(text: str) -> int:
    """An ISO-8601 time with its time zone (``2026-11-25T10:00:00Z``) as epoch milliseconds."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError as e:
        raise ValueError(f"{text!r} is not an ISO-8601 time (2026-11-25T10:00:00Z)") from e
    if when.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone: add Z (UTC) or an offset such as +01:00")
    return int(when.timestamp() * 1000)


def _properties(values: tuple[str, ...]) -> dict[str, str]:
    properties: dict[str, str] = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", param_hint="'--property'")
        properties[key] = text
    return properties


def _read_stdin(stream: BinaryIO) -> bytes:
    body = stream.read(STDIN_BYTES_MAX + 1)
    if len(body) > STDIN_BYTES_MAX:
        raise click.UsageError(f"the body on stdin is over {STDIN_BYTES_MAX} bytes")
    return body


def _body(body: str | None, body_file: Path | None) -> bytes:
    """From BODY, ``-`` (stdin), --body-file, or stdin when it is not a terminal."""
    if body is not None and body_file is not None:
        raise click.UsageError("give the body as BODY or --body-file, not both")
    if body_file is not None:
        return body_file.read_bytes()
    if body == "-" or (body is None and not sys.stdin.isatty()):
        return _read_stdin(sys.stdin.buffer)
    if body is None:
        raise click.UsageError("no body: give BODY, --body-file PATH, or pipe it on stdin")
    return body.encode()


def _delivery_time_ms(delivery_time: str | None, delay: str | None) -> int | None:
    if delivery_time is not None and delay is not None:
        raise click.UsageError("give --delivery-time or --delay, not both")
    try:
        if delivery_time is not None:
            return parse_delivery_time_ms(delivery_time)
        if delay is not None:
            return int(time.time() * 1000) + parse_delay_ms(delay)
    except ValueError as e:
        option = "--delivery-time" if delivery_time is not None else "--delay"
        raise click.BadParameter(str(e), param_hint=f"'{option}'") from e
    return None


def _unreachable(endpoint: str, error: UnavailableError) -> SidecarUnreachableError:
    return SidecarUnreachableError(
        f"the sidecar at {endpoint} is unreachable ({error.reason}); "
        "is `rocketbox up` (or `rocketbox sidecar`) running? Point --sidecar or "
        "ROCKETBOX_SIDECAR at it."
    )


def _send_one(client: Client, message: Message, as_json: bool) -> int:
    try:
        answer: SendResult | RocketboxError = client.send(message)
    except UnavailableError as e:
        raise _unreachable(client.target, e) from e
    except RocketboxError as e:
        answer = e
    click.echo(render.answer_json(answer) if as_json else render.answer_line(answer))
    return SEND_OK_EXIT_CODE if render.is_taken(answer) else SEND_REJECTED_EXIT_CODE


def _send_many(client: Client, message: Message, count: int, rate: float | None) -> render.Load:
    """``count`` sends, the i-th started no earlier than i/rate s after the first."""
    load = render.Load()
    lock = threading.Lock()
    unreachable: list[UnavailableError] = []

    def one() -> None:
        started = time.monotonic()
        try:
            answer: SendResult | RocketboxError = client.send(message)
        except UnavailableError as e:
            unreachable.append(e)
            return
        except RocketboxError as e:
            answer = e
        with lock:
            load.add(answer, time.monotonic() - started)

    first = time.monotonic()
    with ThreadPoolExecutor(SEND_CONCURRENCY_MAX, thread_name_prefix="send") as pool:
        slots = threading.BoundedSemaphore(SEND_CONCURRENCY_MAX)
        try:
            for i in range(count):
                if unreachable:
                    break
                if rate is not None:
                    wait_s = first + i / rate - time.monotonic()
                    if wait_s > 0:
                        time.sleep(wait_s)  # sleep: the pacing of --rate
                slots.acquire()
                pool.submit(one).add_done_callback(lambda _: slots.release())
        except KeyboardInterrupt:
            # Ctrl-C: send no more; the sends in flight are answered and counted.
            load.interrupted = True
    load.elapsed_s = time.monotonic() - first
    if unreachable:
        raise _unreachable(client.target, unreachable[0])
    return load


@click.command("send", short_help="Send messages through the sidecar; print each answer.")
@click.argument("topic")
@click.argument("body", required=False)
@click.option("--body-file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--tag", default=None, help="The message's tag (consumers filter on it).")
@click.option("--keys", multiple=True, help="A business key to find it by; repeatable.")
@click.option("--message-group", default=None, help="FIFO: one group's messages keep their order.")
@click.option(
    "--delivery-time", default=None, metavar="ISO-8601", help="Deliver at this time (with zone)."
)
@click.option("--delay", default=None, metavar="DURATION", help="Deliver after 500ms/10s/5m/1h.")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE", help="Repeatable.")
@click.option("--count", default=1, type=click.IntRange(1, COUNT_MAX), help="Send N copies.")
@click.option(
    "--rate", default=None, type=click.FloatRange(min=0, min_open=True), metavar="MSGS_PER_S",
    help="With --count: at most this many sends a second (default: as fast as answered).",
)  # fmt: skip
@click.option(
    "--sidecar",
    "endpoint",
    default=DEFAULT_SIDECAR,
    envvar="ROCKETBOX_SIDECAR",
    metavar="HOST:PORT",
    help="The sidecar's gRPC address.",
)
@click.option(
    "--sidecar-tls-ca",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="Reach the sidecar over TLS, verified against this PEM CA. A sidecar that asks for a "
    "token gets ROCKETBOX_SIDECAR_TOKEN's.",
)
@click.option("--timeout-s", default=10.0, type=click.FloatRange(min=0, min_open=True))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per answer.")
def send_command(
    topic: str,
    body: str | None,
    body_file: Path | None,
    tag: str | None,
    keys: tuple[str, ...],
    message_group: str | None,
    delivery_time: str | None,
    delay: str | None,
    properties: tuple[str, ...],
    count: int,
    rate: float | None,
    endpoint: str,
    sidecar_tls_ca: Path | None,
    timeout_s: float,
    as_json: bool,
) -> None:
    """Send a message to TOPIC through the sidecar and print its answer: STORED, SPOOLED (in the
    outbox, resent later) or REJECTED (with the field at fault). BODY: the text, or - for stdin.

    Exit 0 when every message was STORED or SPOOLED, 1 when any was REJECTED, 2 for bad options
    or an unreachable sidecar."""
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        # The client's retries of an unreachable sidecar are logged at INFO; the command's one
        # line says what happened in the end.
        logging.getLogger("rocketbox_client").setLevel(logging.WARNING)
    message = Message(
        topic,
        _body(body, body_file),
        tag=tag,
        keys=keys,
        message_group=message_group,
        delivery_time_ms=_delivery_time_ms(delivery_time, delay),
        properties=_properties(properties),
    )
    tls = None if sidecar_tls_ca is None else TlsConfig.from_files(sidecar_tls_ca)
    with Client(endpoint, timeout_s=timeout_s, tls=tls, token=client_token()) as client:
        if count == 1:
            sys.exit(_send_one(client, message, as_json))
        load = _send_many(client, message, count, rate)
    click.echo(render.summary_json(load) if as_json else render.summary_text(load))
    sys.exit(SEND_OK_EXIT_CODE if load.all_taken() else SEND_REJECTED_EXIT_CODE)
