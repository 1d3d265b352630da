"""A putting child process for the process-kill test: run it, read its lines, SIGKILL it.

    python -m tests.outbox.conformance.putter URL COUNT

It opens the outbox at URL and puts entries 1..COUNT (tests/outbox/entries.py), one ``put``
each, printing ``PUT <message_id>`` only after that ``put`` returned; then ``HELD``, and it waits
on stdin with the outbox still open, for the test to kill it. A PUT line therefore proves the
outbox acknowledged that entry.
"""

from __future__ import annotations

import sys

from outbox import open_outbox
from tests.outbox.entries import entry


def main() -> None:
    url, count_text = sys.argv[1:3]
    outbox = open_outbox(url)
    for n in range(1, int(count_text) + 1):
        e = entry(n)
        outbox.put([e])
        sys.stdout.write(f"PUT {e.message_id}\n")
        sys.stdout.flush()
    sys.stdout.write("HELD\n")
    sys.stdout.flush()
    sys.stdin.readline()  # killed before this returns; closed without a kill, as a bound
    outbox.close()


if __name__ == "__main__":
    main()
