"""A power cut on a stage: the machine that holds a disk loses power, and comes back.

The stage's power-loss disk (chaos/power_loss.py) holds one part's storage (StageOptions'
``power_loss``): the broker's store, or the outbox's (the RocksDB outbox's directory, the
private redis-server's AOF, the private mariadbd's data directory). The processes that use that
disk are the machine's: the broker; the sidecar, whose RocksDB outbox it is; the redis-server or
the mariadbd.

The cut, in the order a real one imposes:

1. those processes are frozen (SIGSTOP), all of them, so that none acts on the cut: nothing an
   application or a peer is told after it may rest on a write the cut drops (a process stopped
   in a system call stops as the call returns, before its code runs again);
2. the kernel's dirty pages of the disk (the broker's mapped writes not yet sent to it) are
   written back to it, unsynced, so that the cut's counts include them; then the disk drops
   every unsynced write and answers EIO from then on;
3. the processes are SIGKILLed (a stopped process dies of it) and reaped;
4. after the machine's seeded time down, the disk is mounted again over what was synced, and
   the processes are started again on their ports, servers before the sidecar that uses them.

What the cut dropped (files and bytes not synced) and what it killed go to ``events.jsonl``.
"""

from __future__ import annotations

import signal
from typing import Any, Protocol

from chaos.stage import Stage


class _Victim(Protocol):
    def signal(self, sig: signal.Signals) -> None: ...

    def kill(self) -> int: ...

    def start(self) -> Any: ...


def victims(stage: Stage) -> list[tuple[str, _Victim]]:
    """The processes that use the stage's power-loss disk, in the order they start."""
    target = stage.options.power_loss
    if target == "broker":
        assert stage.broker is not None
        return [("broker", stage.broker)]
    if target != "outbox":
        raise ValueError(f"the stage has no power-loss disk (power_loss={target!r})")
    if stage.redis is not None:
        return [("redis-server", stage.redis)]
    if stage.mariadb is not None:
        return [("mariadbd", stage.mariadb)]
    assert stage.sidecar is not None
    return [("sidecar", stage.sidecar)]


def power_cut(stage: Stage, down_s: float) -> dict[str, Any]:
    """Cut the power of the machine that holds the stage's power-loss disk, keep it down for
    ``down_s``, bring it back; what the cut dropped."""
    disk = stage.power_disk
    assert disk is not None
    parts = victims(stage)
    for _, part in parts:
        part.signal(signal.SIGSTOP)
    disk.write_back_page_cache()
    dropped = disk.cut()
    codes = {name: part.kill() for name, part in parts}
    stage.event("power cut", killed=codes, **dropped)
    disk.remount()
    stage.hold(down_s, "power off")
    for name, part in parts:
        part.start()
        stage.event(f"{name} restarted after the power cut")
    return dropped
