"""The MySQL tests' harness: ``OpenMySQL`` (the open_mysql fixture's type), ``run_threads``
(workers started at once) and ``catch_statements`` (what SQL the engines send)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from outbox.backends.mysql.outbox import MySQLOutbox

REPO_ROOT = Path(__file__).resolve().parents[4]
DEADLINE_S = 60.0

OpenMySQL = Callable[..., MySQLOutbox]


def run_threads(targets: list[Callable[[], None]]) -> None:
    """Run each target on its own thread at once; re-raise the first failure."""
    barrier = threading.Barrier(len(targets))
    errors: list[BaseException] = []

    def run(target: Callable[[], None]) -> None:
        try:
            barrier.wait(timeout=DEADLINE_S)
            target()
        except BaseException as e:  # reported on the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=DEADLINE_S)
    assert not any(t.is_alive() for t in threads), "a worker thread did not finish in time"
    if errors:
        raise errors[0]


@contextlib.contextmanager
def catch_statements(marker: str) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Every statement containing ``marker`` that any engine sends while the block runs, with
    its parameters when they are named (not those of an executemany)."""
    caught: list[tuple[str, dict[str, Any]]] = []

    def catch(*args: Any) -> None:
        _conn, _cursor, statement, parameters, _context, _many = args
        if marker in statement:
            caught.append((statement, dict(parameters) if isinstance(parameters, dict) else {}))

    sa.event.listen(sa.Engine, "before_cursor_execute", catch)
    try:
        yield caught
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", catch)
