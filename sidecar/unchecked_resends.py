"""Resends made without the broker's index check: each counted, and said once per access point.

An outbox entry that may already be stored (its send was ambiguous) is looked up by message id
before it is resent (sidecar/producer.py's ``lookup_stored``), so that it is not stored twice.
Where no access point offers that lookup (a RocketMQ proxy serves ``apache.rocketmq.v2`` alone,
not rocketbox's BrokerAdmin), and RocketMQ's brokers cannot be asked instead (``--lookup-namesrv``
unset, or its lookup could not say), the entry is resent unchecked: delivery is then at least
once. That must not pass in silence: every such resend is counted
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
    def __init__(self, counter: Counter, brokers_asked: bool) -> None:
        """``brokers_asked``: RocketMQ's brokers are asked when the access points cannot be
        (``--lookup-namesrv``), so an unchecked resend means they could not say either."""
        self._counter = counter
        self._warned: set[str] = set()
        self._fallback = (
            "and the brokers --lookup-namesrv names could not say"
            if brokers_asked
            else "and --lookup-namesrv, unset, would ask RocketMQ's brokers instead"
        )

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
            "proxy does) %s; counted in rocketbox_sidecar_resends_unchecked_total",
            ", ".join(new), self._fallback,
        )  # fmt: skip
