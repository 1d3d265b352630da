"""What every test runs beside: rocketbox's default ports held, as a user's `make run` holds them.

Tests start every listener on port 0 (or with it off). To keep that true, the session listens on
the defaults itself (the broker's 8081, the sidecar's 8980, `rocketbox up`'s metrics 9108 and
RocketMQ front 8982, the NameServer's 9876): a test
that forgets a port fails here as it would on a developer's machine, instead of passing on CI and
failing beside `make run`. A default already in use (that very `make run`) is held all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import socket
import sys
import traceback
import types
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from tests import services

# The fast and slow tiers, and the check that a test not marked slow starts no process.
pytest_plugins = ("tests.tiers",)

# broker --listen, sidecar --listen / up --sidecar-listen, up --metrics-listen, namesrv --listen,
# up --rocketmq-listen
DEFAULT_PORTS = (8081, 8980, 9108, 9876, 8982)


@pytest.fixture(autouse=True, scope="session")
def _default_ports_held() -> Iterator[None]:
    with contextlib.ExitStack() as held:
        for port in DEFAULT_PORTS:
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                sock.bind(("127.0.0.1", port))
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
                continue  # somebody holds it already: the same condition
            # Bound, not listening: a test that binds a default fails, and one that connects to
            # a default address is refused at once, as with nothing there (a listener that never
            # accepts would leave it hanging instead).
        yield


@pytest.fixture(autouse=True, scope="session")
def _own_services_stopped() -> Iterator[None]:
    """The Redis and MariaDB this session (this xdist worker) started for its tests, stopped at
    its end: tests.services starts them when a test first asks for one."""
    yield
    services.stop_servers()


@pytest.fixture
def squatter() -> Iterator[int]:
    """A port something else listens on (this test's socket): for "port in use" tests."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


_LOOP_ORIGIN_FRAMES = 16


def _loops_say_where_they_were_made() -> None:
    """An event loop collected unclosed names where it was made in its ResourceWarning.

    Python's own warning says only "unclosed event loop"; found by the collector, it surfaces in
    whichever test is running then, far from its maker. The stack is taken when a loop is made
    (a few per test), and told only if the loop is collected unclosed.
    """
    base = asyncio.base_events.BaseEventLoop
    made = base.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        self._rocketbox_made_at = "".join(traceback.format_stack(limit=_LOOP_ORIGIN_FRAMES)[:-1])
        made(self, *args, **kwargs)
        if _made_by_get_event_loop():
            _IMPLICIT_LOOPS.add(self)

    def finalize(self: Any, _warn: Any = warnings.warn) -> None:
        if not self.is_closed():
            origin = getattr(self, "_rocketbox_made_at", "(unknown)")
            _warn(f"unclosed event loop {self!r}, made at:\n{origin}", ResourceWarning, source=self)
            if not self.is_running():
                self.close()

    base.__init__ = init  # type: ignore[method-assign]  # test-only instrumentation
    base.__del__ = finalize  # type: ignore[method-assign]  # test-only instrumentation


# Loops asyncio made by itself, in ``get_event_loop()`` on the main thread when none was set:
# nobody's, so nobody closes them (see _close_current_loop).
_IMPLICIT_LOOPS: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
_FRAMES_TO_THE_POLICY = 8


def _made_by_get_event_loop() -> bool:
    frame: types.FrameType | None = sys._getframe(2)  # past init() and its caller
    for _ in range(_FRAMES_TO_THE_POLICY):
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name == "get_event_loop" and code.co_filename == asyncio.events.__file__:
            return True
        frame = frame.f_back
    return False


_loops_say_where_they_were_made()


@pytest.fixture(autouse=True)
def _garbage_collected() -> Iterator[None]:
    """Collect after each test: what it leaked (an unclosed socket, file or event loop) is
    reported as its own failure (filterwarnings = error), not as a random later test's."""
    yield
    _close_current_loop()
    gc.collect()


def _close_current_loop() -> None:
    """Leave this thread's current event loop as a fresh process has it: none set, and
    ``get_event_loop()`` free to make one (closing the one a test left, unless it runs).

    Libraries use the current loop, and not as a test's leak: grpc.aio makes its objects on
    ``get_event_loop()`` when no loop is running (on the main thread that makes a loop nobody
    closes; left there, the collector finds it unclosed in some later test), and the official
    RocketMQ client sets its shared I/O loop current on whichever thread opens a channel, then
    opens streams on the main thread expecting to find a loop there. So: a running loop (that
    I/O loop, run by its own thread) stays; another is closed and dropped; and the policy may
    make a loop again, as before the first test (``asyncio.run`` and ``set_event_loop(None)``
    forbid it: the client's next stream would fail "There is no current event loop"). A loop
    asyncio made by itself that is no longer current is closed too (_IMPLICIT_LOOPS).
    """
    # A loop asyncio made by itself and a library then replaced as current (the official client
    # sets its I/O loop current when it opens a channel): not current, yet as much nobody's.
    for implicit in list(_IMPLICIT_LOOPS):
        if not implicit.is_running() and not implicit.is_closed():
            implicit.close()
    policy = asyncio.get_event_loop_policy()
    local = getattr(policy, "_local", None)
    if local is None:
        return
    loop: asyncio.AbstractEventLoop | None = getattr(local, "_loop", None)
    if loop is not None and loop.is_running():
        return
    if loop is not None:
        policy.set_event_loop(None)
        loop.close()
    local._set_called = False  # asyncio's own flag: may make a loop on the next get_event_loop()
