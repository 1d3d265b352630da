"""A store-writing child process for the crash tests: run it, read its ACK lines, kill it.

    python -m tests.broker.store.crash_writer STORE_DIR FLUSH_TYPE THREADS MESSAGES_MAX [--suicide]

Each of THREADS threads puts messages ``t<thread>-<n>`` (keys ``k<thread>-<n>``) and, only after
``put_messages`` returned a stored status, prints ``ACK <msg_id> <phy_offset> <queue_id>
<queue_offset> <status>``. A line on stdout therefore proves the store answered that put. With
``--suicide`` the process SIGKILLs itself after the last put instead of shutting down.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from broker.store.codec.message import MessageExtBrokerInner
from broker.store.config import FlushDiskType, MessageStoreConfig
from broker.store.message_store import DefaultMessageStore

QUEUES = 4


def small_config(store_dir: Path, flush: FlushDiskType) -> MessageStoreConfig:
    """The geometry the crash tests use: several segments within a few thousand messages."""
    return MessageStoreConfig(
        store_dir,
        mapped_file_size_commit_log_bytes=256 * 1024,
        message_size_bytes_max=16 * 1024,
        mapped_file_size_consume_queue_entries=128,
        hash_slot_num=4096,
        index_num_max=16384,
        flush_disk_type=flush,
        flush_interval_consume_queue_ms=50,
    )


def main() -> None:
    store_dir, flush_name, threads_text, max_text = sys.argv[1:5]
    suicide = "--suicide" in sys.argv[5:]
    store = DefaultMessageStore(
        small_config(Path(store_dir), FlushDiskType(flush_name)), ("127.0.0.1", 10911)
    )
    store.start()
    out_lock = threading.Lock()
    per_thread = int(max_text) // int(threads_text)

    def write(thread_no: int) -> None:
        for n in range(per_thread):
            msg_id = f"t{thread_no}-{n}"
            body = (msg_id.encode() * 40)[: 200 + (n * 37) % 700]
            msg = MessageExtBrokerInner(
                topic="CrashTopic",
                body=body,
                queue_id=(thread_no + n) % QUEUES,
                properties={"UNIQ_KEY": msg_id, "KEYS": f"k{thread_no}-{n}", "TAGS": "crash"},
            )
            [result] = store.put_messages([msg])
            if result.append is None or not result.ok:
                continue
            a = result.append
            fields = (msg_id, a.wrote_offset, msg.queue_id, a.queue_offset, result.status.value)
            line = "ACK " + " ".join(map(str, fields)) + "\n"
            with out_lock:
                sys.stdout.write(line)
                sys.stdout.flush()

    workers = [threading.Thread(target=write, args=(t,)) for t in range(int(threads_text))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if suicide:
        os.kill(os.getpid(), signal.SIGKILL)
    store.shutdown()
    sys.stdout.write("DONE\n")


if __name__ == "__main__":
    main()
