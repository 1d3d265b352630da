"""chaos/fault_proxy.py, a real TCP proxy in front of a real listener (an echo server here, a
real broker in the last test):

- no fault: bytes go both ways, counted;
- latency: a round trip takes at least twice the latency; with jitter, a stream still arrives
  whole and in order;
- reset: open connections are reset on both sides (RST), new ones at once; lifting it heals;
- blackhole: connections are accepted and read, nothing reaches the target and nothing comes
  back; one accepted meanwhile is reset when the blackhole lifts;
- half open: client → target still goes through, target → client is dropped, and the
  connection stays open;
- gRPC through it: a broker's health check is SERVING, times out under a blackhole, is
  UNAVAILABLE under reset, and SERVING again once healed;
- target port 0 is the proxy's own port, on another loopback address;
- a bad latency is refused naming its field and limit; stop closes the listener and every
  connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from chaos.fault_proxy import FaultProxy
from chaos.faults import LATENCY_MS_MAX, Fault
from chaos.processes import BrokerProcess, wait_until
from tests.grpc_health import HealthStub

DEADLINE_S = 10.0


class EchoServer:
    """Echoes every byte back; counts connections, bytes and the errors its connections saw."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sock = socket.socket()
        self.sock.bind((host, port))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.accepted = 0
        self.received = bytearray()
        self.errors: list[OSError] = []
        self._conns: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self._conns.append(conn)
            thread = threading.Thread(target=self._echo, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _echo(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                self.received += data
                conn.sendall(data)
        except OSError as e:
            self.errors.append(e)

    def close(self) -> None:
        # shutdown, not only close: it is what wakes a thread blocked in accept() or recv().
        for sock in (self.sock, *self._conns):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(DEADLINE_S)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[FaultProxy]:
    with FaultProxy("127.0.0.1", echo.port, seed=7) as p:
        yield p


def connect(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=DEADLINE_S)


def receive(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def test_without_a_fault_bytes_go_both_ways(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as conn:
        conn.sendall(b"hello")
        assert receive(conn, 5) == b"hello"
    stats = proxy.stats()
    assert (stats.accepted, stats.bytes_up, stats.bytes_down, stats.bytes_dropped) == (1, 5, 5, 0)
    assert echo.received == b"hello"


def test_latency_delays_each_way_and_jitter_keeps_the_order(proxy: FaultProxy) -> None:
    latency_ms = 100
    proxy.set_fault(Fault.latency(latency_ms))
    with connect(proxy) as conn:
        began = time.monotonic()
        conn.sendall(b"ping")
        assert receive(conn, 4) == b"ping"
        # A lower bound, which the proxy guarantees: nothing is delivered before its time.
        assert time.monotonic() - began >= 2 * latency_ms / 1000

        proxy.set_fault(Fault.latency(20, jitter_ms=20))
        sent = b"".join(f"{i:05d}".encode() for i in range(400))
        for i in range(0, len(sent), 50):
            conn.sendall(sent[i : i + 50])
        assert receive(conn, len(sent)) == sent


def test_reset_resets_open_connections_and_new_ones_until_lifted(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    with connect(proxy) as conn:
        conn.sendall(b"before")
        assert receive(conn, 6) == b"before"
        proxy.set_fault(Fault.reset())
        with pytest.raises(ConnectionResetError):
            conn.recv(1)
    # The target's side was reset too.
    wait_until(
        lambda: any(isinstance(e, ConnectionResetError) for e in echo.errors),
        DEADLINE_S,
        "the target to see the reset",
    )
    # So soon that the RST may be what the connect() itself returns.
    with pytest.raises(ConnectionResetError), connect(proxy) as fresh:
        fresh.recv(1)
    proxy.set_fault(Fault.none())
    with connect(proxy) as healed:
        healed.sendall(b"after")
        assert receive(healed, 5) == b"after"
    assert proxy.stats().resets == 2


def test_blackhole_reads_and_answers_nothing(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as conn:
        conn.sendall(b"one")
        assert receive(conn, 3) == b"one"
        proxy.set_fault(Fault.blackhole())
        conn.sendall(b"lost")
        newcomer = connect(proxy)
        newcomer.sendall(b"void")
        wait_until(lambda: proxy.stats().bytes_dropped == 8, DEADLINE_S, "8 bytes dropped")
        # Everything sent is accounted for as dropped: none of it reached the target.
        assert echo.received == b"one"
        assert echo.accepted == 1
        conn.setblocking(False)
        with pytest.raises(BlockingIOError):
            conn.recv(1)

        proxy.set_fault(Fault.none())
        # The connection accepted under the blackhole never had a target: reset.
        with newcomer, pytest.raises(ConnectionResetError):
            newcomer.recv(1)
        # The older one goes on; what was dropped stays dropped.
        conn.setblocking(True)
        conn.sendall(b"two")
        assert receive(conn, 3) == b"two"
    assert echo.received == b"onetwo"


def test_half_open_forwards_up_and_drops_down(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as conn:
        proxy.set_fault(Fault.half_open())
        conn.sendall(b"up")
        wait_until(lambda: echo.received == b"up", DEADLINE_S, "the bytes at the target")
        wait_until(lambda: proxy.stats().bytes_dropped == 2, DEADLINE_S, "the echo dropped")
        conn.setblocking(False)
        with pytest.raises(BlockingIOError):
            conn.recv(1)
        assert proxy.stats().links_open == 1

        proxy.set_fault(Fault.none())
        conn.setblocking(True)
        conn.sendall(b"back")
        assert receive(conn, 4) == b"back"


@pytest.mark.slow
def test_grpc_through_the_proxy_feels_each_fault(tmp_path: Path) -> None:
    with (
        BrokerProcess(tmp_path / "store") as broker,
        FaultProxy("127.0.0.1", broker.port) as proxy,
        grpc.insecure_channel(proxy.endpoint) as channel,
    ):
        stub = HealthStub(channel)

        def check(timeout_s: float = DEADLINE_S, wait_for_ready: bool = False) -> int:
            response = stub.Check(
                health_pb2.HealthCheckRequest(), timeout=timeout_s, wait_for_ready=wait_for_ready
            )
            return int(response.status)

        assert check() == health_pb2.HealthCheckResponse.SERVING
        proxy.set_fault(Fault.blackhole())
        with pytest.raises(grpc.RpcError) as silent:
            check(timeout_s=1.0)
        assert silent.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        proxy.set_fault(Fault.reset())
        with pytest.raises(grpc.RpcError) as reset:
            check()
        assert reset.value.code() == grpc.StatusCode.UNAVAILABLE
        proxy.set_fault(Fault.none())
        # The channel reconnects on its own back-off: a call that waits for it.
        assert check(3 * DEADLINE_S, wait_for_ready=True) == health_pb2.HealthCheckResponse.SERVING


def test_target_port_0_is_the_proxys_own_port_on_another_address() -> None:
    with FaultProxy("127.0.0.2", 0) as proxy:
        assert proxy.target_port == proxy.port
        echo = EchoServer("127.0.0.2", proxy.port)
        try:
            with connect(proxy) as conn:
                conn.sendall(b"same port")
                assert receive(conn, 9) == b"same port"
        finally:
            echo.close()


def test_a_bad_latency_is_refused_naming_its_field() -> None:
    with pytest.raises(ValueError, match=f"latency_ms must be within 0..{LATENCY_MS_MAX}"):
        Fault.latency(-1)
    with pytest.raises(ValueError, match="jitter_ms"):
        Fault.latency(10, jitter_ms=LATENCY_MS_MAX + 1)


def test_stop_closes_the_listener_and_every_connection(echo: EchoServer) -> None:
    proxy = FaultProxy("127.0.0.1", echo.port).start()
    try:
        conn = connect(proxy)
        conn.sendall(b"x")
        assert receive(conn, 1) == b"x"
    finally:
        proxy.stop()
    with conn:
        assert conn.recv(1) == b""
    with pytest.raises(ConnectionRefusedError):
        connect(proxy)
    assert not [t for t in threading.enumerate() if t.name.startswith("fault proxy")]
