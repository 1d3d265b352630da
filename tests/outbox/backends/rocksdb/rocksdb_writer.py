"""A RocksDB outbox writer for the crash test: run it, read its PUT lines, SIGKILL it.

    python -m tests.outbox.backends.rocksdb.rocksdb_writer PATH THREADS PUTS_MAX

Each of THREADS threads puts entries one at a time (so the committer groups concurrent puts) and,
only after ``put`` returned, prints ``PUT <message_id>``. A line on stdout therefore proves the
outbox acknowledged that entry as durable. Odd entries belong to the thread's FIFO group. After
PUTS_MAX entries per thread (a bound, should nobody kill it) it closes the outbox and prints DONE.
"""

from __future__ import annotations

import sys
import threading

from outbox import OutboxLimits
from outbox.backends.rocksdb.outbox import RocksDBOutbox
from tests.outbox.entries import entry


def writer_entry_number(thread_no: int, n: int) -> int:
    return thread_no * 1_000_000 + n


def writer_body(number: int) -> bytes:
    return (f"crash-{number}-".encode() * 80)[: 300 + number % 700]


def writer_group(thread_no: int, n: int) -> str | None:
    return f"g{thread_no}" if n % 2 else None


def main() -> None:
    path, threads_text, puts_text = sys.argv[1:4]
    outbox = RocksDBOutbox.from_url(f"rocksdb://{path}", OutboxLimits())
    out_lock = threading.Lock()

    def write(thread_no: int) -> None:
        for n in range(int(puts_text)):
            number = writer_entry_number(thread_no, n)
            e = entry(number, body=writer_body(number), group=writer_group(thread_no, n))
            outbox.put([e])
            with out_lock:
                sys.stdout.write(f"PUT {e.message_id}\n")
                sys.stdout.flush()

    workers = [threading.Thread(target=write, args=(t,)) for t in range(int(threads_text))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    outbox.close()
    sys.stdout.write("DONE\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
