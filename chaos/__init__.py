"""The chaos suite (``python -m chaos``, ``make chaos``): exactly one answer per message under
faults, measured end to end against real processes and real services.

The parts, each a class with ``start``/``stop`` that is also a context manager and stops
everything it started, even when the block raises:

- ``chaos.processes``: rocketbox broker and sidecar processes, signalled (SIGKILL, SIGTERM,
  SIGSTOP) and restarted on the ports they bound first, so their clients reconnect;
- ``chaos.fault_proxy``: a TCP proxy between the sidecar and the broker that applies the faults
  of ``chaos.faults``: latency and jitter, reset connections, black holes, half-open links;
- ``chaos.services``: a private redis-server (AOF, fsync always) and a private MariaDB, each on
  its own port and data directory, killed and restarted;
- ``chaos.disk``: a small tmpfs for an outbox, filled to ENOSPC and freed again.

The rest of the package (the load generator, the checker, the scenarios and the command line)
builds on them.
"""
