"""A run in process allocates from the C library's allocator and puts Arrow's default pool back
after it, whether it ended well or not (reconcile/arrow_memory.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from reconcile.arrow_memory import system_memory_pool


def test_the_pool_is_the_system_one_during_the_run_and_the_default_after() -> None:
    before = pa.default_memory_pool().backend_name
    with system_memory_pool():
        assert pa.default_memory_pool().backend_name == "system"
        kept = pa.array(range(1_000))
    assert pa.default_memory_pool().backend_name == before
    assert kept.sum().as_py() == sum(range(1_000))  # a buffer of the run outlives it intact


def test_a_failed_run_puts_the_pool_back() -> None:
    before = pa.default_memory_pool().backend_name
    with pytest.raises(RuntimeError), system_memory_pool():
        raise RuntimeError("the run failed")
    assert pa.default_memory_pool().backend_name == before
