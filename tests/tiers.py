"""The suite's two tiers, and the check that keeps them apart.

A test that starts a process (a broker, sidecar, namesrv or proxy process, redis-server, mariadbd,
Spark's JVM, chromium, node, or any other subprocess) is marked ``slow``; every other test runs in
this process alone, and ``make test-fast`` runs those (``-m "not slow"``). The mark is not taken
on trust: while a test without it runs, starting a process is refused and fails the test, naming
the command, in every run (CI's full one too), so a test that starts processes and was not marked
fails at once instead of slowing the fast tier down unseen.

A module whose tests all start processes says so once, with ``pytestmark = pytest.mark.slow``,
another test with ``@pytest.mark.slow``; a test on an outbox backend whose servers are processes
(``backend``, tests/outbox/conftest.py) is marked here, by its parameter, wherever it is.
"""

from __future__ import annotations

import _posixsubprocess
import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# The outbox backends on servers the session starts (tests/services.py, tests/redis_servers.py)
# when a test first asks for one: every test on one is slow, though only the first starts them.
SERVER_BACKENDS = frozenset({"redis", "redis-cluster", "redis-sentinel", "mysql"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("backend") in SERVER_BACKENDS:
            item.add_marker(pytest.mark.slow)


class ProcessInFastTestError(RuntimeError):
    """A test not marked slow tried to start a process."""


def _refusing(name: str, spawned: list[str]) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        what = f"{name}{_argv(args)}"
        spawned.append(what)
        raise ProcessInFastTestError(
            f"{what}: this test starts a process; mark it slow (tests/tiers.py says how)"
        )

    return refuse


def _argv(args: tuple[Any, ...]) -> str:
    # fork_exec and posix_spawn take the argument list first or second; fork takes none.
    for arg in args[:2]:
        if isinstance(arg, (list, tuple)) and arg:
            return " " + " ".join(os.fsdecode(a) for a in arg if isinstance(a, (str, bytes)))
    return "()"


# Every way a Python process starts another here: subprocess (and asyncio's subprocesses, on it)
# through its fork_exec or os.posix_spawn, multiprocessing's spawn and forkserver through
# _posixsubprocess, its fork context and os.spawn* through os.fork, os.system on its own.
_ENTRY_POINTS: tuple[tuple[Any, str], ...] = (
    (subprocess, "_fork_exec"),
    (_posixsubprocess, "fork_exec"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "fork"),
    (os, "forkpty"),
    (os, "system"),
)


# Setup too, where a module's or session's fixture starts its servers for the first test that
# asks. Not teardown: a session's fixtures end in whichever test runs last, slow or not, and how
# they stop their processes is no test's business.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        return (yield)


@contextlib.contextmanager
def _guarded(item: pytest.Item) -> Iterator[None]:
    if item.get_closest_marker("slow") is not None:
        yield
        return
    spawned: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        for owner, name in _ENTRY_POINTS:
            if hasattr(owner, name):
                patch.setattr(owner, name, _refusing(f"{owner.__name__}.{name}", spawned))
        yield
    if spawned:
        pytest.fail(
            "a test not marked slow started processes (mark it slow; tests/tiers.py):\n"
            + "\n".join(spawned),
            pytrace=False,
        )
