"""Who is a member of a broadcast consumer group, and whose consume progress a client continues.

A broadcast group (``consume_broadcast_enable``, RocketMQ's MessageModel.BROADCASTING) delivers
every message to every member, once each. Each member keeps its own pop progress (ack offset,
done set, in-flight messages) under the progress key ``<group>@<member id>`` in pop_progress.py,
so a member's nacked or expired messages come back to that member only. ``@`` is not a group
name character, so no key of a member meets a clustering group's.

The official clients send ``x-mq-client-id`` with every call, ``<host>@<pid>@<index>@<time>``:
a restarted consumer process has a new one. So a member is not a client id; the rule is:

- A client id already holding a member continues it (also across a broker restart: the client
  keeps its id while only the broker restarts).
- A new client id **adopts** a member that has left: its client said NotifyClientTermination,
  or has no open Telemetry stream here and was silent (no receive, ack, heartbeat) for
  MEMBER_SILENCE_MS. A member of the same host (the client id's first part) is preferred, then
  any host; among those, the one seen last (the likeliest predecessor). The adopter resumes from
  the member's progress: what came after its last ack, and its unacked messages once their
  invisibility ends.
- Otherwise the client id becomes a **new member**, starting from the first message still
  stored in each queue (the broker's rule for a new clustering group: nothing is skipped). A
  member is known only from its first call, so RocketMQ's broadcast default (the last offset)
  would lose what was sent between a consumer's start and its first receive.
- Past MEMBERS_MAX members a new client id is refused (MembersLimitError) until one has left.
- A member that left and was not adopted within MEMBER_RETENTION_MS is forgotten, its progress
  with it, so the state file cannot grow without bound.

Limits, said plainly: a consumer that crashed (no NotifyClientTermination) and restarts within
the silence window while its old Telemetry stream still looks open gets a new member and
receives every message still stored again; a brand-new consumer that finds a departed member
adopts it even if it is not that member's restart; two restarted consumers of one host may take
each other's member (both receive every message, so each still misses none after its
predecessor's last ack). After a broker restart every member gets the silence window afresh, so
the clients still running reclaim their own members before any newcomer may adopt them.

The table is persisted in ``consumer_offsets.json`` beside the progress (pop_progress.py) as
``"@broadcast": {group: {"next_id": n, "members": [{"id", "client", "host", "seen_ms",
"left_ms"}]}}``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

LOG = logging.getLogger(__name__)

MEMBERS_MAX = 256
# A member whose client is not connected and was silent this long has left: six of the
# official clients' 10 s heartbeats missed.
MEMBER_SILENCE_MS = 60_000
MEMBER_RETENTION_MS = 3 * 24 * 3600 * 1000
# The key of the members table in consumer_offsets.json (not a group name: '@' is not a name
# character).
MEMBERS_KEY = "@broadcast"


class MembersLimitError(Exception):
    """A new client of a broadcast group past MEMBERS_MAX members. Retriable: once a member
    has left, a new client adopts it."""


def progress_key(group: str, member_id: int) -> str:
    return f"{group}@{member_id}"


def client_host(client_id: str) -> str:
    """The host part of an official client id (``<host>@<pid>@<index>@<time>``)."""
    return client_id.split("@", 1)[0]


@dataclass(slots=True)
class Member:
    id: int
    client: str
    host: str
    seen_ms: int
    # When its client said NotifyClientTermination; None while it has not.
    left_ms: int | None = None


@dataclass(slots=True)
class _Group:
    next_id: int = 1
    members: dict[int, Member] = field(default_factory=dict)


class BroadcastMembers:
    """The members of every broadcast group (see the module's docstring).

    ``connected(client_id)``: whether the client has an open Telemetry stream here.
    ``forget(key)``: drop a forgotten member's progress. ``changed()``: the table changed (it is
    written with the progress). ``now_ms``: the clock (tests pass their own)."""

    def __init__(
        self,
        connected: Callable[[str], bool],
        forget: Callable[[str], None],
        changed: Callable[[], None],
        now_ms: Callable[[], int],
        members_max: int = MEMBERS_MAX,
        silence_ms: int = MEMBER_SILENCE_MS,
        retention_ms: int = MEMBER_RETENTION_MS,
    ) -> None:
        self._connected = connected
        self._forget = forget
        self._changed = changed
        self._now_ms = now_ms
        self.members_max = members_max
        self.silence_ms = silence_ms
        self.retention_ms = retention_ms
        self._groups: dict[str, _Group] = {}
        # client id -> (group, member id) for every group the client is a member of
        self._by_client: dict[str, dict[str, int]] = {}

    # -- persistence ------------------------------------------------------------------------
    def load(self, raw: Any) -> None:
        """The saved table; every member not terminated is seen now (the silence window starts
        afresh, so the clients still running reclaim their own members first)."""
        now = self._now_ms()
        self._groups.clear()
        self._by_client.clear()
        for group, saved in (raw or {}).items():
            g = self._groups[group] = _Group(int(saved["next_id"]))
            for m in saved["members"]:
                member = Member(**m)
                if member.left_ms is None:
                    member.seen_ms = max(member.seen_ms, now)
                g.members[member.id] = member
                self._by_client.setdefault(member.client, {})[group] = member.id

    def snapshot(self) -> dict[str, Any]:
        return {
            group: {"next_id": g.next_id, "members": [asdict(m) for m in g.members.values()]}
            for group, g in self._groups.items()
        }

    # -- the rule -----------------------------------------------------------------------------
    def member_of(self, group: str, client_id: str) -> int:
        """The member ``client_id`` is in ``group``: its own, an adopted one, or a new one.
        Raises MembersLimitError past ``members_max``."""
        now = self._now_ms()
        g = self._groups.setdefault(group, _Group())
        member_id = self._by_client.get(client_id, {}).get(group)
        if member_id is not None:
            member = g.members[member_id]
            member.seen_ms = now
            return member_id
        self._expire(group, g, now)
        adopted = self._adoptable(g, client_id, now)
        if adopted is not None:
            member = adopted
            LOG.info(
                "broadcast group %s: client %s continues member %s (of client %s)",
                group, client_id, member.id, member.client,
            )  # fmt: skip
            self._unmap(member.client, group)
        else:
            if len(g.members) >= self.members_max:
                raise MembersLimitError(
                    f"broadcast group {group!r} has {len(g.members)} members (limit "
                    f"{self.members_max}); client {client_id!r} may join once one has left"
                )
            member = Member(g.next_id, client_id, client_host(client_id), now)
            g.members[member.id] = member
            g.next_id += 1
            LOG.info("broadcast group %s: client %s is new member %s", group, client_id, member.id)
        member.client, member.host, member.seen_ms, member.left_ms = (
            client_id, client_host(client_id), now, None,
        )  # fmt: skip
        self._by_client.setdefault(client_id, {})[group] = member.id
        self._changed()
        return member.id

    def find(self, group: str, client_id: str) -> int | None:
        """The member ``client_id`` holds in ``group`` (nothing is made)."""
        member_id = self._by_client.get(client_id, {}).get(group)
        if member_id is not None:
            self._groups[group].members[member_id].seen_ms = self._now_ms()
        return member_id

    def seen(self, client_id: str) -> None:
        """A heartbeat: the client's members are alive."""
        now = self._now_ms()
        for group, member_id in self._by_client.get(client_id, {}).items():
            self._groups[group].members[member_id].seen_ms = now

    def terminated(self, client_id: str) -> None:
        """NotifyClientTermination: the client's members have left (adoptable at once)."""
        now = self._now_ms()
        for group, member_id in self._by_client.get(client_id, {}).items():
            self._groups[group].members[member_id].left_ms = now
            self._changed()

    def members(self, group: str) -> list[Member]:
        g = self._groups.get(group)
        return sorted(g.members.values(), key=lambda m: m.id) if g is not None else []

    def has_left(self, member: Member, now_ms: int | None = None) -> bool:
        if member.left_ms is not None:
            return True
        now = self._now_ms() if now_ms is None else now_ms
        return now - member.seen_ms > self.silence_ms and not self._connected(member.client)

    def _adoptable(self, g: _Group, client_id: str, now: int) -> Member | None:
        left = [m for m in g.members.values() if self.has_left(m, now)]
        if not left:
            return None
        host = client_host(client_id)
        # Same host first, then the one seen last.
        return max(left, key=lambda m: (m.host == host, m.left_ms or m.seen_ms, m.id))

    def _expire(self, group: str, g: _Group, now: int) -> None:
        """Forget members that left longer than ``retention_ms`` ago."""
        for member in list(g.members.values()):
            since = member.left_ms if member.left_ms is not None else member.seen_ms
            if self.has_left(member, now) and now - since > self.retention_ms:
                del g.members[member.id]
                self._unmap(member.client, group)
                self._forget(progress_key(group, member.id))
                self._changed()
                LOG.info(
                    "broadcast group %s: member %s (client %s) forgotten, gone since %s ms",
                    group, member.id, member.client, now - since,
                )  # fmt: skip

    def _unmap(self, client_id: str, group: str) -> None:
        groups = self._by_client.get(client_id)
        if groups is not None:
            groups.pop(group, None)
            if not groups:
                del self._by_client[client_id]
