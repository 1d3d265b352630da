"""The chaos suite's scenarios: each a fault schedule drawn from the scenario's seed, played on a
stage (chaos/stage.py) while the load runs.

Every scenario starts the load itself (some set a fault up first), injects its faults at seeded
points of the load's progress (a fraction of the messages answered), or once the outbox holds a
seeded share of the messages (a kill that should land while the sidecar spools), holds them for
seeded durations, heals them, and returns; the runner then waits for the drain and checks
(chaos/runner.py).

``no_duplicates``: the scenarios where the suite insists on no duplicate at all, the sidecar's
own restarts against rocketbox's broker (the sidecar checks the broker's index by message id
before any resend it cannot rule out), the power cuts of the outbox's disk (a cut may drop
only what the outbox never synced, and an outbox must sync whatever marks an entry as possibly
sent before it sends it), the long outages (chaos/field_faults.py: a SIGKILLed broker keeps
what it stored, so once it is back its index settles every send the kill left ambiguous; the
outage adds only time), the Cluster reshard (a move loses no write, and a settlement it refuses
leaves the entry to its lease and the index check) and the Sentinel failover with
``wait_replicas=1`` (no acknowledged claim or delivered mark is lost to it). Elsewhere
duplicates are counted and reported: a broker that stored a message and could not say so
(killed mid-answer, stopped, cut off, its power cut) makes delivery at least once.

``messages_max``: a scenario's own bound on its messages, under ``--messages``.
"""

from __future__ import annotations

import random
import signal
from collections.abc import Callable
from dataclasses import dataclass, field

from chaos.faults import Fault
from chaos.field_faults import (
    LONG_OUTAGE_S,
    LONG_OUTAGE_SIDECAR_ARGS,
    cluster_reshard,
    long_outage,
    sentinel_failover,
)
from chaos.load import LoadGenerator
from chaos.power_cut import power_cut
from chaos.processes import KILL_DEADLINE_S, STOP_DEADLINE_S
from chaos.progress import DRAIN_PROGRESS_DEADLINE_S
from chaos.progress import next_point as _next
from chaos.progress import spooling as _spooling
from chaos.stage import BACKENDS, Backend, Stage, StageOptions

Act = Callable[[Stage, random.Random], None]
# The sidecar's link through the fault proxy carries answers again within this long.
LINK_DEADLINE_S = 60.0
# The power cuts' loads (chaos/power_cut.py): enough for a cut to land among writes in flight,
# and a drain of a few thousand entries, as the cut that found duplicates drained 3,000.
POWER_CUT_LOAD_MESSAGES_MAX = 5_000
POWER_CUT_DRAIN_MESSAGES_MAX = 3_000


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    summary: str
    act: Act
    options: StageOptions = field(default_factory=StageOptions)
    no_duplicates: bool = False
    # At most this many messages, whatever --messages asks (the power cuts': their disk is a
    # FUSE filesystem in Python, and a drain of a few thousand entries is what they need).
    messages_max: int | None = None


def broker_signalled(sig: signal.Signals) -> Act:
    def act(stage: Stage, rng: random.Random) -> None:
        broker = stage.broker
        assert broker is not None
        stage.start_load()
        _next(stage, rng, 0.2, 0.4)
        broker.signal(sig)
        stage.event(f"broker {sig.name}")
        if sig is signal.SIGSTOP:
            # Longer than the sidecar's --send-msg-timeout-ms (3 s): sends in flight time out
            # and are spooled AMBIGUOUS, and the broker stores them when it resumes.
            stage.hold(rng.uniform(4.0, 8.0), "broker stopped")
            broker.signal(signal.SIGCONT)
            stage.event("broker SIGCONT")
        else:
            deadline_s = STOP_DEADLINE_S if sig is signal.SIGTERM else KILL_DEADLINE_S
            stage.event("broker exited", code=broker.wait_exit(deadline_s))
            stage.hold(rng.uniform(1.0, 3.0), "broker down")
            broker.restart()
            stage.event("broker restarted")
        stage.healed()

    return act


def sidecar_killed_mid_load(stage: Stage, rng: random.Random) -> None:
    """Killed while it spools: flow control on first, so that the kill lands in outbox writes
    and broker sends alike."""
    sidecar = stage.sidecar
    assert sidecar is not None
    stage.start_load()
    _next(stage, rng, 0.1, 0.25)
    stage.flow_control(True)
    _spooling(stage, rng)
    sidecar.signal(signal.SIGKILL)
    stage.event("sidecar SIGKILL", code=sidecar.wait_exit(KILL_DEADLINE_S))
    sidecar.restart()
    stage.event("sidecar restarted")
    _next(stage, rng, 0.1, 0.2)
    stage.flow_control(False)
    stage.healed()


