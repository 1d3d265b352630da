"""Two sidecars sharing one MySQL outbox (the real MariaDB, as a user with a password) count it
once: real ``rocketbox sidecar`` processes, scraped over HTTP.

Proves:
- both export the outbox gauges under one ``outbox`` label, the same from both, naming the
  server, database and table and neither the user nor the password; and the same figures, the
  whole outbox's (so ``max by (outbox)`` counts it once);
- one of them holds the scan's lease while both run (the stats row names it as the reader
  throughout), and when it stops the other takes the lease over and goes on publishing.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa

from outbox import open_outbox
from sidecar.clock import now_ms
from tests.broker.broker_process import wait_until
from tests.outbox.entries import entry, message_id, receipt
from tests.prometheus import metrics_port, scrape, series
from tests.services import MYSQL_DATABASE, MYSQL_HOST, free_port, mysql_port, mysql_url
from tests.sidecar.sidecar_process import SidecarProcess
from tests.sidecar.test_shared_outbox import B_METRICS_LINE

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
# Long beside a turn of a busy machine's event loop: the lease (3 intervals) outlives a stall.
STATS_INTERVAL_MS = 1_000
# Publications the test sees while both sidecars run.
LOOKS = 4
HOUR_MS = 3_600_000


@pytest.fixture
def password_url() -> Iterator[str]:
    """A table of the test's own on the session's MariaDB, reached as a user of the test's own
    with a password; both dropped afterwards."""
    engine = sa.create_engine(mysql_url())
    suffix = uuid.uuid4().hex[:10]
    user, password, table = f"rb_{suffix}", f"pw-{suffix}-secret", f"gauges_{suffix}"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE USER '{user}'@'%%' IDENTIFIED BY '{password}'")
        conn.exec_driver_sql(f"GRANT ALL ON `{MYSQL_DATABASE}`.* TO '{user}'@'%%'")
    try:
        yield (
            f"mysql+pymysql://{user}:{password}@{MYSQL_HOST}:{mysql_port()}/{MYSQL_DATABASE}"
            f"?table={table}"
        )
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS `{table}`, `{table}_counters`, "
                                 f"`{table}_stats`")  # fmt: skip
            conn.exec_driver_sql(f"DROP USER IF EXISTS '{user}'@'%%'")
        engine.dispose()


def gauges(port: int) -> dict[tuple[str, str], float]:
    """(outbox label, state) → the rocketbox_outbox_entries gauge of a sidecar."""
    found = series(scrape(port), "rocketbox_outbox_entries")
    return {(dict(labels)["outbox"], dict(labels)["state"]): v for (_, labels), v in found.items()}


def published(url: str) -> tuple[str | None, int | None]:
    """The stats row: who holds the scan's lease, and when it last published."""
    table = urlsplit(url).query.removeprefix("table=")
    engine = sa.create_engine(url.split("?", maxsplit=1)[0])
    try:
        with engine.connect() as conn:
            reader, read_ms = conn.exec_driver_sql(
                f"SELECT reader, read_ms FROM `{table}_stats`"
            ).one()
    finally:
        engine.dispose()
    return reader, read_ms


def test_two_sidecars_export_one_outbox_once_and_one_scans(password_url: str) -> None:
    # Entries due in an hour: neither resend pool touches them while the test looks.
    with open_outbox(password_url) as outbox:
        outbox.put([entry(n, next_send_time_ms=now_ms() + HOUR_MS) for n in range(5)])
        (buried,) = outbox.claim_due(now_ms() + 2 * HOUR_MS, 1, 60_000, "test/1")
        assert outbox.bury(buried.message_id, "test/1", "poison", now_ms())
        # Delivered now: the sidecars' purge keeps tombstones for the audit window.
        delivered = [(message_id(n), receipt(n, delivered_ms=now_ms())) for n in (3, 4)]
        assert outbox.mark_delivered_many(delivered) == [True, True]
    parts = urlsplit(password_url)
    assert parts.username is not None
    assert parts.password is not None
    table = parts.query.removeprefix("table=")
    no_broker = f"127.0.0.1:{free_port()}"
    sidecars: dict[str, SidecarProcess] = {}
    try:
        for name in ("gauge-a", "gauge-b"):
            sidecars[name] = SidecarProcess(
                no_broker, password_url, f"--sidecar-id={name}", "--metrics-listen=127.0.0.1:0",
                f"--outbox-stats-interval-ms={STATS_INTERVAL_MS}",
            )  # fmt: skip
        ports = {n: metrics_port(s.output(), B_METRICS_LINE) for n, s in sidecars.items()}
        for name, port in ports.items():
            wait_until(
                functools.partial(lambda p: len(gauges(p)) == 4, port), DEADLINE_S,
                f"{name}'s outbox gauges",
            )  # fmt: skip
        exported = {name: gauges(port) for name, port in ports.items()}
        assert exported["gauge-a"] == exported["gauge-b"], exported
        label = f"mysql+pymysql://{MYSQL_HOST}:{mysql_port()}/{MYSQL_DATABASE}.{table}"
        assert exported["gauge-a"] == {
            (label, "PENDING"): 2, (label, "IN_FLIGHT"): 0, (label, "DELIVERED"): 2,
            (label, "DEAD"): 1,
        }  # fmt: skip
        for port in ports.values():
            text = str(scrape(port))
            assert parts.password not in text
            assert parts.username not in text

        holder, read_ms = published(password_url)
        assert holder is not None
        assert read_ms is not None
        holder_id = holder.split("/")[0]
        assert holder_id in sidecars, holder
        for _ in range(LOOKS):  # while both run, the holder publishes, and no other
            wait_until(
                functools.partial(lambda after: (published(password_url)[1] or 0) > after, read_ms),
                DEADLINE_S, "the next publication",
            )  # fmt: skip
            reader, read_ms = published(password_url)
            assert reader == holder
            assert read_ms is not None
        sidecars[holder_id].stop()
        (other,) = set(sidecars) - {holder_id}
        wait_until(
            lambda: (published(password_url)[0] or "").startswith(f"{other}/"),
            DEADLINE_S, f"{other} taking the scan's lease over",
        )  # fmt: skip
    finally:
        for sidecar in sidecars.values():
            sidecar.stop()
