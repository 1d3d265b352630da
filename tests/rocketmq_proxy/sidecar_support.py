"""A real ``rocketbox sidecar`` sending to a stand-in proxy (``--broker`` its endpoint), with its
RocketMQ front and metrics on free ports, and what the tests read of it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rocketbox_api.v1 import sidecar_pb2 as api
from tests.prometheus import sample, scrape
from tests.rocketbox_process import wait_until
from tests.rocketmq_proxy.proxy_process import RocketMQProxy, rocketmq_proxy
from tests.sidecar.rocketmq_front.front_process import FrontSidecar

# An outage's spool and drain, and the sidecar's fast resends (100-500 ms back-off): seconds.
DRAIN_DEADLINE_S = 60.0
RESENDS = "rocketbox_sidecar_resends_total"
UNCHECKED_RESENDS = "rocketbox_sidecar_resends_unchecked_total"


@contextmanager
def proxy_and_sidecar(
    data_dir: Path, topics: Sequence[str], *sidecar_args: str
) -> Iterator[tuple[RocketMQProxy, FrontSidecar]]:
    """A stand-in proxy over ``data_dir/proxy`` and a sidecar in front of it over a RocksDB
    outbox in ``data_dir/outbox``; both stopped when the block ends."""
    with rocketmq_proxy(data_dir / "proxy", topics) as proxy:
        sidecar = FrontSidecar(proxy.endpoint, f"rocksdb://{data_dir / 'outbox'}", *sidecar_args)
        try:
            yield proxy, sidecar
        finally:
            sidecar.stop()


def metric(sidecar: FrontSidecar, name: str, **labels: str) -> float:
    return sample(scrape(sidecar.metrics_port), name, **labels)


def delivered_resends(sidecar: FrontSidecar) -> float:
    return metric(sidecar, RESENDS, outcome="DELIVERED")


def wait_stored_once(proxy: RocketMQProxy, topic: str, ids: Sequence[str]) -> None:
    """Until every one of ``ids`` is in the proxy; then each must be there exactly once."""
    wanted = set(ids)

    def all_there() -> bool:
        return wanted <= {m.message_id for m in proxy.stored(topic)}

    wait_until(all_there, DRAIN_DEADLINE_S, f"{len(wanted)} messages of {topic} in the proxy")
    copies = [m.message_id for m in proxy.stored(topic) if m.message_id in wanted]
    assert sorted(copies) == sorted(wanted), f"stored more than once: {copies}"


def wait_metric(
    sidecar: FrontSidecar, value: Callable[[FrontSidecar], float], at_least: float, what: str
) -> None:
    wait_until(lambda: value(sidecar) >= at_least, DRAIN_DEADLINE_S, what)


def stored_answer(result: api.SendResult) -> api.Stored:
    assert result.WhichOneof("outcome") == "stored", result
    return result.stored
