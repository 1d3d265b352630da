"""Arrow's memory for the runs in this process: the C library's allocator, not Arrow's default.

The in-process engine's tables are a column a million rows long and more, each freed when the
next step has made its own. Arrow's default allocator (mimalloc in the pyarrow wheels) handed
such blocks back to the system and faulted fresh pages in for the next, a large share of a run;
the C library's malloc keeps freed memory for the next block (docs/benchmarks.md). The Spark
engine's tasks hold a bucket's rows, far fewer, where the two did alike.

The pool is Arrow's process-wide default, so it is set for the run and put back after it: a
process that runs a reconciliation beside other work (the tests) keeps its own. A buffer
remembers the pool it came from, so one allocated during the run is freed to it afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa


@contextmanager
def system_memory_pool() -> Iterator[None]:
    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(before)
