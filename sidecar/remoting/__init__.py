"""Apache RocketMQ's remoting protocol, client side, for one question: was this message id
stored? The sidecar asks it before resending an outbox entry whose send may have been stored
(``maybe_stored``) when the broker endpoint it sends to (a RocketMQ 5 proxy) does not offer
rocketbox's own index lookup, and ``--lookup-namesrv`` names the cluster's NameServers.

- ``protocol``: the remoting command frame, its JSON and binary headers, request signing;
- ``connection``: one TCP connection, requests matched to answers by opaque;
- ``pool``: the connections kept open, one per address, closed when idle;
- ``shared``: one request's answer taken by every lookup that may take it;
- ``route``: a topic's broker groups from the NameServers (GET_ROUTEINFO_BY_TOPIC);
- ``broker_query``: a broker's index by unique key (QUERY_MESSAGE), how far its dispatcher is
  (GET_BROKER_RUNTIME_INFO), whether it builds an index at all (GET_BROKER_CONFIG);
- ``records``: the commitlog records a query answers;
- ``lookup``: the whole question, and when its "not found" may be trusted.
"""

from sidecar.remoting.lookup import (
    LookupResult,
    UniqKeyLookup,
    UniqKeyLookupConfig,
    Verdict,
    lookup_by_uniq_key,
    parse_namesrv_addrs,
)

__all__ = [
    "LookupResult",
    "UniqKeyLookup",
    "UniqKeyLookupConfig",
    "Verdict",
    "lookup_by_uniq_key",
    "parse_namesrv_addrs",
]
