"""A claiming child process for the shared-outbox tests: run it, wait for READY, send GO.

    python -m tests.outbox.conformance.claimer URL OWNER NOW_MS LIMIT

It opens the outbox at URL, prints ``READY`` and waits for a line on stdin, so that two claimers
start claiming together. Then it claims (at NOW_MS, with a lease far longer than the test, LIMIT
at a time) until a claim comes back empty, printing ``CLAIMED <message_id>`` for every entry it
got, and ``DONE`` at the end. A line on stdout therefore means the outbox leased that entry to it.
"""

from __future__ import annotations

import sys

from outbox import open_outbox

LEASE_MS = 3_600_000


def main() -> None:
    url, owner, now_text, limit_text = sys.argv[1:5]
    with open_outbox(url) as outbox:
        sys.stdout.write("READY\n")
        sys.stdout.flush()
        sys.stdin.readline()
        while batch := outbox.claim_due(int(now_text), int(limit_text), LEASE_MS, owner):
            sys.stdout.write("".join(f"CLAIMED {e.message_id}\n" for e in batch))
        sys.stdout.write("DONE\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
