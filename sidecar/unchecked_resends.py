"""Resends made without the broker's index check: each counted, and said once per access point.

An outbox entry that may already be stored (its send was ambiguous) is looked up by message id
before it is resent (sidecar/producer.py's ``lookup_stored``), so that it is not stored twice.
Where no access point offers that lookup (a RocketMQ proxy serves ``apache.rocketmq.v2`` alone,
not rocketbox's BrokerAdmin) the entry is resent unchecked: delivery is then at least once. That
must not pass in silence: every such resend is counted
(``rocketbox_sidecar_resends_unchecked_total``), and a WARNING line says what it means the first
time an access point is found without the lookup.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from prometheus_client import Counter

from sidecar.channels import Endpoint

LOG = logging.getLogger(__name__)
# What the line names when the producer could say of no access point which lacks the lookup.
ANY_ACCESS_POINT = "any access point"


class UncheckedResends:
    def __init__(self, counter: Counter) -> None:
        self._counter = counter
        self._warned: set[str] = set()

    def resending(self, lacking: Sequence[Endpoint]) -> None:
        """One maybe-stored entry goes out unchecked; ``lacking``: the access points found
        without the lookup (the producer's ``index_lookup_missing``)."""
        self._counter.inc()
        names = [str(e) for e in lacking] or [ANY_ACCESS_POINT]
        new = [name for name in names if name not in self._warned]
        if not new:
            return
        self._warned.update(new)
        LOG.warning(
            "outbox entries that may already be stored are resent without checking the "
            "broker's index, so such a message may be delivered twice: no lookup by message id "
            "at %s (rocketbox's BrokerAdmin.GetMessage answered UNIMPLEMENTED, as a RocketMQ "
            "proxy does); counted in rocketbox_sidecar_resends_unchecked_total",
            ", ".join(new),
        )
