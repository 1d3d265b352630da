"""Fixtures of the MySQL tests: a plain engine to look behind the backend's back, a table of
the test's own (dropped after it), its URL, and ``open_mysql`` to open outboxes on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from outbox import (
    OutboxLimits,
    open_outbox,
)
from outbox.backends.mysql.outbox import MySQLOutbox
from tests.outbox.backends.mysql.harness import (
    OpenMySQL,
)
from tests.services import mysql_url, unique_name


@pytest.fixture
def engine() -> Iterator[sa.Engine]:
    """A plain connection to the test database, for looking behind the backend's back."""
    eng = sa.create_engine(mysql_url())
    yield eng
    eng.dispose()


@pytest.fixture
def table(engine: sa.Engine) -> Iterator[str]:
    name = unique_name("outbox")
    yield name
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS `{name}`, `{name}_counters`, `{name}_stats`"))


@pytest.fixture
def url(table: str) -> str:
    return f"{mysql_url()}?table={table}"


@pytest.fixture
def open_mysql(url: str) -> Iterator[OpenMySQL]:
    """Opens outboxes on the test's table (several of them: several sidecars); closes them."""
    opened: list[MySQLOutbox] = []

    def open_(limits: OutboxLimits | None = None) -> MySQLOutbox:
        ob = open_outbox(url, limits)
        assert isinstance(ob, MySQLOutbox)
        opened.append(ob)
        return ob

    yield open_
    for ob in reversed(opened):
        ob.close()
