"""An outbox a former rocketbox created, brought up to the schema (schema.py) when it is opened:
the columns and indexes added since, and the counters added since, counted once.

Columns and indexes are added online (MariaDB's in-place ALTER): puts, claims and deliveries of
other sidecars go on meanwhile. Two openers may race to add one; the loser finds it there.

The counters ``dead`` and ``delivered`` are NULL in an outbox from before them. A writer's open
counts them (``count_if_uncounted``) with every counter row locked: a change that counts waits
for that transaction, and the count, a consistent read in READ COMMITTED, sees every change
committed before it; so slot 0 gets the exact totals and the other slots start again from 0.
Until then a sidecar of this version adds to NULL (which stays NULL) and ``stats`` counts the
entries themselves. A sidecar of a version from before the counters changes DEAD and DELIVERED
entries without counting them: every sidecar sharing the outbox must run a version that keeps
them (setting them to NULL has the next writer's open count them again).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine

from outbox.backends.mysql.schema import (
    COUNTER_COLUMNS,
    DEAD,
    DELIVERED,
    PENDING,
    Tables,
)

# Columns added since the entries table was first released: an outbox created before them gets
# them when it is opened (each nullable, NULL meaning what the entry meant before).
ADDED_COLUMNS = ("delivery_timeout_ms",)
# The same for the counters (NULL: not counted yet; a writer's open counts them) and for the
# entries' indexes (each added when missing).
ADDED_COUNTER_COLUMNS = ("dead", "delivered")
ADDED_INDEXES = ("ix_state_created",)


def add_missing(engine: Engine, tables: Tables, *, indexes: bool) -> None:
    """Add the columns (and with ``indexes``, the indexes) an older outbox's tables lack."""
    for table, added in ((tables.entries, ADDED_COLUMNS), (tables.counters, ADDED_COUNTER_COLUMNS)):
        for name in added:
            ddl = table.c[name].type.compile(dialect=engine.dialect)
            _add_once(
                engine, functools.partial(_column_names, engine, table), name,
                f"ALTER TABLE `{table.name}` ADD COLUMN `{name}` {ddl}",
            )  # fmt: skip
    if not indexes:
        return
    entries = tables.entries
    for name in ADDED_INDEXES:
        (index,) = [i for i in entries.indexes if i.name == name]
        columns = ", ".join(f"`{c.name}`" for c in index.columns)
        _add_once(
            engine, functools.partial(_index_names, engine, entries), name,
            f"CREATE INDEX `{name}` ON `{entries.name}` ({columns})",
        )  # fmt: skip


def _add_once(engine: Engine, present: Callable[[], set[str]], name: str, ddl: str) -> None:
    if name in present():
        return
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(ddl)
    except sa_exc.OperationalError:
        # Another opener added it between our look and our ALTER (a duplicate name).
        if name not in present():
            raise


def _column_names(engine: Engine, table: sa.Table) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns(table.name)}


def _index_names(engine: Engine, table: sa.Table) -> set[str]:
    return {str(i["name"]) for i in sa.inspect(engine).get_indexes(table.name)}


def count_if_uncounted(engine: Engine, tables: Tables) -> None:
    """Count the counters that are NULL (module docstring); nothing when none is."""
    counters, entries = tables.counters, tables.entries
    uncounted = sa.or_(*(counters.c[name].is_(None) for name in ADDED_COUNTER_COLUMNS))
    with engine.begin() as conn:
        if conn.execute(sa.select(counters.c.slot).where(uncounted).limit(1)).first() is None:
            return
    with engine.begin() as conn:
        # Every row, in slot order (as no other transaction takes two: no deadlock).
        locked = conn.execute(
            sa.select(counters.c.slot, uncounted).order_by(counters.c.slot).with_for_update()
        ).all()
        if not any(row[1] for row in locked):
            return  # another opener counted them meanwhile
        by_state = {
            state: (int(n), int(body_bytes))
            for state, n, body_bytes in conn.execute(
                sa.select(
                    entries.c.state,
                    sa.func.count(),
                    sa.func.coalesce(sa.func.sum(entries.c.body_size), 0),
                ).group_by(entries.c.state)
            )
        }
        pending, dead, delivered = (by_state.get(s, (0, 0)) for s in (PENDING, DEAD, DELIVERED))
        totals = {
            "entries": pending[0] + dead[0],
            "body_bytes": pending[1] + dead[1],
            "dead": dead[0],
            "delivered": delivered[0],
        }
        assert totals.keys() == set(COUNTER_COLUMNS)
        conn.execute(counters.update().where(counters.c.slot == 0).values(totals))
        zeros = dict.fromkeys(COUNTER_COLUMNS, 0)
        conn.execute(counters.update().where(counters.c.slot > 0).values(zeros))
