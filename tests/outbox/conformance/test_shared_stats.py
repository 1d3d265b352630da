"""``shared_stats`` (the sidecars' periodic read) and ``label`` (the outbox's name in metrics),
checked against every backend.

Proves:
- two readers of one outbox asking at the same time get what ``stats`` says: the first reader
  finds what needs a scan and the other what it published, counts and all;
- the counts follow at once what changed since, for a reader that asks within its interval;
- the label of the outbox's URL names no user or password: the same whatever credentials the
  URL carries.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from outbox import Outbox
from outbox.factory import backend_class
from tests.outbox.conformance.processes import claim
from tests.outbox.entries import NOW_MS, entry, message_id, receipt

INTERVAL_MS = 5_000


def test_shared_stats_are_stats_for_every_reader(outbox: Outbox) -> None:
    outbox.put([entry(n, created_ms=NOW_MS - n, next_send_time_ms=NOW_MS + n) for n in range(6)])
    claim(outbox, limit=2)  # 0 and 1 in flight
    assert outbox.mark_delivered(message_id(5), receipt(5))
    expected = outbox.stats(NOW_MS + 3)
    assert outbox.shared_stats(NOW_MS + 3, "a/1", INTERVAL_MS) == expected
    assert outbox.shared_stats(NOW_MS + 3, "b/1", INTERVAL_MS) == expected

    assert outbox.mark_delivered(message_id(0), receipt(0))
    later = outbox.shared_stats(NOW_MS + 4, "b/1", INTERVAL_MS)
    exact = outbox.stats(NOW_MS + 4)
    assert (later.pending, later.delivered, later.dead, later.bytes) == (
        exact.pending, exact.delivered, exact.dead, exact.bytes,
    )  # fmt: skip
    assert later.oldest_pending_created_ms == exact.oldest_pending_created_ms


def test_the_label_is_the_same_whatever_credentials_the_url_carries(outbox_url: str) -> None:
    parts = urlsplit(outbox_url)
    hosts = parts.netloc.rpartition("@")[2]
    bare = parts._replace(netloc=hosts).geturl()
    with_password = parts._replace(netloc=f"someone:s3cret@{hosts}").geturl()
    backend = backend_class(parts.scheme)
    label = backend.label(with_password)
    assert label == backend.label(bare)
    assert "s3cret" not in label
    assert "someone" not in label
