"""The outbox export: one JSON object per line per entry, the reconciliation's input.

The fields are ``entry_to_dict``'s (outbox/entry.py) without the body: message id, topic, tag,
keys, message group, state, cause, maybe_stored, attempts, last error, seq, times, and for a
delivered entry the broker's queue id and queue offset.
"""

from __future__ import annotations

import json
from typing import TextIO

from outbox.entry import EntryState, entry_to_dict
from outbox.outbox import Outbox


def export_jsonl(outbox: Outbox, out: TextIO, state: EntryState | None = None) -> int:
    """Write every entry (of ``state``) to ``out``; returns how many."""
    written = 0
    for entry in outbox.scan_all(state):
        out.write(json.dumps(entry_to_dict(entry, with_body=False), separators=(",", ":")))
        out.write("\n")
        written += 1
    return written
