"""Background service threads the store owns (RocketMQ's ServiceThread).

The store is a blocking component: mmap writes, fsync and file deletion. Its services run on
threads it starts and joins itself, so no thread outlives the store that started it.
"""

from __future__ import annotations

import logging
import threading

LOG = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 30.0


class ServiceThread:
    """A named loop that sleeps between rounds, can be woken early, and stops on request."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stopped = threading.Event()
        self._wakeup = threading.Event()
        self._worker: threading.Thread | None = None

    def start(self) -> None:
        assert self._worker is None, f"{self.name} started twice"
        self._worker = threading.Thread(target=self._run_guarded, name=self.name, daemon=True)
        self._worker.start()

    def shutdown(self) -> None:
        self._stopped.set()
        self._wakeup.set()
        if self._worker is not None and self._worker is not threading.current_thread():
            self._worker.join(JOIN_TIMEOUT_S)
            if self._worker.is_alive():
                LOG.error("%s did not stop within %s s", self.name, JOIN_TIMEOUT_S)

    @property
    def is_stopped(self) -> bool:
        return self._stopped.is_set()

    def wakeup(self) -> None:
        # Called on hot paths (every append wakes the dispatcher): set() takes a lock and
        # notifies, is_set() reads a flag. A flag already set is still seen by the round that
        # clears it, which then reads the state the caller changed before calling.
        if not self._wakeup.is_set():
            self._wakeup.set()

    def wait_for_running(self, interval_ms: float) -> None:
        self._wakeup.wait(interval_ms / 1000.0)
        self._wakeup.clear()

    def run(self) -> None:
        raise NotImplementedError

    def _run_guarded(self) -> None:
        LOG.debug("%s started", self.name)
        try:
            self.run()
        except Exception:
            # A dead service would silently stop flushing or dispatching: make it loud.
            LOG.exception("%s crashed", self.name)
            raise
        LOG.debug("%s stopped", self.name)
