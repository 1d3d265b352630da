"""The FIFO fence in memory, backed by the outbox.

Once a message of a (topic, message group) is spooled, later messages of that group must be
spooled behind it until the resend pool has delivered the group's entries (docs/design.md §4.4).
Asking the outbox on every FIFO message cost a thread hop and a query; the fence keeps the set of
fenced groups in memory instead:

- ``load`` fills it from the outbox's PENDING groups at start (what an earlier run spooled);
- intake adds a group when it spools one of its messages (under the group's intake lock, after
  the entry is durable);
- a group is lifted only when the outbox says it has nothing PENDING, checked when the resend
  pool delivered or buried one of its entries (``recheck``) and for every group every
  ``fifo_fence_refresh_interval_ms`` (``refresh``), which also picks up groups that another
  sidecar sharing a Redis or MySQL outbox spooled.

A check that began before a spool of its group can miss that entry: every ``add`` gives the
group a new generation, and a check lifts the fence only if the generation is what it was when the
check began.
"""

from __future__ import annotations

import itertools
import logging

from sidecar.async_outbox import AsyncOutbox

LOG = logging.getLogger(__name__)
GroupKey = tuple[str, str]


class FifoFence:
    def __init__(self, outbox: AsyncOutbox) -> None:
        self._outbox = outbox
        self._fenced: set[GroupKey] = set()
        # A fresh number from one counter at every add (so a lifted and re-added group never
        # repeats an old generation); a group absent here has generation 0.
        self._generations: dict[GroupKey, int] = {}
        self._counter = itertools.count(1)
        # What the outbox holds was read once (load or refresh): until then, the fence does not
        # know which groups have entries there, and intake refuses FIFO messages.
        self.loaded = False

    def __contains__(self, key: GroupKey) -> bool:
        return key in self._fenced

    def __len__(self) -> int:
        return len(self._fenced)

    def add(self, key: GroupKey) -> None:
        self._fenced.add(key)
        self._generations[key] = next(self._counter)

    async def load(self) -> None:
        """Fence every group the outbox has PENDING entries of."""
        for key in await self._outbox.pending_groups():
            self.add(key)
        self.loaded = True

    async def recheck(self, key: GroupKey) -> None:
        """Lift the group's fence if the outbox has nothing PENDING of it."""
        if key not in self._fenced:
            return
        generation = self._generations.get(key, 0)
        if await self._outbox.has_pending_group(*key):
            return
        self._lift(key, generation)

    async def refresh(self) -> None:
        """The fence becomes what the outbox holds (plus what was added meanwhile)."""
        before = dict(self._generations)
        pending = await self._outbox.pending_groups()
        for key in pending - self._fenced:
            self.add(key)
        for key in self._fenced - pending:
            self._lift(key, before.get(key, 0))
        self.loaded = True

    def _lift(self, key: GroupKey, generation: int) -> None:
        if self._generations.get(key, 0) != generation:
            return  # spooled again since the check began: the entry may be what it missed
        self._fenced.discard(key)
        self._generations.pop(key, None)
        LOG.debug("FIFO fence of %s/%s lifted", *key)
