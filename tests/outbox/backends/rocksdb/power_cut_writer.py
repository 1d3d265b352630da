"""A RocksDB outbox driven step by step for the power-cut tests (power_cut.py):

    python -m tests.outbox.backends.rocksdb.power_cut_writer PATH SYNC_CLAIMS

reads one command a line on stdin, does it, and only then prints ``DONE <command> <ids...>``:

    put N       puts entries N0 .. N0+N-1 (one synced put; N0 counts on from the last put)
    claim N     claim_due of up to N entries (owner "w"); the ids claimed
    deliver     mark_delivered_many of the entries of the last claim
    quit        closes the outbox

SYNC_CLAIMS is ``true`` or ``false`` (the outbox's ``sync_claims``: false is the behaviour
before claims were synced). A line on stdout therefore says the call had returned.
"""

from __future__ import annotations

import sys
from pathlib import Path

from outbox import OutboxLimits
from outbox.backends.rocksdb.outbox import RocksDBOutbox
from tests.outbox.entries import LEASE_MS, NOW_MS, entry, receipt


def main() -> None:
    path, sync_claims = sys.argv[1:3]
    outbox = RocksDBOutbox(
        Path(path), OutboxLimits(), reserve_bytes=0, sync_claims=sync_claims == "true"
    )
    put = 0
    claimed: list[str] = []
    for line in sys.stdin:
        command, *args = line.split()
        ids: list[str] = []
        if command == "put":
            entries = [entry(n) for n in range(put, put + int(args[0]))]
            put += len(entries)
            ids = [e.message_id for e in outbox.put(entries)]
        elif command == "claim":
            claimed = [e.message_id for e in outbox.claim_due(NOW_MS, int(args[0]), LEASE_MS, "w")]
            ids = claimed
        elif command == "deliver":
            answers = outbox.mark_delivered_many([(i, receipt(0)) for i in claimed])
            assert all(answers), answers
            ids = claimed
        elif command == "quit":
            outbox.close()
        else:
            raise ValueError(f"unknown command {line!r}")
        sys.stdout.write(f"DONE {command} {' '.join(ids)}\n")
        sys.stdout.flush()
        if command == "quit":
            return


if __name__ == "__main__":
    main()
