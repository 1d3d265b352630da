"""What each backend declares beyond the contract (``OutboxFeatures``), checked present where
declared and absent where not, with real processes and real services:
- shared_by_sidecars: a second opener of the URL sees and shares the first one's entries, and
  two processes claiming at once never get the same entry; without it, a second opener is
  refused or gets an outbox of its own, which shares nothing with the first;
- survives_process_kill: what a child process's returned puts stored is there after SIGKILL of
  it; without it, none of it is;
- every backend the factory opens declares its features.
"""

from __future__ import annotations

import pytest

from outbox import Outbox, OutboxFeatures, OutboxUnavailableError, open_outbox
from outbox.factory import BACKENDS, backend_class
from tests.outbox.conformance.processes import Claimer, Putter, claim
from tests.outbox.conftest import SHARED_BACKENDS, OpenOutbox
from tests.outbox.entries import NOW_MS, entry, message_id

KILLED_PUTS = 5


@pytest.mark.parametrize("scheme", sorted(BACKENDS))
def test_every_backend_declares_its_features(scheme: str) -> None:
    assert isinstance(backend_class(scheme).features, OutboxFeatures)


def test_a_second_opener_shares_the_outbox_only_when_declared(
    outbox: Outbox, outbox_url: str, features: OutboxFeatures
) -> None:
    outbox.put([entry(1)])
    try:
        second = open_outbox(outbox_url)
    except OutboxUnavailableError:
        assert not features.shared_by_sidecars, "a shared backend refused a second opener"
        return
    with second:
        if features.shared_by_sidecars:
            assert second.get(message_id(1)) == outbox.get(message_id(1))
            assert claim(second, owner="other") == [message_id(1)]
            assert claim(outbox) == [], "both openers were given one entry"
        else:
            assert second.get(message_id(1)) is None, "an outbox of its own shares nothing"
            assert claim(second, owner="other") == []
            second.put([entry(2)])
            assert outbox.get(message_id(2)) is None
            assert claim(outbox) == [message_id(1)]


@pytest.mark.slow
@pytest.mark.parametrize("backend", SHARED_BACKENDS, indirect=True)
def test_two_processes_claiming_at_once_never_get_the_same_entry(
    outbox: Outbox, outbox_url: str
) -> None:
    entries_n = 1_200
    outbox.put([entry(n) for n in range(entries_n)])
    claimers = [Claimer(outbox_url, f"proc{k}") for k in range(2)]
    try:
        for c in claimers:
            c.wait_ready()
        for c in claimers:
            c.go()
        results = [c.finish() for c in claimers]
    finally:
        for c in claimers:
            c.stop()
    assert all(results), "both processes must have claimed (they ran at the same time)"
    every = [i for mine in results for i in mine]
    assert len(every) == len(set(every)), "an entry was claimed by both processes"
    assert set(every) == {message_id(n) for n in range(entries_n)}


@pytest.mark.slow
def test_what_a_killed_process_put_survives_only_when_declared(
    open_ob: OpenOutbox, outbox_url: str, features: OutboxFeatures
) -> None:
    putter = Putter(outbox_url, KILLED_PUTS)
    try:
        acked = putter.wait_held()
    finally:
        putter.stop()  # SIGKILL, with the outbox still open
    assert acked == [message_id(n) for n in range(1, KILLED_PUTS + 1)]
    reopened = open_ob()
    found = [reopened.get(message_id) for message_id in acked]
    if features.survives_process_kill:
        assert [e.message.body if e else None for e in found] == [
            entry(n).message.body for n in range(1, KILLED_PUTS + 1)
        ]
        assert claim(reopened, now_ms=NOW_MS) == acked
    else:
        assert found == [None] * KILLED_PUTS