def _spool_then_drain_part(stage: Stage, load: LoadGenerator, rng: random.Random) -> int:
    """The whole load spooled (flow control on), then the drain let go until a seeded 20-60 %
    of what was pending has left; returns what was pending before the drain."""
    stage.flow_control(True)
    stage.start_load()
    if not load.wait(stage.load_deadline_s):
        raise TimeoutError(f"the load did not end in {stage.load_deadline_s} s")
    stage.event("load ended")
    before = stage.outbox_pending() or 0
    fraction = rng.uniform(0.2, 0.6)
    stage.flow_control(False)
    stage.wait_outbox(
        f"the drain {fraction:.0%} through",
        lambda pending: pending <= before * (1 - fraction),
        DRAIN_PROGRESS_DEADLINE_S,
    )
    return before


def sidecar_killed_mid_drain(stage: Stage, rng: random.Random) -> None:
    """The whole load spooled (flow control on), then the drain, killed part way through."""
    sidecar, load = stage.sidecar, stage.load
    assert sidecar is not None
    assert load is not None
    before = _spool_then_drain_part(stage, load, rng)
    sidecar.signal(signal.SIGKILL)
    stage.event(
        "sidecar SIGKILL mid-drain",
        code=sidecar.wait_exit(KILL_DEADLINE_S),
        pending_before=before,
        pending_at_kill=stage.outbox_pending(),
    )
    sidecar.restart()
    stage.event("sidecar restarted")
    stage.healed()


def flow_control_storm(stage: Stage, rng: random.Random) -> None:
    """Flow control forced on and off, 0.1-1 s each, for as long as the load runs."""
    load = stage.start_load()
    while not load.done:
        stage.flow_control(True)
        stage.hold(rng.uniform(0.1, 1.0), "flow control on")
        stage.flow_control(False)
        stage.hold(rng.uniform(0.1, 1.0), "flow control off")
    stage.healed()


def service_killed(stage: Stage, rng: random.Random) -> None:
    """The outbox's own server (a private redis-server or mariadbd) SIGKILLed while the sidecar
    spools into it, and started again over its data."""
    service = stage.redis or stage.mariadb
    assert service is not None
    stage.start_load()
    _next(stage, rng, 0.1, 0.25)
    stage.flow_control(True)
    _spooling(stage, rng)
    service.kill()
    stage.event(f"{type(service).__name__} SIGKILL")
    stage.hold(rng.uniform(1.0, 3.0), "outbox server down")
    service.start()
    stage.event(f"{type(service).__name__} restarted")
    _next(stage, rng, 0.1, 0.2)
    stage.flow_control(False)
    stage.healed()


def proxy_faults(stage: Stage, rng: random.Random) -> None:
    """Latency with jitter, resets, a black hole and a half-open link between the sidecar and
    the broker, one after another, each for 1-3 s."""
    proxy = stage.proxy
    assert proxy is not None
    faults = [
        Fault.latency(rng.randint(20, 100), rng.randint(10, 50)),
        Fault.reset(),
        Fault.blackhole(),
        Fault.half_open(),
    ]
    load = stage.start_load()
    for fault in faults:
        _next(stage, rng, 0.05, 0.15)
        # Each fault meets a live link: the broker's answers are coming through the proxy again
        # (after a reset or a black hole the sidecar reconnects at its own pace).
        answered_bytes = proxy.stats().bytes_down
        stage.wait(
            lambda: proxy.stats().bytes_down > answered_bytes or load.done,  # noqa: B023 - called within this iteration, before the loop moves on
            LINK_DEADLINE_S,
            "answers through the proxy",
        )
        proxy.set_fault(fault)
        stage.event(f"proxy {fault.kind.value}", latency_ms=fault.latency_ms,
                    jitter_ms=fault.jitter_ms)  # fmt: skip
        stage.hold(rng.uniform(1.0, 3.0), f"proxy {fault.kind.value}")
        proxy.set_fault(Fault.none())
        stage.event("proxy none", stats=repr(proxy.stats()))
    stage.healed()


def disk_full(stage: Stage, rng: random.Random) -> None:
    """The outbox's disk filled while the sidecar spools, and while it drains; then freed."""
    disk = stage.disk
    assert disk is not None
    stage.start_load()
    _next(stage, rng, 0.1, 0.25)
    stage.flow_control(True)
    _spooling(stage, rng)
    disk.fill()
    stage.event("outbox disk full")
    stage.hold(rng.uniform(1.0, 3.0), "spooling onto a full disk")
    stage.flow_control(False)
    stage.hold(rng.uniform(1.0, 3.0), "draining from a full disk")
    disk.free()
    stage.event("outbox disk freed")
    stage.healed()


def power_cut_mid_load(stage: Stage, rng: random.Random) -> None:
    """The power-loss disk's machine loses power mid-load: the broker's (its store on the disk),
    or the outbox's while the sidecar spools into it (flow control on)."""
    stage.start_load()
    _next(stage, rng, 0.2, 0.4)
    spooling = stage.options.power_loss == "outbox"
    if spooling:
        stage.flow_control(True)
        _spooling(stage, rng)
    power_cut(stage, rng.uniform(1.0, 3.0))
    _next(stage, rng, 0.1, 0.2)
    if spooling:
        stage.flow_control(False)
    stage.healed()


