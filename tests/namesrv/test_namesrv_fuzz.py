"""The NameServer under the fuzzer of tests/test_fuzz_servers.py: every RPC of a real
``rocketbox namesrv`` (rocketbox.namesrv.v1.NameServerService and grpc.health.v1.Health) called
with random bytes, mutated valid requests and generated messages with extreme values.

Proves: bytes that are not protobuf, and invalid UTF-8 in a string field, are refused
INVALID_ARGUMENT naming the request type on every method; no call is answered UNKNOWN; no request
makes a handler fault (no traceback); and after the fuzzing the NameServer still takes a valid
registration and routes it.
"""

from __future__ import annotations

import time

import grpc
import pytest
from grpc_health.v1 import health_pb2

from rocketbox_api.namesrv.v1 import namesrv_pb2 as npb
from rocketbox_api.namesrv.v1 import namesrv_pb2_grpc
from tests.cluster.processes import NamesrvProcess
from tests.namesrv.test_namesrv import request
from tests.test_fuzz_servers import FAULT_LINE, Fuzzer, assert_fuzzed, assert_undecodable_refused

pytestmark = pytest.mark.slow

NAMESRV_SERVICES = (
    npb.DESCRIPTOR.services_by_name["NameServerService"],
    health_pb2.DESCRIPTOR.services_by_name["Health"],
)
DEADLINE_S = 10.0


def test_fuzzing_every_rpc_of_the_namesrv() -> None:
    seeds = {
        "RegisterBroker": request("broker-a"),
        "UnregisterBroker": npb.UnregisterBrokerRequest(
            cluster_name="DefaultCluster", broker_name="broker-a", broker_addr="127.0.0.1:1"
        ),
        "GetRouteInfoByTopic": npb.GetRouteInfoByTopicRequest(topic="T"),
    }
    with NamesrvProcess(expiry_ms=120_000) as namesrv:
        assert_undecodable_refused(namesrv.endpoint, NAMESRV_SERVICES)
        fuzzer = Fuzzer(namesrv.endpoint, NAMESRV_SERVICES, seeds)
        started_s = time.monotonic()
        fuzzer.run()
        elapsed_s = time.monotonic() - started_s
        assert namesrv.running()
        with grpc.insecure_channel(namesrv.endpoint) as channel:
            stub = namesrv_pb2_grpc.NameServerServiceStub(channel)
            stub.RegisterBroker(request("after-fuzzing", port=4), timeout=DEADLINE_S)
            route = stub.GetRouteInfoByTopic(
                npb.GetRouteInfoByTopicRequest(topic="T"), timeout=DEADLINE_S
            )
        assert "after-fuzzing" in {q.broker_name for q in route.queue_datas}
    output = namesrv.output()
    assert_fuzzed(fuzzer, output, elapsed_s)
    assert FAULT_LINE not in output, "no request made a NameServer handler fault"
    assert "Traceback" not in output
