"""The membership rule of broadcast groups (broker/broadcast_members.py), on its own, with a test
clock and a test view of which clients are connected.

Proves: a client id keeps its member; a new client adopts a member whose client terminated, of
its own host first, else of another host; a silent member is adopted only once it is silent past
the silence time and not connected; a member that left is forgotten (its progress with it) after
the retention time, and only then; past the members limit a new client is refused with an error
naming the limit, and joins once a member has left; the table round-trips through its snapshot,
and a loaded member gets the silence window afresh; ``--group NAME:broadcast`` is parsed.
"""

from __future__ import annotations

import pytest

from broker.broadcast_members import BroadcastMembers, MembersLimitError, client_host
from rocketbox.broker_cli import GroupSpec, parse_group_spec

SILENCE_MS = 1_000
RETENTION_MS = 10_000


class World:
    """The members table with a clock the test moves and a set of connected clients."""

    def __init__(self, members_max: int = 8) -> None:
        self.now_ms = 1_000_000
        self.connected: set[str] = set()
        self.forgotten: list[str] = []
        self.changes = 0
        self.members = self.make(members_max)

    def make(self, members_max: int = 8) -> BroadcastMembers:
        return BroadcastMembers(
            self.connected.__contains__,
            self.forgotten.append,
            self._changed,
            lambda: self.now_ms,
            members_max=members_max,
            silence_ms=SILENCE_MS,
            retention_ms=RETENTION_MS,
        )

    def _changed(self) -> None:
        self.changes += 1


def cid(host: str, pid: int) -> str:
    """An id shaped like the official clients': host@pid@index@time."""
    return f"{host}@{pid}@0@lz{pid}"


def test_a_client_keeps_its_member_and_new_clients_get_new_ones() -> None:
    w = World()
    a = w.members.member_of("Fans", cid("h1", 1))
    b = w.members.member_of("Fans", cid("h1", 2))
    assert (a, b) == (1, 2)
    assert w.members.member_of("Fans", cid("h1", 1)) == 1
    # Another group: members of its own.
    assert w.members.member_of("Other", cid("h1", 1)) == 1
    assert w.members.find("Fans", cid("h9", 9)) is None
    assert client_host(cid("h1", 1)) == "h1"


def test_a_new_client_adopts_a_terminated_member_of_its_own_host_first() -> None:
    w = World()
    w.members.member_of("Fans", cid("h1", 1))  # member 1, on h1
    w.members.member_of("Fans", cid("h2", 2))  # member 2, on h2
    w.members.member_of("Fans", cid("h3", 3))  # member 3, on h3 (stays)
    w.members.terminated(cid("h1", 1))
    w.now_ms += 5
    w.members.terminated(cid("h2", 2))  # left last, but of another host
    assert w.members.member_of("Fans", cid("h1", 11)) == 1
    # The next newcomer, of a host with no departed member: the one left (of h2).
    assert w.members.member_of("Fans", cid("h7", 12)) == 2
    # Nothing left to adopt: a new member.
    assert w.members.member_of("Fans", cid("h1", 13)) == 4
    # The old client ids are no members any more; the adopters are.
    assert w.members.find("Fans", cid("h1", 1)) is None
    assert w.members.find("Fans", cid("h1", 11)) == 1
    assert [m.client for m in w.members.members("Fans")] == [
        cid("h1", 11),
        cid("h7", 12),
        cid("h3", 3),
        cid("h1", 13),
    ]
    assert not any(w.members.has_left(m) for m in w.members.members("Fans"))


def test_a_silent_member_is_adopted_only_past_the_silence_and_when_disconnected() -> None:
    w = World()
    old = cid("h1", 1)
    w.members.member_of("Fans", old)
    w.connected.add(old)
    w.now_ms += SILENCE_MS + 1
    # Silent, but its Telemetry stream is open: not adoptable.
    assert w.members.member_of("Fans", cid("h1", 2)) == 2
    w.connected.discard(old)
    w.members.seen(old)  # a heartbeat: alive again
    w.now_ms += SILENCE_MS  # exactly the silence: not past it
    assert w.members.member_of("Fans", cid("h1", 3)) == 3
    w.members.seen(cid("h1", 2))
    w.now_ms += 1
    # Past the silence and disconnected: left (members 2 and 3 were seen since, so they stay).
    assert w.members.member_of("Fans", cid("h1", 4)) == 1


def test_a_member_that_left_is_forgotten_after_the_retention_with_its_progress() -> None:
    w = World()
    w.members.member_of("Fans", cid("h1", 1))
    w.members.member_of("Fans", cid("h2", 2))
    w.members.terminated(cid("h1", 1))
    w.now_ms += RETENTION_MS
    w.members.seen(cid("h2", 2))  # member 2 stays alive throughout
    # At the retention, not past it: member 1 is still there, and adopted.
    assert w.members.member_of("Fans", cid("h1", 3)) == 1
    w.members.terminated(cid("h1", 3))
    w.now_ms += RETENTION_MS + 1
    w.members.seen(cid("h2", 2))
    assert w.forgotten == []
    # A newcomer makes the table look at who left: member 1 is forgotten, the newcomer is new.
    # Member 2 was seen just now: kept, and not adoptable.
    assert w.members.member_of("Fans", cid("h9", 9)) == 3
    assert w.forgotten == ["Fans@1"]
    assert [m.id for m in w.members.members("Fans")] == [2, 3]


def test_past_the_members_limit_a_new_client_is_refused_until_one_has_left() -> None:
    w = World(members_max=2)
    w.members.member_of("Fans", cid("h1", 1))
    w.members.member_of("Fans", cid("h1", 2))
    with pytest.raises(MembersLimitError) as refused:
        w.members.member_of("Fans", cid("h1", 3))
    text = str(refused.value)
    for word in ("'Fans'", "limit 2", "h1@3"):
        assert word in text, text
    # A known member is not refused.
    assert w.members.member_of("Fans", cid("h1", 2)) == 2
    w.members.terminated(cid("h1", 1))
    assert w.members.member_of("Fans", cid("h1", 3)) == 1


def test_the_table_round_trips_and_loaded_members_get_the_silence_afresh() -> None:
    w = World()
    w.members.member_of("Fans", cid("h1", 1))
    w.members.member_of("Fans", cid("h1", 2))
    w.members.terminated(cid("h1", 2))
    saved = w.members.snapshot()
    assert w.changes > 0
    # A broker restarted later (within the retention): member 1's client may come back.
    w.now_ms += 5 * SILENCE_MS
    again = w.make()
    again.load(saved)
    assert again.find("Fans", cid("h1", 1)) == 1
    assert not again.has_left(again.members("Fans")[0])
    assert again.member_of("Fans", cid("h1", 3)) == 2  # the terminated one is adoptable
    assert again.member_of("Fans", cid("h1", 4)) == 3  # member 1 is not (yet)
    assert again.snapshot()["Fans"]["next_id"] == 4


def test_group_specs_name_the_broadcast_model() -> None:
    assert parse_group_spec("Fans:broadcast") == GroupSpec("Fans", broadcast=True)
    assert parse_group_spec("Fans:orderly:broadcast:3") == GroupSpec("Fans", True, 3, True)
    assert parse_group_spec("Plain") == GroupSpec("Plain")
    for bad in ("Fans:broadcast:broadcast", "Fans:fanout", "Fans:1:2"):
        with pytest.raises(ValueError, match="broadcast"):
            parse_group_spec(bad)