def power_cut_mid_drain(stage: Stage, rng: random.Random) -> None:
    """The whole load spooled (flow control on), then the drain into a live broker, and the
    outbox's machine loses power 20-60 % into it; back up, the drain goes on to its end."""
    load = stage.load
    assert load is not None
    before = _spool_then_drain_part(stage, load, rng)
    stage.event("power cut mid-drain", pending_before=before, pending_at_cut=stage.outbox_pending())
    power_cut(stage, rng.uniform(1.0, 3.0))
    stage.healed()


def _power_cut_scenarios() -> list[Scenario]:
    out = [
        Scenario("power-cut-broker", "power cut of the broker's disk (SYNC_FLUSH store) mid-load",
                 power_cut_mid_load, StageOptions(power_loss="broker"),
                 messages_max=POWER_CUT_LOAD_MESSAGES_MAX),
    ]  # fmt: skip
    for backend in BACKENDS:
        options = StageOptions(backend=backend, power_loss="outbox")
        name = _BACKEND_NAMES[backend]
        out.append(
            Scenario(
                f"power-cut-load-{backend}",
                f"power cut of the {name} outbox's disk while the sidecar spools, restarted",
                power_cut_mid_load,
                options,
                no_duplicates=True,
                messages_max=POWER_CUT_LOAD_MESSAGES_MAX,
            )
        )
        out.append(
            Scenario(
                f"power-cut-drain-{backend}",
                f"power cut of the {name} outbox's disk mid-drain into a live broker, restarted",
                power_cut_mid_drain,
                options,
                no_duplicates=True,
                messages_max=POWER_CUT_DRAIN_MESSAGES_MAX,
            )
        )
    return out


def _backend_scenarios() -> list[Scenario]:
    out = []
    for backend in BACKENDS:
        options = StageOptions(backend=backend)
        out.append(
            Scenario(
                f"sidecar-kill-load-{backend}",
                f"sidecar SIGKILL mid-load while it spools ({_BACKEND_NAMES[backend]} outbox), "
                "restarted",
                sidecar_killed_mid_load,
                options,
                no_duplicates=True,
            )
        )
        out.append(
            Scenario(
                f"sidecar-kill-drain-{backend}",
                f"sidecar SIGKILL mid-drain ({_BACKEND_NAMES[backend]} outbox), restarted",
                sidecar_killed_mid_drain,
                options,
                no_duplicates=True,
            )
        )
    return out


def _field_scenarios() -> list[Scenario]:
    out = [
        Scenario(
            f"long-outage-{backend}",
            f"broker SIGKILL mid-load, down {LONG_OUTAGE_S:.0f} s while the sidecar spools and "
            f"probes at a 10-50 ms back-off ({_BACKEND_NAMES[backend]} outbox): nothing DEAD",
            long_outage,
            StageOptions(backend=backend, sidecar_args=LONG_OUTAGE_SIDECAR_ARGS),
            no_duplicates=True,
        )
        for backend in BACKENDS
    ]
    out.append(Scenario(
        "redis-cluster-reshard", "the Redis Cluster outbox's slot moved to another master while "
        "the sidecar spools and drains (flow control storming), drained by the same sidecar",
        cluster_reshard, StageOptions(backend="redis-cluster"), no_duplicates=True,
    ))  # fmt: skip
    out.append(Scenario(
        "redis-sentinel-failover", "SENTINEL FAILOVER of the Sentinel outbox's master "
        "(wait_replicas=1) while the sidecar spools and drains (flow control storming)",
        sentinel_failover, StageOptions(backend="redis-sentinel"), no_duplicates=True,
    ))  # fmt: skip
    return out


_BACKEND_NAMES: dict[Backend, str] = {"rocksdb": "RocksDB", "redis": "Redis", "mysql": "MariaDB"}

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario("broker-sigkill", "broker SIGKILL mid-load, restarted",
                 broker_signalled(signal.SIGKILL)),
        Scenario("broker-sigterm", "broker SIGTERM mid-load, restarted",
                 broker_signalled(signal.SIGTERM)),
        Scenario("broker-sigstop", "broker SIGSTOP mid-load for 4-8 s, then SIGCONT",
                 broker_signalled(signal.SIGSTOP)),
        *_backend_scenarios(),
        Scenario("flow-control-storm", "broker flow control forced on and off every 0.1-1 s",
                 flow_control_storm),
        Scenario("redis-kill", "the outbox's redis-server (AOF, fsync always) SIGKILL, "
                 "restarted", service_killed, StageOptions(backend="redis")),
        Scenario("mariadb-kill", "the outbox's mariadbd SIGKILL, restarted", service_killed,
                 StageOptions(backend="mysql")),
        Scenario("proxy-faults", "sidecar-broker link: latency and jitter, resets, black hole, "
                 "half open", proxy_faults, StageOptions(proxy=True)),
        Scenario("disk-full", "the outbox's disk (tmpfs) full while spooling and draining",
                 disk_full, StageOptions(small_disk=True)),
        *_power_cut_scenarios(),
        *_field_scenarios(),
    ]
}  # fmt: skip
# The `make test` runs (tests/chaos/test_chaos_short.py), with a few thousand messages.
SHORT_SCENARIOS = ("broker-sigkill", "sidecar-kill-drain-rocksdb", "power-cut-drain-rocksdb")
